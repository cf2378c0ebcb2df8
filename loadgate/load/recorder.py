"""Finished exchanges become records (`loadgate.records.Record`).

During a phase the receive loop does nothing but receive: `Recorder.submit` frames each finished
exchange as it came (stamps and bytes) into the phase's exchange log in the run folder
(`loadgate.load.exchanges`: a few microseconds a request, against ~110 µs to frame, decode, build
and write its record; on disk within about a second), and `Recorder.flush`, after the phase,
decodes the log and writes the records. A run that dies during a phase leaves its log: `recover`
decodes it (`loadgate report`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns

import orjson

from loadgate.config.profile import Abort
from loadgate.engine.adapters.base import Chunk, Decoded
from loadgate.errors import ResultsNotWritten
from loadgate.load.exchanges import Exchange, ExchangeLog
from loadgate.load.exchanges import read as read_log
from loadgate.load.plan import PlannedRequest
from loadgate.load.stopflag import StopFlag
from loadgate.load.target import LiveTarget, Raw, decode, early_bounds
from loadgate.records import Record, RecordError, RecordWriter, SpecStats


def to_record(req: Planned, raw: Raw, d: Decoded, *, t0_ns: int, level: float | int,
              ready_ns: int, intended_ns: int | None, prompt_overhead: int | None = 0) -> Record:
    bounds, busy = early_bounds(raw, [c.t_ns for c in d.chunks])
    if req.counted:  # counted whole (a dataset prompt, its chat template included)
        planned_prompt = req.prompt_len
    else:
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
            d.spec.reported_acceptance_length),
        counts_received=d.counts_received or None, category=req.category, ramp=req.ramp,
        reasoning_tokens=reasoning_tokens(d.chunks) or None,
        answer_chunk=answer_chunk(d.chunks), cached_tokens=d.cached_tokens,
        conversation=None if req.session is None else req.session[0],
        turn=None if req.session is None else req.session[1],
        turns=None if req.session is None else req.session[2])


def reasoning_tokens(chunks: list[Chunk]) -> int:
    """Tokens streamed as reasoning: each chunk's reasoning share, and the chunks of ids with no text
    that lie between two reasoning chunks (a character cut across tokens, mid-thought); a parser's
    markers (before the first reasoning text, after the last) count as neither."""
    total, gap = 0, 0
    seen = False
    for c in chunks:
        if c.reasoning is None:
            gap += c.n_tokens if seen else 0
            continue
        if c.reasoning:
            total += gap
            seen = True
        else:
            seen = False
        gap = 0
        total += c.thought
    return total


def answer_chunk(chunks: list[Chunk]) -> int | None:
    """Index of the first chunk of answer text; without any, the first chunk when none carried
    reasoning either (ids alone), else None (all reasoning and markers)."""
    first = next((j for j, c in enumerate(chunks) if c.reasoning is False), None)
    if first is None and chunks and not any(c.reasoning for c in chunks):
        return 0
    return first


@dataclass(frozen=True, slots=True)
class Planned:
    """What a record needs of its planned request (the prompt itself is not kept)."""

    i: int
    warmup: bool
    prompt_len: int | None
    output_len: int
    counted: bool = False  # prompt_len is the server's whole count (no chat template to add)
    category: str | None = None
    session: tuple[int, int, int] | None = None  # (conversation, turn, turns) of a conversation's request
    ramp: bool = False  # a request of the level's ramp


class Recorder:
    """Turns finished exchanges into records: `submit` frames each exchange into the phase's
    exchange log (`loadgate.load.exchanges`: on disk within about a second, no decoding on the
    receive loop's turns), `flush`, after the phase, decodes the log into records for `writer` and
    removes it. `log`: where the log goes (in the run folder)."""

    def __init__(self, t: LiveTarget, writer: RecordWriter, on_done: Callable[[], None] | None, *, log: Path,
                 stop: StopFlag | None = None, keep_log: bool = False) -> None:
        self.t, self.writer, self.on_done = t, writer, on_done
        self.keep_log = keep_log  # `flush` only closes the log: a Ray actor relays it, the driver decodes it
        self.stop = stop if stop is not None else StopFlag()
        self.breaker = Breaker(t.spec.abort, writer.path.parent) if t.spec.abort is not None else None
        self.overhead = t.spec.prompt_overhead
        self.log = ExchangeLog(log, {"api": t.spec.api, "stream": t.spec.stream,
                                     "max_event_bytes": t.spec.max_event_bytes, "prompt_overhead": self.overhead})

    def submit(self, req: PlannedRequest, raw: Raw, *, t0_ns: int, level: float | int, ready_ns: int,
               intended_ns: int | None) -> None:
        self.log.add(Exchange(req.i, req.warmup, req.prompt_len, req.output_len, t0_ns, level, ready_ns,
                              intended_ns, raw, req.counted_len is not None, req.category, req.session, req.ramp))
        if self.breaker is not None and not (req.warmup or req.ramp) and self.stop.why is None:
            why = self.breaker.observe(raw)
            if why is not None:
                self.stop.abort(why)
        if self.on_done:
            self.on_done()

    def flush(self, trust_wakes: bool = True) -> None:
        """Decode the phase's exchanges and write their records (after a phase; also when it was cut
        short), then remove the log. `trust_wakes`: the host held the machine little enough that
        quiet turns' wakes are timed (`loadgate.load.target.finish_socket`)."""
        self.log.close()
        if self.keep_log:
            return
        try:
            contents = read_log(self.log.path)
        except OSError as e:
            contents, why = None, e.strerror or str(e)
        else:
            why = "not an exchange log"
        if contents is None:  # kept for `report`, which says what it could read
            raise ResultsNotWritten(f"{self.log.path}: cannot read the phase's exchanges back: {why}")
        for x in contents.exchanges:
            d = decode(self.t.adapter, self.t.spec.stream, x.raw, self.t.spec.max_event_bytes,
                       trust_wakes=trust_wakes)
            self.writer.write(exchange_record(x, d, self.overhead))
        with contextlib.suppress(OSError):
            self.log.path.unlink()


class Breaker:
    """The circuit breaker of `load.abort` over one client process's measured requests: each finished
    exchange is a success or a failure as the receive loop knows it (a transport error, or a status
    line other than 200: the body is decoded after the phase), kept for `window_s`; at
    `min_requests` or more in the window and a failed share of `error_rate` or more it trips, once:
    `abort.json` in the run folder names the trigger (the first process to trip writes it), and the
    words go to the stop flag. Written here: a sliding count is all it takes."""

    def __init__(self, cfg: Abort, run_dir: Path) -> None:
        self.cfg, self.path = cfg, run_dir / "abort.json"
        self.seen: deque[tuple[int, bool]] = deque()
        self.failed = 0

    def observe(self, raw: Raw) -> str | None:
        now = raw.end_ns or perf_counter_ns()
        bad = raw.error is not None or not _status_ok(raw)
        self.seen.append((now, bad))
        self.failed += bad
        edge = now - int(self.cfg.window_s * 1e9)
        while self.seen and self.seen[0][0] < edge:
            self.failed -= self.seen.popleft()[1]
        n = len(self.seen)
        if n < self.cfg.min_requests or self.failed < self.cfg.error_rate * n:
            return None
        why = (f"load.abort: {self.failed} of the {n} requests that finished in the last {self.cfg.window_s:g} s "
               f"failed ({self.failed / n:.0%}, limit {self.cfg.error_rate:.0%})")
        with contextlib.suppress(OSError), open(self.path, "x") as f:  # the first process to trip names it
            f.write(orjson.dumps({"trigger": why}).decode())
        return why


def _status_ok(raw: Raw) -> bool:
    """Whether the response's status was 200, from its status line where it is not parsed yet."""
    if raw.status is not None:
        return raw.status == 200
    reads = raw.socket_reads or raw.reads
    return not reads or reads[0][1][9:12] == b"200"


def read_abort(run_dir: Path) -> str | None:
    """The trigger `abort.json` names, or None where no process tripped the breaker."""
    try:
        d = orjson.loads((run_dir / "abort.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return str(d.get("trigger")) if isinstance(d, dict) and d.get("trigger") else None


def exchange_record(x: Exchange, d: Decoded, prompt_overhead: int | None) -> Record:
    """The record of one logged exchange, once decoded (with several endpoints, the one `fetch`
    sent it to)."""
    rec = to_record(Planned(x.i, x.warmup, x.prompt_len, x.output_len, x.counted, x.category, x.session, x.ramp),
                     x.raw, d, t0_ns=x.t0_ns, level=x.level,
                     ready_ns=x.ready_ns, intended_ns=x.intended_ns, prompt_overhead=prompt_overhead)
    return rec if x.raw.endpoint is None else dataclasses.replace(rec, endpoint=x.raw.endpoint)


def recover(run_dir: Path) -> tuple[list[Record], list[Path]]:
    """The records of the exchange logs a run left behind (it died during a phase), decoded here
    with the quiet turns' wakes distrusted (the host's share is unknown); and the logs read."""
    from loadgate.engine.adapters import adapter_for

    out: list[Record] = []
    paths = sorted((run_dir / "exchanges").glob("*.lgx")) if (run_dir / "exchanges").is_dir() else []
    read_paths = []
    nodes = _nodes(run_dir)
    for path in paths:
        try:
            contents = read_log(path)
        except OSError:
            continue
        if contents is None:
            continue
        m = contents.meta
        try:  # a header from elsewhere (another version, a damaged file): that log is not read
            adapter, stream, max_event = adapter_for(str(m["api"])), bool(m["stream"]), int(m["max_event_bytes"])
        except (KeyError, TypeError, ValueError):
            contents.close()
            continue
        read_paths.append(path)
        actor = _relayed_by(path.name)
        for x in contents.exchanges:
            d = decode(adapter, stream, x.raw, max_event, trust_wakes=False)
            rec = exchange_record(x, d, m.get("prompt_overhead"))
            if actor is not None:  # a Ray actor's relayed log (load.distributed): its actor and node
                node = nodes.get((float(x.level), actor))
                rec = dataclasses.replace(rec, actor=actor, node=node)
            out.append(rec)
    return out, read_paths


def _relayed_by(name: str) -> int | None:
    """The actor of a relayed log's name (`<worker log>.a<actor>.lgx`), None for this host's own."""
    stem = name.removesuffix(".lgx")
    head, dot, tail = stem.rpartition(".a")
    return int(tail) if dot and head and tail.isdigit() else None


def _nodes(run_dir: Path) -> dict[tuple[float, int], str]:
    """(level, actor) -> node id, from distributed.json (none for a run from one host)."""
    from loadgate.analysis.distributed import read_distributed

    d = read_distributed(run_dir)
    try:
        return {(float(lv), int(a["actor"])): str(a["node"]) for lv, e in (d or {"levels": {}})["levels"].items()
                for a in e["actors"]}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}
