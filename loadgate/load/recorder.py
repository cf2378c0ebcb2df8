"""Finished exchanges become records (`loadgate.records.Record`).

During a phase the receive loop does nothing but receive: `Recorder.submit` keeps each finished
exchange as it came (stamps and bytes, pickled: ~6 µs a request on the 2-core machine, against
~110 µs to frame, decode, build and write its record), and `Recorder.flush`, after the phase,
decodes them and writes the records. Kept exchanges stay in memory up to `memory_budget` bytes and
go to an unnamed temporary file in the run folder beyond it (nothing is left on disk if the process
dies). Pickle is used because the data is this process's own, read back by the same code.
"""

from __future__ import annotations

import contextlib
import pickle
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from loadgate.engine.adapters.base import Decoded
from loadgate.errors import ResultsNotWritten
from loadgate.load.plan import PlannedRequest
from loadgate.load.target import Raw, Target, decode, early_bounds
from loadgate.load.turns import LOOP_TURNS
from loadgate.records import Record, RecordError, RecordWriter, SpecStats

DEFAULT_MEMORY_BUDGET = 256 * 2**20


def to_record(req: Planned, raw: Raw, d: Decoded, *, t0_ns: int, level: float | int,
              ready_ns: int, intended_ns: int | None, prompt_overhead: int | None = 0) -> Record:
    bounds, busy = early_bounds(raw, [c.t_ns for c in d.chunks])
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
        chunk_early_ns=bounds, chunk_busy=busy,
        token_source=d.token_source, finish_reason=d.finish_reason,
        stamp=raw.stamp_source, read_lag_max_ns=raw.read_lag_max_ns, new_connection=raw.new_connection,
        spec=None if d.spec is None else SpecStats(
            d.spec.source, d.spec.verify_steps, d.spec.draft_tokens, d.spec.accepted,
            d.spec.reported_acceptance_length))


@dataclass(frozen=True, slots=True)
class Planned:
    """What a record needs of its planned request (the prompt itself is not kept)."""

    i: int
    warmup: bool
    prompt_len: int | None
    output_len: int


class Recorder:
    """Turns finished exchanges into records, written to `writer` after the phase: `submit` only
    keeps the exchange (no decoding on the receive loop's turns), `flush` decodes and writes."""

    def __init__(self, t: Target, writer: RecordWriter, on_done: Callable[[], None] | None, *,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self.t, self.writer, self.on_done = t, writer, on_done
        self.overhead = t.spec.prompt_overhead
        self.memory_budget = memory_budget
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._spill: BinaryIO | None = None

    def submit(self, req: PlannedRequest, raw: Raw, *, t0_ns: int, level: float | int, ready_ns: int,
               intended_ns: int | None) -> None:
        self._keep(pickle.dumps((req.i, req.warmup, req.prompt_len, req.output_len, t0_ns, level, ready_ns,
                                 intended_ns, raw), pickle.HIGHEST_PROTOCOL))
        if self.on_done:
            self.on_done()

    def _write(self, req: Planned, raw: Raw, *, t0_ns: int, level: float | int, ready_ns: int,
               intended_ns: int | None) -> None:
        d = decode(self.t.adapter, self.t.spec.stream, raw, self.t.spec.max_event_bytes)
        self.writer.write(to_record(req, raw, d, t0_ns=t0_ns, level=level, ready_ns=ready_ns,
                                    intended_ns=intended_ns, prompt_overhead=self.overhead))

    def _keep(self, blob: bytes) -> None:
        if self._spill is None and self._held_bytes + len(blob) <= self.memory_budget:
            self._held.append(blob)
            self._held_bytes += len(blob)
            return
        try:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile(dir=self.writer.path.parent, prefix=".spill-")
            self._spill.write(len(blob).to_bytes(8, "little") + blob)
            LOOP_TURNS.after_blocking()  # a file write may sleep: not the poll's sleep
        except OSError as e:
            raise ResultsNotWritten(f"{self.writer.path.parent}: cannot keep a finished response for "
                                    f"decoding: {e.strerror or e}") from None

    def _kept(self) -> Iterator[bytes]:
        yield from self._held
        if self._spill is not None:
            f = self._spill
            with contextlib.suppress(OSError):
                f.flush()
                f.seek(0)
                while len(head := f.read(8)) == 8:
                    blob = f.read(int.from_bytes(head, "little"))
                    if len(blob) < int.from_bytes(head, "little"):
                        return  # the write that failed: not a whole exchange
                    yield blob

    def flush(self) -> None:
        """Decode what was kept and write its records (after a phase; also when it was cut short)."""
        try:
            for blob in self._kept():
                i, warmup, prompt_len, output_len, t0_ns, level, ready_ns, intended_ns, raw = pickle.loads(blob)
                self._write(Planned(i, warmup, prompt_len, output_len), raw, t0_ns=t0_ns, level=level,
                            ready_ns=ready_ns, intended_ns=intended_ns)
        finally:
            self._held, self._held_bytes = [], 0
            if self._spill is not None:
                with contextlib.suppress(OSError):
                    self._spill.close()
                self._spill = None

