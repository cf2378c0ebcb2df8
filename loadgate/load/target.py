"""The hot path of one request: where and how to send (`TargetSpec`, `LiveTarget`), the exchange itself
(`fetch`: raw socket transport with kernel receive stamps, or aiohttp), and decoding what was kept
once the request has ended (`decode`).

The receive loop does the minimum: a stamp when each read returns, the raw bytes, nothing else.
HTTP framing, SSE framing and JSON decoding happen after the request has ended.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import aiohttp
import orjson

from loadgate.config.profile import Abort, Profile, RequestSettings
from loadgate.engine.adapters import adapter_for
from loadgate.engine.adapters.base import Decoded, EngineAdapter, ErrorInfo, GenRequest, Sampling, merged_body
from loadgate.load.plan import PlannedRequest
from loadgate.load.sse import DEFAULT_MAX_EVENT, EventTooLarge, SSEEvent, frame_sse
from loadgate.load.transport import READ_SIZE, Conn, Limits, Pool, Refused, parse_response
from loadgate.load.turns import LOOP_TURNS, resolved
from loadgate.load.workload.sessions import as_messages, as_text
from loadgate.net.http import SessionSettings, TlsFiles
from loadgate.secrets import register, registered


@dataclass(frozen=True)
class TargetSpec:
    """Everything about where and how to send, picklable (worker processes rebuild a LiveTarget)."""

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
    tls: TlsFiles = field(default_factory=TlsFiles)
    limits: Limits = field(default_factory=Limits)
    max_event_bytes: int = DEFAULT_MAX_EVENT
    idle_timeout_s: float | None = None
    secrets: tuple[str, ...] = ()  # to mask in this process's files (worker processes register them)
    extra_body: dict[str, Any] = field(default_factory=dict)  # target.extra_body, expanded (never written)
    extra_body_written: dict[str, Any] = field(default_factory=dict)  # as the profile writes it (${NAME} kept)
    warmup_requests: int = 0  # the plan's warmup requests come first: measured request k is plan index k + this
    request: RequestSettings = field(default_factory=RequestSettings)  # load.request (measured requests)
    seed: int = 0  # the profile's seed: per-request sampling seeds come from it
    sessions_header: str = ""  # workload.sessions.header: the conversation id's header ("": none)
    abort: Abort | None = None  # load.abort: the circuit breaker over the measured requests
    endpoints: tuple[str, ...] = ()  # replicas' base URLs, requests spread over them by `route` (): base_url alone
    route: str = "round_robin"  # with endpoints: round_robin, sticky or least_in_flight (target.route)


def target_spec(profile: Profile, settings: SessionSettings, base: str, model: str, *, timeout_s: float,
                **kw: Any) -> TargetSpec:
    """The spec for `profile`'s engine: its API, the session's headers and TLS, the limits."""
    lim = profile.target.limits
    return TargetSpec(base, profile.target.api, model, timeout_s, headers=dict(settings.headers), tls=settings.tls,
                      limits=Limits(lim.max_header_kib * 1024, int(lim.max_response_mb * 2**20),
                                    int(lim.memory_budget_mb * 2**20)),
                      max_event_bytes=int(lim.max_event_mb * 2**20), idle_timeout_s=lim.idle_timeout_s,
                      secrets=registered(), extra_body=dict(settings.extra_body),
                      extra_body_written=dict(profile.target.extra_body), seed=profile.seed,
                      warmup_requests=profile.load.warmup_requests,
                      sessions_header=profile.workload.sessions.header if profile.workload.sessions else "",
                      abort=profile.load.abort, **kw)


@dataclass
class LiveTarget:
    """A TargetSpec bound to this process's event loop: adapter, URL, sessions and pools (with
    several endpoints: a URL and a pool each, `url` and `pool` the first's)."""

    spec: TargetSpec
    session: aiohttp.ClientSession
    adapter: EngineAdapter = field(init=False)
    url: str = field(init=False)
    pool: Pool | None = field(init=False)
    urls: list[str] = field(init=False)
    pools: list[Pool | None] = field(init=False)
    in_flight: list[int] = field(init=False)  # this process's requests in flight, per endpoint
    bodies: dict[int, bytes] = field(init=False, default_factory=dict)  # plan index -> body built ahead

    def __post_init__(self) -> None:
        for secret in self.spec.secrets:
            register(secret)
        self.adapter = adapter_for(self.spec.api)
        self.urls = [base + self.adapter.path for base in self.spec.endpoints or (self.spec.base_url,)]
        self.pools = [Pool(u, self.spec.limits, self.spec.tls.context() if u.startswith("https:") else None)
                      if self.spec.transport == "socket" else None for u in self.urls]
        self.url, self.pool = self.urls[0], self.pools[0]
        self.in_flight = [0] * len(self.urls)

    def endpoint_of(self, i: int, conversation: int | None = None) -> int:
        """The endpoint plan request `i` (a turn of `conversation`) goes to: by the route
        (`endpoint_of`); least_in_flight: the one with the fewest of this process's requests in
        flight now, ties broken round robin from i mod n (`fetch` counts them)."""
        n = len(self.urls)
        if self.spec.route == "least_in_flight" and n > 1:
            return min(range(n), key=lambda k: (self.in_flight[k], (k - i) % n))
        return endpoint_of(i, n, conversation if self.spec.route == "sticky" else None)

    def close(self) -> None:
        """Close every endpoint's pool."""
        for p in self.pools:
            if p is not None:
                p.close()


def endpoint_of(i: int, n: int, conversation: int | None = None) -> int:
    """Round robin by plan index: request `i` goes to endpoint i mod n, so the counts per endpoint
    are within one of each other and the same plan sends the same requests to the same replica.
    Sticky (`conversation` given: the request is a turn of it): by the conversation's index
    instead, so all its turns go to one replica, the conversations within one of each other."""
    if n <= 1:
        return 0
    return (conversation if conversation is not None else i) % n


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
    # per socket read: (when it began, when its loop turn woke, the floor of its data's arrival,
    # whether its turn woke from an idle poll, whether its bytes came in one TCP segment, and the
    # floor without the turn's wake: the last moment before its poll)
    read_begin: list[tuple[int, int, int, bool, bool, int]] | list[tuple[int, int, int, bool, bool]] = field(
        default_factory=list)
    sent_ns: int = 0  # when the request began to be sent
    prev_read_of: dict[int, int] = field(default_factory=dict)  # a read's stamp -> the earliest its data can have arrived
    quiet_of: dict[int, bool] = field(default_factory=dict)  # a read's stamp -> its turn woke from an idle poll
    one_segment_of: dict[int, bool] = field(default_factory=dict)  # a read's stamp -> its bytes came in one segment
    trailing: set[int] = field(default_factory=set)  # stamps of reads whose last event carried no tokens
    endpoint: int | None = None  # the replica it went to (several target.endpoints), else None


class IdleTimeout(Exception):
    """No byte arrived for `idle_timeout_s`."""


async def _until_done(conn: Conn, done: asyncio.Future[None], idle_s: float | None) -> None:
    """Wait for the exchange to end; with `idle_s`, raise IdleTimeout once no byte arrived for
    that long (the total timeout around it still applies)."""
    if idle_s is None:
        await done
        return
    while True:
        quiet = (perf_counter_ns() - conn.last_read_ns) / 1e9
        if quiet >= idle_s:
            raise IdleTimeout
        try:
            await asyncio.wait_for(asyncio.shield(done), idle_s - quiet)
            return
        except TimeoutError:
            if done.done():
                done.result()
                return


async def fetch(t: LiveTarget, body: bytes, request_id: str, headers: dict[str, str] | None = None,
                endpoint: int = 0) -> Raw:
    """POST `body` (with this request's own `headers`, e.g. a conversation's session header) to
    `endpoint` (an index into `t.urls`)."""
    t.in_flight[endpoint] += 1  # (before the first await: the next request's choice sees it)
    try:
        raw = await (fetch_socket(t, body, request_id, headers, endpoint) if t.pool is not None else
                     fetch_aiohttp(t, body, request_id, headers, endpoint))
    finally:
        t.in_flight[endpoint] -= 1
    if len(t.urls) > 1:
        raw.endpoint = endpoint
    return raw


async def fetch_socket(t: LiveTarget, body: bytes, request_id: str, headers: dict[str, str] | None = None,
                       endpoint: int = 0) -> Raw:
    """POST over the raw transport: each socket read is stamped in `data_received` before any
    parsing; headers and chunked framing are parsed after the exchange (`finish_socket`)."""
    pool = t.pools[endpoint]
    assert pool is not None
    raw = Raw(start_ns=perf_counter_ns())
    wire = pool.request_bytes(body, {"x-request-id": request_id, **t.spec.headers, **(headers or {})})
    conn = None
    try:
        async with asyncio.timeout(t.spec.timeout_s):
            for attempt in (0, 1):
                conn, reused = await pool.acquire(fresh=attempt > 0)
                raw.new_connection = not reused
                done = conn.begin()
                LOOP_TURNS.touch()
                try:
                    await conn.send(wire)
                    await _until_done(conn, done, t.spec.idle_timeout_s)
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
    except IdleTimeout:
        raw.error = ErrorInfo("idle_timeout", f"no byte for {t.spec.idle_timeout_s:g} s "
                              "(target.limits.idle_timeout_s)")
    except Refused as e:
        raw.error = ErrorInfo(e.kind, e.detail)
    except (ConnectionResetError, BrokenPipeError) as e:
        raw.error = ErrorInfo("disconnect", str(e))
    except OSError as e:
        raw.error = ErrorInfo("connect", str(e) or type(e).__name__)
    except asyncio.CancelledError:  # cut off (a run stopped): the connection is closed, not kept
        if conn is not None:
            pool.release(conn, reusable=False)
        raise
    raw.end_ns = perf_counter_ns()
    if conn is not None:
        raw.socket_reads = conn.reads
        raw.read_begin, raw.sent_ns = resolved(conn.read_begin), conn.sent_ns
        raw.stamp_source = conn.stamp_source
        raw.read_lag_max_ns = conn.user_lag_max_ns
        pool.release(conn, reusable=raw.error is None)
    return raw


def finish_socket(raw: Raw, trust_wakes: bool = True) -> None:
    """Parse the stamped socket reads of a raw-transport exchange into status and payload.
    `trust_wakes` False (the host took a share of the CPU during the phase, `load.health`): a read
    of several segments in a turn that woke from an idle poll keeps the floor of the poll's start.
    Its first segment woke the poll, but when the host held this virtual CPU's wake no guest clock
    shows it, and the read's stamp is its last segment's (seen here at ~30 % steal: chunks 1-9 ms
    older than the wake's bound, 0.5 % of them at one stream)."""
    if raw.socket_reads is None:
        return
    try:
        resp = parse_response(raw.socket_reads)
    except Refused as e:
        raw.error = raw.error or ErrorInfo(e.kind, e.detail)
        raw.socket_reads = None
        return
    raw.status, raw.headers_ns, raw.reads = resp.status, resp.headers_ns, resp.body
    prev, carried = raw.sent_ns or raw.start_ns, False
    for (t, data), rb in zip(raw.socket_reads, raw.read_begin, strict=False):
        b, floor, quiet, one = rb[0], rb[2], bool(rb[3]), bool(rb[4])
        if quiet and not one and not trust_wakes:  # the wake may have been held up: the poll's start
            floor, quiet = (rb[5] if len(rb) > 5 else 0), False
        # data a full read left behind may predate the loop's last turns: only the older bound holds
        raw.prev_read_of.setdefault(t, prev if carried else max(prev, floor))
        raw.quiet_of.setdefault(t, quiet and not carried)
        raw.one_segment_of.setdefault(t, one)
        carried = len(data) >= READ_SIZE
        if not carried:
            prev = b
    if raw.socket_reads and raw.error is None:  # a failure keeps its own time (as with aiohttp)
        raw.end_ns = raw.socket_reads[-1][0]
    if raw.error is None and not resp.complete:
        raw.error = ErrorInfo("disconnect", "the response ended early")
    raw.socket_reads = None


async def fetch_aiohttp(t: LiveTarget, body: bytes, request_id: str, headers: dict[str, str] | None = None,
                        endpoint: int = 0) -> Raw:
    """POST `body` with aiohttp and keep every read with its arrival stamp."""
    raw = Raw(start_ns=perf_counter_ns())
    reads = raw.reads
    try:
        async with asyncio.timeout(t.spec.timeout_s):
            async with t.session.post(t.urls[endpoint], data=body, headers={
                    "content-type": "application/json", "x-request-id": request_id, **t.spec.headers,
                    **(headers or {})}) as resp:
                raw.headers_ns = perf_counter_ns()
                raw.status = resp.status
                readany = resp.content.readany
                prev = raw.headers_ns or raw.start_ns
                while True:
                    b = await readany()
                    ts = perf_counter_ns()
                    if not b:
                        break
                    reads.append((ts, b))
                    raw.prev_read_of.setdefault(ts, prev)
                    prev = ts
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


def early_bounds(raw: Raw, chunk_stamps: list[int]) -> tuple[list[int], list[int]]:
    """Per chunk, how much earlier than its stamp it may really have arrived (0: exactly then), and
    the indices of the chunks whose bound was set while the client's loop was busy.

    A read is stamped when its last packet arrived (the kernel merges packets queued together and
    keeps the newest one's time), unless its bytes came in one TCP segment (`one_segment_of`, see
    `transport.SocketConn`): then every chunk in it arrived at the stamp, exact. Otherwise data
    that was not in the read before on that connection arrived
    after that read began, and after the floor of its loop turn (`prev_read_of`; see
    `load.turns`): in a turn that woke from an idle poll ("quiet"), its measured wake
    latency before the wake (tens of microseconds when the client has a core); in a turn that
    followed the last one without sleeping ("busy"), the loop's poll two turns back. So:
    - a chunk followed by another content chunk in the same read arrived between that floor and
      the stamp: its bound is the difference (a server that writes several events at once, as
      llama-server does with a verify step's tokens, gets the wake latency in a quiet turn);
    - the last content chunk of a stream, read together with the stream's end (usage, [DONE], the
      last HTTP chunk) in more than one segment: the stamp is the end's arrival, and the chunk came
      between the floor and it, the same bound. (A busy turn that read promptly was once taken as
      exact: a server that writes its end one loop turn after the last tokens, as the simulator
      does, showed the last gap up to 2 ms long at 64 streams, stated exact, against the truth log.)
    - the last content chunk of a read that went on with an event carrying no tokens (a usage or
      finish event, `[DONE]`: `Raw.trailing`): that event may be the read's last packet, the same
      bound (seen in the simulator at one stream: the last tokens stamped 0.1-0.3 ms late, exact);
    - any other last chunk of a read came with the read's last packet: exact.
    A chunk bounded in a busy turn is listed in the second list (the cause the report names:
    chunks that arrived together while the loop was busy)."""
    out = [0] * len(chunk_stamps)
    busy: list[int] = []
    n = len(chunk_stamps)
    for j, t in enumerate(chunk_stamps):
        last_of_read = j + 1 == n or chunk_stamps[j + 1] != t
        shared = not last_of_read or t in raw.trailing
        at_end = j + 1 == n and t == raw.end_ns
        if not (shared or at_end) or raw.one_segment_of.get(t, False):
            continue
        quiet = raw.quiet_of.get(t, False)
        out[j] = max(0, t - raw.prev_read_of.get(t, t))
        if out[j] and not quiet:
            busy.append(j)
    return out, busy


def _trailing(events: list[SSEEvent], chunk_events: list[int], cut: set[int]) -> set[int]:
    """The stamps of reads that went on after their last chunk: their last event carried no tokens
    (a usage or finish event, `[DONE]`: `chunk_events` holds the index of each chunk's event), or
    they ended inside the next event (`cut`). There the stamp may be that later data's arrival."""
    last: dict[int, int] = {}
    for k, e in enumerate(events):
        last[e.t_ns] = k
    with_chunks = set(chunk_events)
    chunk_stamps = {events[k].t_ns for k in with_chunks}
    return {t for t in chunk_stamps if t in cut or last[t] not in with_chunks}


def decode(adapter: EngineAdapter, stream: bool, raw: Raw, max_event_bytes: int = DEFAULT_MAX_EVENT,
           trust_wakes: bool = True) -> Decoded:
    """Turn the kept bytes into a `Decoded` (after the request ended); `trust_wakes`: see `finish_socket`."""
    finish_socket(raw, trust_wakes)
    if raw.status is not None and raw.status != 200:
        body = b"".join(b for _, b in raw.reads)
        return Decoded(error=ErrorInfo("http_status", f"HTTP {raw.status}: {body[:200].decode('utf-8', 'replace')}"))
    try:
        if stream:
            cut: set[int] = set()
            events, truncated = frame_sse(raw.reads, max_event_bytes, cut)
            # decoded with each event's index for its time, so each chunk says which event it came from
            d = adapter.decode_stream([(k, e.data) for k, e in enumerate(events)])
            chunk_events = [c.t_ns for c in d.chunks]
            for c in d.chunks:
                c.t_ns = events[c.t_ns].t_ns
            raw.trailing = _trailing(events, chunk_events, cut)
            if d.error is None and raw.error is None and truncated:
                d.error = ErrorInfo("malformed", "stream ended inside an event")
        else:
            body = b"".join(b for _, b in raw.reads)
            d = adapter.decode_body(raw.reads[-1][0], body) if raw.reads else Decoded()
    except EventTooLarge as e:
        d = Decoded(error=ErrorInfo("event_too_large", str(e)))
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
        # a well-formed JSON answer of an unexpected shape fails this request, never the run
        d = Decoded(error=ErrorInfo("malformed", f"unexpected response shape: {type(e).__name__}: {e}"[:200]))
    if "completion_tokens" in d.counts_received and d.output_ids is not None:
        d.completion_tokens = len(d.output_ids)  # an impossible count: the ids say how many
    if raw.error is not None:
        d.error = raw.error  # a transport failure outranks what the partial stream said
    elif not d.chunks and d.error is None:
        d.error = ErrorInfo("empty", "the response carried no tokens")
    return d


def body_for(t: LiveTarget, req: PlannedRequest) -> bytes:
    if req.drawn_len is not None:  # `Plan.light`: its prompt's ids were left out
        raise ValueError(f"request {req.i} was planned without its prompt (Plan.light): its body is built from plan[i]")
    s = t.spec
    ids, text, messages = req.prompt_ids, req.prompt_text, req.messages
    if ids is not None and s.pool_text is not None:  # a text-only API: send the ids' exact text
        text = "".join(s.pool_text[i] for i in ids)
        ids = None
    if req.exchange is not None:  # a conversation's turn: its history and new turn
        if t.adapter.chat:
            messages = tuple(as_messages(req.messages or (), req.exchange, s.pool_text))
        else:
            text, messages = as_text(req.messages or (), req.exchange, s.pool_text), None
    r = s.request
    sampling = Sampling(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, min_p=r.min_p,
                        seed=request_seed(s.seed, req.i, req.warmup, s.warmup_requests) if r.seed == "per_request"
                        else None)
    g = GenRequest(max_tokens=req.output_len, prompt_ids=ids, prompt_text=text, messages=messages,
                   stream=s.stream, ignore_eos=r.ignore_eos, stop=r.stop, sampling=sampling)
    return orjson.dumps(merged_body(t.adapter.build_body(g, s.model), s.extra_body))


def request_seed(run_seed: int, i: int, warmup: bool = False, n_warmup: int = 0) -> int:
    """The sampling seed of plan request `i` under `load.request.seed: per_request`: a function of
    the profile's seed and the request's index among the measured requests (or among the warmup
    ones, apart) alone, so neither the warmup's size nor anything else changes a measured request's
    seed, and both sides of an A/B send the same seeds; below 2**31 (every engine takes it)."""
    kind, k = ("w", i) if warmup else ("m", i - n_warmup)
    digest = hashlib.blake2b(f"{run_seed}:{kind}:{k}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF
