"""A run folder's own state (`state.json`): whether the run that wrote it finished.

`running` from the moment the folder exists; `final` with the exit code once the run wrote its
summary and verdict; `stopped` with the exit code where it ended on an error first (4: its results
could not be written). A folder whose state is not `final` did not finish: `loadgate report` judges
it INCOMPLETE (`loadgate.verdict`). Folders written before this file existed have none and are
judged as then. (`stop.json` keeps its own meaning: the gate or a signal stopped the run.)

The file is written once at its full size (padded with spaces, which JSON allows) and rewritten in
place, so marking a run on a full disk needs no new block.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import orjson

STATE_FILE = "state.json"
SIZE = 512


def write_state(run_dir: Path, state: str, code: int | None = None) -> None:
    """Mark the run folder `state` (best effort: a folder that cannot be marked is judged by what
    it holds)."""
    doc = {"state": state, "code": code, "pid": os.getpid(), "host": socket.gethostname()}
    data = orjson.dumps(doc)[: SIZE - 1].ljust(SIZE - 1) + b"\n"
    with contextlib.suppress(OSError):
        fd = os.open(run_dir / STATE_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """The folder's state, or None where it has no state file (written before there was one). A
    file that cannot be read counts as a run that did not finish."""
    path = run_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {"state": "unreadable", "code": None}
    return doc if isinstance(doc, dict) else {"state": "unreadable", "code": None}
