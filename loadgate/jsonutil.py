"""JSON with infinities: JSON has no +inf, so summaries write it as the string "inf"."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from loadgate.errors import UsageError


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


def dump_json(path: Path, obj: Any) -> None:
    path.write_bytes(orjson.dumps(clean(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def load_json(path: Path) -> Any:
    """The JSON document at `path`; an unreadable or malformed file is a UsageError naming it."""
    try:
        return _restore(orjson.loads(path.read_bytes()))
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e}); the run may have been cut short") from None
