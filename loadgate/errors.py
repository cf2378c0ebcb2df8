"""Exception hierarchy. Each error carries the process exit code it maps to (an API: see README).

| code | meaning |
|---|---|
| 0  | everything passed |
| 1  | internal error (a bug in loadgate) |
| 2  | usage or profile error |
| 3  | engine unreachable / setup failure |
| 4  | results could not be written (disk full, I/O error); every complete record line is kept |
| 5  | the run folder is damaged (truncated or corrupt records); the report shows what was readable |
| 10 | exactness failed |
| 11 | exactness not established for this configuration (no attestation, fingerprint changed, requests of the check kept failing after 2 retries) |
| 12 | `fingerprint --against`: the engine's fingerprint differs from the saved one |
| 20 | a performance threshold failed |
| 21 | regression against baseline |
| 22 | comparison inconclusive |
| 30 | measurement invalid (stamps off by more than the budget, open loop late, token counts off plan, contamination) |
| 130 | interrupted by SIGINT (Ctrl-C): finished records kept, summary marked interrupted |
| 143 | interrupted by SIGTERM: the same |
"""

from __future__ import annotations


def one_line(text: str) -> str:
    """Control characters (a newline in a key someone wrote) shown escaped: a message stays one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class LoadgateError(Exception):
    """Base class: a one-line message meant for the user, and an exit code."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(LoadgateError):
    exit_code = 2


class ProfileError(UsageError):
    """A profile that does not validate: the message names file, line, key path and expectation."""

    def __init__(self, file: str, line: int | None, path: str, reason: str) -> None:
        where = f"{file}:{line}" if line else file
        key = f" {one_line(path)}:" if path else ""
        super().__init__(f"{where}:{key} {one_line(reason)}")
        self.file, self.line, self.path, self.reason = file, line, path, reason


class EngineError(LoadgateError):
    exit_code = 3


class ResultsNotWritten(LoadgateError):
    """A results file could not be written (ENOSPC, EIO, …): complete lines are kept."""

    exit_code = 4


class RunDamaged(LoadgateError):
    exit_code = 5


class Interrupted(LoadgateError):
    """SIGINT (130) or SIGTERM (143) stopped the run; what finished was written."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class ExactnessFailed(LoadgateError):
    exit_code = 10


class ExactnessNotEstablished(LoadgateError):
    exit_code = 11


class FingerprintsDiffer(LoadgateError):
    exit_code = 12


class ThresholdFailed(LoadgateError):
    exit_code = 20


class Regression(LoadgateError):
    exit_code = 21


class Inconclusive(LoadgateError):
    exit_code = 22


class MeasurementInvalid(LoadgateError):
    exit_code = 30


EXIT_CODES: dict[int, str] = {
    0: "everything passed",
    1: "internal error",
    2: "usage or profile error",
    3: "engine unreachable or setup failure",
    4: "results could not be written",
    5: "run folder damaged or cut short",
    10: "exactness failed",
    11: "exactness not established for this configuration",
    12: "the fingerprint differs from the saved one",
    20: "a performance threshold failed",
    21: "regression against baseline",
    22: "comparison inconclusive",
    30: "measurement invalid",
    130: "interrupted (SIGINT)",
    143: "interrupted (SIGTERM)",
}
