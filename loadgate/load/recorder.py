"""Finished exchanges become records (`loadgate.records.Record`), written as each request ends."""

from __future__ import annotations

from collections.abc import Callable

from loadgate.engine.adapters.base import Decoded
from loadgate.load.plan import PlannedRequest
from loadgate.load.target import Raw, Target, decode
from loadgate.records import Record, RecordError, RecordWriter, SpecStats


def to_record(req: PlannedRequest, raw: Raw, d: Decoded, *, t0_ns: int, level: float | int,
              ready_ns: int, intended_ns: int | None, prompt_overhead: int | None = 0) -> Record:
    planned_prompt = None if req.prompt_len is None or prompt_overhead is None else req.prompt_len + prompt_overhead
    return Record(
        i=req.i, warmup=req.warmup, level=level,
        intended_ns=None if intended_ns is None else intended_ns - t0_ns,
        ready_ns=ready_ns - t0_ns, start_ns=raw.start_ns - t0_ns,
        headers_ns=None if raw.headers_ns is None else raw.headers_ns - t0_ns,
        end_ns=raw.end_ns - t0_ns, status=raw.status,
        error=None if d.error is None else RecordError(d.error.kind, d.error.detail[:300]),
        prompt_tokens_planned=planned_prompt, output_tokens_planned=req.output_len,
        prompt_tokens=d.prompt_tokens, completion_tokens=d.completion_tokens,
        chunk_ns=[c.t_ns - raw.start_ns for c in d.chunks], chunk_tokens=[c.n_tokens for c in d.chunks],
        token_source=d.token_source, finish_reason=d.finish_reason,
        stamp=raw.stamp_source, read_lag_max_ns=raw.read_lag_max_ns, new_connection=raw.new_connection,
        spec=None if d.spec is None else SpecStats(
            d.spec.source, d.spec.verify_steps, d.spec.draft_tokens, d.spec.accepted,
            d.spec.reported_acceptance_length))


class Recorder:
    """Turns finished exchanges into records on the receive loop, after each request ended.
    Decoding here delays no stamp of plain-HTTP reads (they carry kernel receive timestamps); with
    user-space stamps (TLS, `transport: aiohttp`) a long response's decode (4.4 ms for a 1,000-event
    vLLM-style stream, median of 15 on the 2-core machine) can delay other streams' stamps, which the loop-lag sampler
    reports in the client health figures."""

    def __init__(self, t: Target, writer: RecordWriter, on_done: Callable[[], None] | None) -> None:
        self.t, self.writer, self.on_done = t, writer, on_done
        self.overhead = t.spec.prompt_overhead

    def submit(self, req: PlannedRequest, raw: Raw, *, t0_ns: int, level: float | int, ready_ns: int,
               intended_ns: int | None) -> None:
        d = decode(self.t.adapter, self.t.spec.stream, raw, self.t.spec.max_event_bytes)
        self.writer.write(to_record(req, raw, d, t0_ns=t0_ns, level=level, ready_ns=ready_ns,
                                    intended_ns=intended_ns, prompt_overhead=self.overhead))
        if self.on_done:
            self.on_done()
