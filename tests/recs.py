"""Hand-built records for tests of pure functions: `make_record(**fields)` fills what a test
does not care about with a successful, closed-loop request's values."""

from __future__ import annotations

from typing import Any

from loadgate.records import Record

_DEFAULTS: dict[str, Any] = {
    "i": 0, "warmup": False, "level": 1, "intended_ns": None, "ready_ns": 0, "start_ns": 0, "headers_ns": None,
    "end_ns": 0, "status": 200, "error": None, "prompt_tokens_planned": None, "output_tokens_planned": 0,
    "prompt_tokens": None, "completion_tokens": None, "chunk_ns": [], "chunk_tokens": [], "spec": None,
}


def make_record(**fields: Any) -> Record:
    """A record with `fields` (JSON shapes: `error` and `spec` as objects) over the defaults; chunks
    given only by their token counts arrive 1 ms apart."""
    if "chunk_tokens" in fields and "chunk_ns" not in fields:
        fields["chunk_ns"] = [1_000_000 * (k + 1) for k in range(len(fields["chunk_tokens"]))]
    return Record.from_json({"v": 2, **_DEFAULTS, **fields})
