"""Per-request records: the source of truth for every figure loadgate prints.

`records.jsonl` holds one JSON object per request, written (append + flush) as each request
finishes, so a crash loses at most the requests in flight and memory stays flat however long the
run. All times are integer nanoseconds of `time.perf_counter_ns()` relative to the run's origin
`t0_ns` (kept in `meta.json`).

Schema version 1 — fields of one record:
  v                  schema version (1)
  i                  index in the request plan (warmup requests first)
  warmup             true for warmup requests (excluded from every figure)
  level              the load level this request belongs to: concurrency (closed loop) or rate
  intended_ns        intended start (open loop) or null (closed loop)
  ready_ns           when the client was ready to send it (closed loop: a worker was free;
                     open loop: the schedule said go and a slot under max_in_flight was free)
  start_ns           when the POST began
  headers_ns         when the response headers arrived (null if none)
  end_ns             when the last byte arrived or the request failed
  status             HTTP status or null
  error              null or {"kind": ..., "detail": ...}; kinds: http_status, timeout,
                     disconnect, malformed, error_event, connect, empty
  prompt_tokens_planned, output_tokens_planned   what the plan asked for
  prompt_tokens, completion_tokens               what the server reported (null if it did not)
  chunk_ns           arrival time of each content-bearing chunk, relative to start_ns
  chunk_tokens       tokens carried by each of those chunks
  token_source       where chunk token counts came from: ids, usage, meta_info, logprobs,
                     one_per_chunk
  finish_reason      as the engine said it (normalized to "length" / "stop" where possible)
  stamp              "kernel" (socket receive timestamps, SO_TIMESTAMPNS) or "user" (time the
                     client's loop read the data)
  read_lag_max_ns    kernel stamps only: the longest wait between data reaching the socket and
                     the client's loop reading it (how busy the client was)
  new_connection     true when the request opened a TCP connection first (its TTFT includes the
                     connect), false on a kept-alive one, null where unknown (aiohttp transport);
                     (absent from records of older loadgate versions)
  spec               null or {source, verify_steps, draft_tokens, accepted,
                     reported_acceptance_length}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from loadgate.errors import UsageError

SCHEMA_VERSION = 1


class RecordWriter:
    """Appends records to a JSONL file, flushing each line so nothing finished is ever lost."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f: IO[bytes] = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self.count += 1

    def append_file(self, part: Path) -> int:
        """Append the whole lines of another records file (a worker's part); returns how many."""
        n = 0
        with open(part, "rb") as src:
            for line in src:
                if line.endswith(b"\n"):
                    self._f.write(line)
                    n += 1
        self.count += n
        return n

    def close(self) -> None:
        try:
            os.fsync(self._f.fileno())
        except OSError:
            pass
        self._f.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: Path, *, include_warmup: bool = False) -> Iterator[dict[str, Any]]:
    """Yield records from a records.jsonl, skipping warmup ones unless asked; a torn last line
    (a crash mid-write) is skipped."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise UsageError(f"{path}:{lineno}: not a JSON record ({e})") from None
            if not isinstance(rec, dict) or rec.get("v") != SCHEMA_VERSION:
                got = rec.get("v") if isinstance(rec, dict) else None
                raise UsageError(f"{path}:{lineno}: record schema v{got} is not supported (want v{SCHEMA_VERSION})")
            if include_warmup or not rec.get("warmup"):
                yield rec
