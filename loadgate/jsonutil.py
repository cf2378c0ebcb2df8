"""JSON files: infinities written as the string "inf" (JSON has none), written atomically (a temp
file beside, then a rename: a reader never sees half a file), registered secrets masked, and a
full disk or an I/O error reported as `ResultsNotWritten` (exit 4) naming the file."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

import orjson

from loadgate.errors import ResultsNotWritten, UsageError
from loadgate.secrets import redact_bytes


def clean(x: Any) -> Any:
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def _restore(x: Any) -> Any:
    if x == "inf":
        return float("inf")
    if x == "-inf":
        return float("-inf")
    if isinstance(x, dict):
        return {k: _restore(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_restore(v) for v in x]
    return x


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temp file and a rename, secrets masked."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(redact_bytes(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ResultsNotWritten(f"{path}: cannot write: {e.strerror or e}") from None


def dump_json(path: Path, obj: Any) -> None:
    write_atomic(path, orjson.dumps(clean(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def load_json(path: Path) -> Any:
    """The JSON document at `path`; an unreadable or malformed file is a UsageError naming it."""
    try:
        return _restore(orjson.loads(path.read_bytes()))
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e}); the run may have been cut short") from None
