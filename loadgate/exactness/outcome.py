"""Why an exactness check is not established, in words every stage can import: the verdict and the
gate name it without importing the live check (`loadgate.exactness.check`, which pulls in the
transport)."""

from __future__ import annotations

RETRIES = 2  # a failed request is sent again at most this many times
SHOWN_BY_NOTHING = ("protocol/", "sampling/", "stable/")  # not-established items that are not lost requests


def lost_requests(items: list[str]) -> list[str]:
    """The not-established items that are requests failed in transport ("scenario/case"), as
    opposed to checks that showed nothing (protocol, sampling, stability)."""
    return [x for x in items if not x.startswith(SHOWN_BY_NOTHING)]


def not_established_words(items: list[str]) -> str:
    """Why a check is not established, in one line: its lost requests apart from the checks that
    showed nothing (the same words for `loadgate run`, `check` and `report`)."""
    lost = lost_requests(items)
    own = [x for x in items if x not in lost]
    parts = []
    if lost:
        parts.append(f"{len(lost)} request(s) of the check failed in transport after {RETRIES} retries "
                     f"({', '.join(lost[:5])}{' …' if len(lost) > 5 else ''}); nothing was compared for them")
    if own:
        parts.append("shown by nothing: " + "; ".join(own[:5]))
    return "exactness not established: " + "; ".join(parts)
