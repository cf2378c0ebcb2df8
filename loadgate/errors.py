"""Exception hierarchy. Each error carries the process exit code it maps to (an API: see README).

| code | meaning |
|---|---|
| 0  | everything passed |
| 1  | internal error (a bug in loadgate) |
| 2  | usage or profile error |
| 3  | engine unreachable / setup failure |
| 10 | exactness failed |
| 11 | exactness not established for this configuration (no attestation, fingerprint changed) |
| 20 | a performance threshold failed |
| 21 | regression against baseline |
| 22 | comparison inconclusive |
| 30 | measurement invalid (client was the bottleneck, token counts off plan, contamination) |
"""

from __future__ import annotations


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
        key = f" {path}:" if path else ""
        super().__init__(f"{where}:{key} {reason}")
        self.file, self.line, self.path, self.reason = file, line, path, reason


class EngineError(LoadgateError):
    exit_code = 3


class ExactnessFailed(LoadgateError):
    exit_code = 10


class ExactnessNotEstablished(LoadgateError):
    exit_code = 11


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
    10: "exactness failed",
    11: "exactness not established for this configuration",
    20: "a performance threshold failed",
    21: "regression against baseline",
    22: "comparison inconclusive",
    30: "measurement invalid",
}
