"""The exit codes (one table, `Exit`: an API, the README's table is checked against it) and the
exceptions that end a command with one of them."""

from __future__ import annotations

from enum import IntEnum

_INTERRUPTED = ("interrupted by SIGINT (Ctrl-C) or SIGTERM: finished records and a summary marked interrupted "
                "are written, child processes stopped")  # the README's one row for 130 and 143


class Exit(IntEnum):
    """Every exit code loadgate gives: its value, the outcome a verdict with it names by default,
    a few words (`--help`, reports) and the README's meaning. No code gets a second meaning."""

    outcome: str
    words: str
    meaning: str

    def __new__(cls, value: int, outcome: str, words: str, meaning: str) -> Exit:
        member = int.__new__(cls, value)
        member._value_ = value
        member.outcome, member.words, member.meaning = outcome, words, meaning
        return member

    PASSED = 0, "passed", "everything passed", "everything passed"
    INTERNAL = 1, "internal", "internal error", \
        "internal error (a bug in loadgate; `LOADGATE_DEBUG=1` shows the traceback)"
    USAGE = 2, "usage", "usage or profile error", "usage or profile error"
    ENGINE = 3, "engine", "engine unreachable or setup failure", \
        "engine unreachable, setup failure (also: the open-file limit is too low for the concurrency)"
    NOT_WRITTEN = 4, "not written", "results could not be written", \
        "results could not be written (disk full, I/O error); every complete record line is kept"
    DAMAGED = 5, "damaged", "run folder damaged or cut short", \
        ("the run folder is damaged or was cut short (corrupt or cut record lines, or a run that never "
         "finished); the report names what is missing and shows what was readable")
    EXACTNESS_FAILED = 10, "exactness", "exactness failed", "exactness failed: compared tokens missed the contract"
    NOT_ESTABLISHED = 11, "not established", "exactness not established for this configuration", \
        ("exactness not established for this configuration (no check passed for this fingerprint, the run was "
         "`--unverified`, or requests of the check kept failing after 2 retries: nothing compared)")
    FINGERPRINT_DIFFERS = 12, "fingerprint", "the fingerprint differs from the saved one", \
        ("`loadgate fingerprint --against FILE`: the engine's fingerprint differs from the saved one "
         "(the fields are printed)")
    THRESHOLD = 20, "threshold", "a performance threshold failed, or a level was aborted on one", \
        ("a performance threshold failed, or a level was aborted on one (`load.abort`, or a threshold's "
         "`abort_on_fail`: ABORTED)")
    REGRESSED = 21, "regressed", "regression against baseline", "regression against the baseline"
    INCONCLUSIVE = 22, "inconclusive", "comparison inconclusive", "comparison inconclusive"
    INVALID = 30, "invalid", "measurement invalid", \
        ("measurement invalid: the client's stamps may be off by more than `health.stamp_error_p99_ms` (or an "
         "open loop started late), token counts were off the plan, other traffic reached the server during "
         "the window, no request of a level succeeded and no threshold judged it, or (`load.distributed`) part of "
         "the plan was not sent (a Ray actor was lost: its node and actor are named) or a host's clock offset "
         "was known worse than `health.clock_offset_ms`")
    SIGINT = 130, "interrupted", "interrupted (SIGINT)", \
        _INTERRUPTED
    SIGTERM = 143, "interrupted", "interrupted (SIGTERM)", \
        _INTERRUPTED


EXIT_CODES: dict[int, str] = {int(e): e.words for e in Exit}  # code -> its few words


def one_line(text: str) -> str:
    """Control characters (a newline in a key someone wrote) shown escaped: a message stays one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class LoadgateError(Exception):
    """Base class: a one-line message meant for the user, and an exit code."""

    exit_code: int = Exit.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(LoadgateError):
    exit_code = Exit.USAGE


class ProfileError(UsageError):
    """A profile that does not validate: the message names file, line, key path and expectation."""

    def __init__(self, file: str, line: int | None, path: str, reason: str) -> None:
        where = f"{file}:{line}" if line else file
        key = f" {one_line(path)}:" if path else ""
        super().__init__(f"{where}:{key} {one_line(reason)}")
        self.file, self.line, self.path, self.reason = file, line, path, reason


class EngineError(LoadgateError):
    exit_code = Exit.ENGINE


class ResultsNotWritten(LoadgateError):
    """A results file could not be written (ENOSPC, EIO, …): complete lines are kept."""

    exit_code = Exit.NOT_WRITTEN


class Interrupted(LoadgateError):
    """SIGINT (130) or SIGTERM (143) stopped the run; what finished was written."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class ExactnessFailed(LoadgateError):
    exit_code = Exit.EXACTNESS_FAILED


class ExactnessNotEstablished(LoadgateError):
    exit_code = Exit.NOT_ESTABLISHED


class FingerprintsDiffer(LoadgateError):
    exit_code = Exit.FINGERPRINT_DIFFERS
