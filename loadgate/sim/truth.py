"""The ground-truth log: what the simulator really did for each request, for checking clients.

One `RequestTruth` per request that reached a generation route (`/v1/completions`,
`/v1/chat/completions`, `/generate`), errors included, in arrival order. Fields:
  request_id         the `x-request-id` header if sent, else SGLang's `rid`, else generated
  index              the server's request counter (0-based; seeds the fault draws)
  route              the path, e.g. "/v1/completions"
  stream             whether the response was a stream
  arrival_ns         `time.perf_counter_ns()` when the handler started (before reading the body)
  faults             injected faults, in `loadgate.sim.faults.FAULT_NAMES` spelling ([] if none)
  status             the HTTP status sent
  prompt_tokens      prompt length in tokens (0 if the request was rejected)
  completion_tokens  output tokens written to the client (the sum of the chunks' n_tokens)
  finish_reason      "stop" | "length" | "abort" | None (rejected)
  headers_ns         streams: `perf_counter_ns()` once the response headers were written (the
                     sequence is in the engine by then); None otherwise
  end_ns             `perf_counter_ns()` after the last byte was written (or the stream was cut)
  flips              output positions where a divergence knob emitted the runner-up token
                     (`loadgate.sim.divergence`); [] for the reference output
  flip_batches       per flip, the number of sequences in the engine step that produced it (the
                     batch the divergence really saw)
  params             the request body less its prompt (prompt, messages, input_ids, text, tools):
                     every other key as the client sent it (sampling, stops, extra body keys)
  reasoning_tokens   of completion_tokens, those streamed as reasoning (`target.sim.reasoning_tokens`)
  session            the value of the request's session header (`session_header`, default
                     x-session-id), None without one
  prompt             with `truth_prompts`: the body's prompt keys as sent (prompt, messages,
                     input_ids, text); None without
  body_hash          blake2b (16 bytes, hex) of the request body's bytes as received
  cached_tokens      prompt tokens the prefix cache served (0 with the cache off)
  chunks             one `ChunkTruth` per SSE event written (or one for a whole non-stream body):
      send_ns    `perf_counter_ns()` when the bytes went to the socket (see serving.py); with
                 `stream_events: per_token`, just after the write that carried them, on both paths
      write_begin_ns, write_end_ns   `perf_counter_ns()` just before the write call that carried the
                 event and just after it returned: on loopback the bytes reached the client's socket
                 between the two, however long the simulator was held up (by its loop or the
                 hypervisor) on either side of the write; both equal `send_ns` for the events of
                 injected faults
      kind       "tokens" (carries output tokens), "reasoning" (carries output tokens streamed as
                 reasoning), "role" (chat's first chunk), "usage" (final
                 usage chunk), "done" (`data: [DONE]`), "malformed", "error" (error event),
                 "body" (non-stream response body, all tokens)
      n_tokens   number of output tokens in the event
      token_ids  those tokens' ids
`perf_counter_ns` is CLOCK_MONOTONIC on Linux, so these times compare with a client's
`perf_counter_ns` in another process on the same machine. No logprob vectors are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import orjson


class ChunkTruth(NamedTuple):
    """One event written (a tuple of atoms, so the garbage collector can stop tracking it)."""

    send_ns: int
    kind: str
    n_tokens: int
    token_ids: tuple[int, ...]
    write_begin_ns: int
    write_end_ns: int


@dataclass(slots=True)
class RequestTruth:
    """One request's ground truth (fields documented in the module docstring).

    Chunks are stored column-wise in flat lists of ints and strings (a handful of objects per
    request whatever its length, so a long run does not slow the garbage collector down);
    `chunks` rebuilds them as `ChunkTruth` tuples."""

    request_id: str
    index: int
    route: str
    stream: bool
    arrival_ns: int
    faults: list[str] = field(default_factory=list)
    status: int = 200
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    headers_ns: int | None = None
    end_ns: int | None = None
    flips: list[int] = field(default_factory=list)
    flip_batches: list[int] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    reasoning_tokens: int = 0
    session: str | None = None
    prompt: dict[str, Any] | None = None
    body_hash: str = ""
    cached_tokens: int = 0
    _send_ns: list[int] = field(default_factory=list)
    _write_ns: list[int] = field(default_factory=list)  # (begin, end) pairs, flat
    _kinds: list[str] = field(default_factory=list)
    _counts: list[int] = field(default_factory=list)
    _ids: list[int] = field(default_factory=list)

    def add_chunk(self, send_ns: int, kind: str, token_ids: list[int], begin_ns: int = 0, end_ns: int = 0) -> None:
        """Record one event written at `send_ns` carrying `token_ids`, by a write call made between
        `begin_ns` and `end_ns` (both `send_ns` when not given)."""
        n = len(token_ids)
        self._send_ns.append(send_ns)
        self._write_ns += (begin_ns or send_ns, end_ns or send_ns)
        self._kinds.append(kind)
        self._counts.append(n)
        self._ids.extend(token_ids)
        self.completion_tokens += n
        if kind == "reasoning":
            self.reasoning_tokens += n

    @property
    def chunks(self) -> list[ChunkTruth]:
        """The events written, in order."""
        out: list[ChunkTruth] = []
        pos = 0
        w = self._write_ns
        for i, (t, kind, n) in enumerate(zip(self._send_ns, self._kinds, self._counts, strict=True)):
            out.append(ChunkTruth(t, kind, n, tuple(self._ids[pos:pos + n]), w[2 * i], w[2 * i + 1]))
            pos += n
        return out

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able values (chunks as objects with named fields)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        d["chunks"] = [c._asdict() for c in self.chunks]
        return d


class TruthLog:
    """All `RequestTruth` records of one server, in arrival order (`records`)."""

    def __init__(self) -> None:
        self.records: list[RequestTruth] = []

    def begin(self, request_id: str, index: int, route: str, stream: bool, arrival_ns: int) -> RequestTruth:
        """Create and keep the record of a newly arrived request."""
        rec = RequestTruth(request_id, index, route, stream, arrival_ns)
        self.records.append(rec)
        return rec

    def reset(self) -> None:
        """Forget every record."""
        self.records.clear()

    def jsonl(self) -> bytes:
        """All records as JSON lines (one object per request, fields as documented above)."""
        return b"".join(orjson.dumps(r.to_dict(), option=orjson.OPT_APPEND_NEWLINE) for r in self.records)
