"""The recorded engine responses the project was given (`shared/fixtures/` beside the repository),
kept in the repository under tests/data/shared-fixtures/ so that a clean clone tests against them.
$LOADGATE_SHARED points at another `shared/` folder to test against its fixtures instead."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # committed test inputs: recorded responses, run folders of older versions


def fixtures_dir() -> Path:
    env = os.environ.get("LOADGATE_SHARED")
    return Path(env) / "fixtures" if env else REPO / "tests" / "data" / "shared-fixtures"


def sse_events(path: Path) -> list[tuple[int, bytes]]:
    """A recorded SSE stream's events, event k arriving at "time" k; the stream must be complete."""
    from loadgate.load.sse import frame_sse

    events, truncated = frame_sse([(0, path.read_bytes())])
    assert not truncated, path
    return [(k, e.data) for k, e in enumerate(events)]


def fixture_file(*parts: str) -> Path:
    """A recorded response; a missing one is an error (the suite must not pass by skipping)."""
    p = fixtures_dir().joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"recorded fixture {p} is missing")
    return p
