"""Executors that send the plan: closed loop (fixed concurrency) and open loop (arrival schedule).

The receive loop does the minimum: `perf_counter_ns()` right after each read returns, keep the
raw bytes, nothing else. SSE framing and JSON decoding happen after the request has ended.
Every finished request becomes one record (see `loadgate.records`), written immediately.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from time import perf_counter_ns

import aiohttp
import orjson

from loadgate.engine.adapters.base import Decoded, EngineAdapter, ErrorInfo, GenRequest
from loadgate.load.plan import PlannedRequest
from loadgate.load.sse import frame_sse
from loadgate.load.transport import Pool, parse_response
from loadgate.records import Record, RecordError, RecordWriter, SpecStats

READ_BUFSIZE = 1 << 18


def make_session(headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """A session with an unlimited connector and an explicit read buffer."""
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False, enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=conn, read_bufsize=READ_BUFSIZE, headers=headers,
                                 timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)


@dataclass(frozen=True)
class TargetSpec:
    """Everything about where and how to send, picklable (worker processes rebuild a Target)."""

    base_url: str
    api: str
    model: str
    timeout_s: float
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    # text-only APIs: the text of each pool id, and the tokens the chat template adds
    pool_text: dict[int, str] | None = None
    prompt_overhead: int | None = 0
    transport: str = "socket"  # the hot-path client: "socket" (kernel stamps) or "aiohttp"


@dataclass
class Target:
    """A TargetSpec bound to this process's event loop: adapter, URL, sessions and pools."""

    spec: TargetSpec
    session: aiohttp.ClientSession
    adapter: EngineAdapter = field(init=False)
    url: str = field(init=False)
    pool: Pool | None = field(init=False)

    def __post_init__(self) -> None:
        from loadgate.engine.adapters import adapter_for

        self.adapter = adapter_for(self.spec.api)
        self.url = self.spec.base_url + self.adapter.path
        self.pool = Pool(self.url) if self.spec.transport == "socket" else None


@dataclass
class Raw:
    """What the receive loop kept of one response."""

    start_ns: int
    headers_ns: int | None = None
    end_ns: int = 0
    status: int | None = None
    reads: list[tuple[int, bytes]] = field(default_factory=list)  # payload pieces, stamped
    error: ErrorInfo | None = None
    socket_reads: list[tuple[int, bytes]] | None = None  # raw transport: parsed after the fact
    stamp_source: str = "user"  # "kernel": SO_TIMESTAMPNS receive times; "user": when the loop read
    read_lag_max_ns: int = 0  # largest delay between a kernel stamp and the loop reading the data
    new_connection: bool | None = None  # raw transport: the request opened its connection (None: unknown)


async def fetch(t: Target, body: bytes, request_id: str) -> Raw:
    return await (fetch_socket(t, body, request_id) if t.pool is not None else fetch_aiohttp(t, body, request_id))


async def fetch_socket(t: Target, body: bytes, request_id: str) -> Raw:
    """POST over the raw transport: each socket read is stamped in `data_received` before any
    parsing; headers and chunked framing are parsed after the exchange (`finish_socket`)."""
    assert t.pool is not None
    pool = t.pool
    raw = Raw(start_ns=perf_counter_ns())
    wire = pool.request_bytes(body, {"x-request-id": request_id, **t.spec.headers})
    conn = None
    try:
        async with asyncio.timeout(t.spec.timeout_s):
            for attempt in (0, 1):
                conn, reused = await pool.acquire(fresh=attempt > 0)
                raw.new_connection = not reused
                done = conn.begin()
                try:
                    await conn.send(wire)
                    await done
                    pool.reuses_ok += reused
                    break
                except (ConnectionResetError, BrokenPipeError):
                    # a kept-alive connection the server closed as we sent: once more, on a new one
                    if attempt == 0 and reused and not conn.reads:
                        pool.reuses_stale += 1
                        pool.release(conn, reusable=False)
                        conn = None
                        continue
                    raise
    except TimeoutError:
        raw.error = ErrorInfo("timeout", f"no complete response within {t.spec.timeout_s:g} s")
    except (ConnectionResetError, BrokenPipeError) as e:
        raw.error = ErrorInfo("disconnect", str(e))
    except OSError as e:
        raw.error = ErrorInfo("connect", str(e) or type(e).__name__)
    raw.end_ns = perf_counter_ns()
    if conn is not None:
        raw.socket_reads = conn.reads
        raw.stamp_source = conn.stamp_source
        raw.read_lag_max_ns = conn.user_lag_max_ns
        pool.release(conn, reusable=raw.error is None)
    return raw


def finish_socket(raw: Raw) -> None:
    """Parse the stamped socket reads of a raw-transport exchange into status and payload."""
    if raw.socket_reads is None:
        return
    resp = parse_response(raw.socket_reads)
    raw.status, raw.headers_ns, raw.reads = resp.status, resp.headers_ns, resp.body
    if raw.socket_reads and raw.error is None:  # a failure keeps its own time (as with aiohttp)
        raw.end_ns = raw.socket_reads[-1][0]
    if raw.error is None and not resp.complete:
        raw.error = ErrorInfo("disconnect", "the response ended early")
    raw.socket_reads = None


async def fetch_aiohttp(t: Target, body: bytes, request_id: str) -> Raw:
    """POST `body` with aiohttp and keep every read with its arrival stamp."""
    raw = Raw(start_ns=perf_counter_ns())
    reads = raw.reads
    try:
        async with asyncio.timeout(t.spec.timeout_s):
            async with t.session.post(t.url, data=body, headers={
                    "content-type": "application/json", "x-request-id": request_id, **t.spec.headers}) as resp:
                raw.headers_ns = perf_counter_ns()
                raw.status = resp.status
                readany = resp.content.readany
                while True:
                    b = await readany()
                    ts = perf_counter_ns()
                    if not b:
                        break
                    reads.append((ts, b))
    except TimeoutError:
        raw.error = ErrorInfo("timeout", f"no complete response within {t.spec.timeout_s:g} s")
    except aiohttp.ClientConnectorError as e:
        raw.error = ErrorInfo("connect", str(e))
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        raw.error = ErrorInfo("disconnect", str(e) or type(e).__name__)
    except aiohttp.ClientError as e:
        raw.error = ErrorInfo("disconnect", f"{type(e).__name__}: {e}")
    raw.end_ns = reads[-1][0] if reads and raw.error is None else perf_counter_ns()
    return raw


def decode(adapter: EngineAdapter, stream: bool, raw: Raw) -> Decoded:
    """Turn the kept bytes into a `Decoded` (after the request ended)."""
    finish_socket(raw)
    if raw.status is not None and raw.status != 200:
        body = b"".join(b for _, b in raw.reads)
        return Decoded(error=ErrorInfo("http_status", f"HTTP {raw.status}: {body[:200].decode('utf-8', 'replace')}"))
    try:
        if stream:
            events, truncated = frame_sse(raw.reads)
            d = adapter.decode_stream([(e.t_ns, e.data) for e in events])
            if d.error is None and raw.error is None and truncated:
                d.error = ErrorInfo("malformed", "stream ended inside an event")
        else:
            body = b"".join(b for _, b in raw.reads)
            d = adapter.decode_body(raw.reads[-1][0], body) if raw.reads else Decoded()
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
        # a well-formed JSON answer of an unexpected shape fails this request, never the run
        d = Decoded(error=ErrorInfo("malformed", f"unexpected response shape: {type(e).__name__}: {e}"[:200]))
    if raw.error is not None:
        d.error = raw.error  # a transport failure outranks what the partial stream said
    elif not d.chunks and d.error is None:
        d.error = ErrorInfo("empty", "the response carried no tokens")
    return d


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


def body_for(t: Target, req: PlannedRequest) -> bytes:
    s = t.spec
    ids, text = req.prompt_ids, req.prompt_text
    if ids is not None and s.pool_text is not None:  # a text-only API: send the ids' exact text
        text = "".join(s.pool_text[i] for i in ids)
        ids = None
    g = GenRequest(max_tokens=req.output_len, prompt_ids=ids, prompt_text=text, messages=req.messages,
                   stream=s.stream)
    return orjson.dumps(t.adapter.build_body(g, s.model))


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
        d = decode(self.t.adapter, self.t.spec.stream, raw)
        self.writer.write(to_record(req, raw, d, t0_ns=t0_ns, level=level, ready_ns=ready_ns,
                                    intended_ns=intended_ns, prompt_overhead=self.overhead))
        if self.on_done:
            self.on_done()


async def run_one(t: Target, req: PlannedRequest, run_tag: str, rec: Recorder, *, t0_ns: int, level: float | int,
                  ready_ns: int, intended_ns: int | None) -> None:
    raw = await fetch(t, body_for(t, req), f"{run_tag}-{req.i}")
    rec.submit(req, raw, t0_ns=t0_ns, level=level, ready_ns=ready_ns, intended_ns=intended_ns)


async def closed_loop(t: Target, reqs: Iterable[PlannedRequest], concurrency: int, recorder: Recorder,
                      *, run_tag: str, t0_ns: int, stop_at_ns: int | None = None, level: int | None = None) -> None:
    """`concurrency` workers; each takes the next request as soon as its previous one finished.
    `ready_ns` is the moment the worker became free, so client-side queueing is visible. `level`
    is the whole run's concurrency when this loop is one worker process's share of it."""
    it: Iterator[PlannedRequest] = iter(reqs)

    async def worker() -> None:
        for req in it:
            ready = perf_counter_ns()
            if stop_at_ns is not None and ready >= stop_at_ns:
                return
            await run_one(t, req, run_tag, recorder, t0_ns=t0_ns, level=level or concurrency, ready_ns=ready,
                          intended_ns=None)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def sleep_until(t_ns: int) -> None:
    """Wait until perf_counter_ns() >= t_ns, never earlier: the loop's timers have about 1 ms of
    granularity and may fire early, so the last millisecond is spent yielding to the loop."""
    while (left := t_ns - perf_counter_ns()) > 1_500_000:
        await asyncio.sleep((left - 1_000_000) / 1e9)
    while perf_counter_ns() < t_ns:
        await asyncio.sleep(0)


async def open_loop(t: Target, reqs: Iterable[PlannedRequest], rate: float, recorder: Recorder, *,
                    run_tag: str, t0_ns: int, start_ns: int, max_in_flight: int | None = None,
                    stop_at_ns: int | None = None) -> None:
    """Start each request at `start_ns + intended_offset_ns`; latency counts from that intended
    time. With `max_in_flight`, a request that finds no free slot waits (its wait stays in its
    latency)."""
    sem = asyncio.Semaphore(max_in_flight) if max_in_flight else None
    tasks: set[asyncio.Task[None]] = set()

    async def one(req: PlannedRequest, intended: int) -> None:
        if sem is not None:
            await sem.acquire()
        try:
            await run_one(t, req, run_tag, recorder, t0_ns=t0_ns, level=rate, ready_ns=perf_counter_ns(),
                          intended_ns=intended)
        finally:
            if sem is not None:
                sem.release()

    for req in reqs:
        intended = start_ns + (req.intended_offset_ns or 0)
        if stop_at_ns is not None and intended >= stop_at_ns:
            break
        await sleep_until(intended)
        task = asyncio.create_task(one(req, intended))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
