"""The request path shared by the generation routes: parse, inject faults, run, write, record.

For every request to `/v1/completions`, `/v1/chat/completions` or `/generate`:
  1. `arrival_ns = perf_counter_ns()`; the request gets the next server index and its id (the
     `x-request-id` header, else SGLang's `rid`, else generated); the body is parsed (an invalid
     one is answered 400/404 and recorded with that status).
  2. Faults are drawn (`loadgate.sim.faults`); an HTTP fault is answered at once.
  3. The sequence is submitted to the engine. Streams: headers are sent at once; every engine
     output (or several merged, if the handler fell behind) becomes one SSE event
     `data: <json>\n\n`, serialized with orjson and written with `StreamResponse.write` by the
     handler, or, once the first event is out, framed and written by the engine task itself
     (`DirectSink`, see there why); the send time is `perf_counter_ns()` taken right before the
     transport write on the direct path, and right after `StreamResponse.write` returned on the
     handler path (its own Python work, and the headers on the first write, come before the bytes
     reach the socket: stamping before it made the first chunk look ~0.2 ms early); the times just
     before and after the write call bound when the bytes truly left. The stream ends with the route's
     final events and `data: [DONE]\n\n`. Non-stream: one JSON body when the sequence finishes.
  4. If the client goes away (or a disconnect is injected) the sequence is aborted in the engine.
The response echoes the request id in the `x-request-id` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from aiohttp import HttpVersion11, web

from loadgate.config.simconfig import SimConfig
from loadgate.sim.engine import SimEngine
from loadgate.sim.errors import ApiError
from loadgate.sim.faults import FaultPlan, plan_faults
from loadgate.sim.model import SimModel
from loadgate.sim.openai_format import Event
from loadgate.sim.sequence import Sequence, StepOutput
from loadgate.sim.tokenizer import Tokenizer
from loadgate.sim.truth import RequestTruth, TruthLog
from loadgate.version import __version__

DONE = b"data: [DONE]\n\n"
MALFORMED = b'data: {"id": broken\n\n'
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


class Formatter(Protocol):
    def chunks(self, out: StepOutput) -> list[tuple[dict[str, Any], str, list[int]]]: ...
    def final(self) -> list[tuple[dict[str, Any], str, list[int]]]: ...
    def body(self, out: StepOutput) -> dict[str, Any]: ...


@dataclass
class SimState:
    """Everything one simulator app owns (no module-level state anywhere)."""

    cfg: SimConfig
    tokenizer: Tokenizer
    model: SimModel
    engine: SimEngine
    truth: TruthLog = field(default_factory=TruthLog)
    requests_seen: int = 0
    first_request_ns: int | None = None  # when the first request of any route but /health arrived
    started: float = field(default_factory=time.time)

    @property
    def version(self) -> str:
        """What `/version` and `/server_info` report: loadgate's version marked as the simulator."""
        return f"{__version__}+loadgate.sim"

    @property
    def fingerprint(self) -> str:
        """`system_fingerprint` of the OpenAI routes."""
        return f"loadgate-sim-seed{self.cfg.seed}"

    def next_index(self) -> int:
        i = self.requests_seen
        self.requests_seen += 1
        return i


@dataclass
class Job:
    """A parsed generation request: what to run and how to shape the answer."""

    params: Any  # GenParams
    stream: bool
    make_formatter: Callable[[Sequence, str], Formatter]


def per_token(out: StepOutput, token_text: list[str | None]) -> list[StepOutput]:
    """`out` as one output per token (the `per_token` stream shape): each with its token's text
    where that text is what `out.text` holds next (else the rest goes with the last token), its
    logprob and top list; the finish and stop reasons go with the last."""
    n = len(out.token_ids)
    if n <= 1:
        return [out]
    texts, used = [], 0
    for t in out.token_ids[:-1]:
        s = token_text[t] or ""
        if not out.text.startswith(s, used):
            s = ""
        texts.append(s)
        used += len(s)
    texts.append(out.text[used:])
    return [StepOutput([t], texts[i], None if out.logprobs is None else [out.logprobs[i]],
                       None if out.top is None else [out.top[i]],
                       out.finish_reason if i == n - 1 else None, out.stop_reason if i == n - 1 else None)
            for i, t in enumerate(out.token_ids)]


def step_events(fmt: Formatter, out: StepOutput, split: list[str | None] | None) -> list[Event]:
    """The events of one engine output: one per step, or with `split` (the tokens' texts) one per token."""
    if split is None:
        return fmt.chunks(out)
    return [e for piece in per_token(out, split) for e in fmt.chunks(piece)]


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body, or a 400."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        raise ApiError(400, f"invalid JSON body: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


PROMPT_KEYS = frozenset({"prompt", "messages", "input_ids", "text", "tools"})  # left out of the truth's params


async def handle_generation(request: web.Request, state: SimState,
                            parse: Callable[[dict[str, Any]], Job], error_style: str) -> web.StreamResponse:
    """Serve one generation request (see the module docstring)."""
    arrival_ns = time.perf_counter_ns()
    index = state.next_index()
    rid = request.headers.get("x-request-id")
    try:
        body = await read_json_object(request)
        if rid is None and isinstance(body.get("rid"), str):
            if not body["rid"].isprintable():
                raise ApiError(400, "rid must be printable (it is echoed in a header)", "rid")
            rid = body["rid"]
        rid = rid or os.urandom(8).hex()
        job = parse(body)
        if state.cfg.faults.ignore_stop and job.params.stop:
            job = dataclasses.replace(job, params=dataclasses.replace(job.params, stop=()))
    except ApiError as e:
        rec = state.truth.begin(rid or f"invalid-{index}", index, request.path, False, arrival_ns)
        rec.status = e.status
        rec.end_ns = time.perf_counter_ns()
        return e.response(error_style)
    rec = state.truth.begin(rid, index, request.path, job.stream, arrival_ns)
    rec.prompt_tokens = len(job.params.prompt_ids)
    rec.session = request.headers.get(state.cfg.session_header) if state.cfg.session_header else None
    rec.body_hash = hashlib.blake2b(await request.read(), digest_size=16).hexdigest()  # read() keeps the body
    rec.params = {k: v for k, v in body.items() if k not in PROMPT_KEYS}
    if state.cfg.truth_prompts:
        rec.prompt = {k: v for k, v in body.items() if k in PROMPT_KEYS and k != "tools"}
    plan = plan_faults(state.cfg.faults, state.cfg.seed, index, job.stream)
    rec.faults = plan.names
    headers = {"x-request-id": rid}
    if plan.http_status is not None:
        rec.status = plan.http_status
        rec.end_ns = time.perf_counter_ns()
        err = ApiError(plan.http_status, f"simulated HTTP {plan.http_status} (injected fault)")
        resp = err.response("vllm")
        resp.headers.update(headers)
        return resp
    if plan.slow_first_byte_s > 0:
        await asyncio.sleep(plan.slow_first_byte_s)
    seq = state.engine.submit(job.params, index)
    fmt = job.make_formatter(seq, rid)
    try:
        if job.stream:
            split = state.tokenizer.ascii_text if state.cfg.stream_events == "per_token" else None
            return await _stream(request, seq, fmt, rec, plan, headers, split)
        return await _whole(request, seq, fmt, rec, plan, headers)
    finally:
        seq.sink = None
        if not seq.counted and not state.cfg.faults.ignore_disconnect:
            state.engine.abort(seq)
        rec.finish_reason = seq.finish_reason
        rec.cached_tokens = seq.cached_tokens
        rec.flips = list(seq.flips)
        rec.flip_batches = list(seq.flip_batches)
        rec.end_ns = time.perf_counter_ns()


class DirectSink:
    """The streaming fast path: the engine task writes a step's chunk itself, synchronously.

    Measured on the 2-core machine, a loopback `write` syscall costs ~10 us (the sender's CPU also
    runs the receiver's TCP path), and a handler task wake-up plus `StreamResponse.write` adds
    ~10 us more per chunk, too much for 512 streams at 10 ms steps on one core. So, once the handler
    has written the first event through `StreamResponse.write` (headers out, chunked encoding on),
    the engine hands each later output to this sink, which frames it as one HTTP/1.1 chunk and
    writes it to the transport in one call: the same bytes aiohttp would write, sent at the same
    moment, minus two task switches. Used only while the handler is idle, the connection has no
    unsent bytes and no stream fault is planned; the handler still writes the final events."""

    __slots__ = ("fmt", "rec", "transport", "split")

    def __init__(self, fmt: Formatter, rec: RequestTruth, transport: asyncio.Transport,
                 split: list[str | None] | None = None) -> None:
        self.fmt, self.rec, self.transport, self.split = fmt, rec, transport, split

    @property
    def ends_with_handler(self) -> bool:
        """The per_token shape: the stream's last output is written by the handler, with its end."""
        return self.split is not None

    def ready(self, seq: Sequence) -> bool:
        t = self.transport
        return seq.handler_idle and not t.is_closing() and t.get_write_buffer_size() == 0

    def write(self, seq: Sequence, out: StepOutput) -> None:
        if self.split is None:
            now = time.perf_counter_ns
            for payload, kind, ids in self.fmt.chunks(out):
                data = b"data: " + orjson.dumps(payload) + b"\n\n"
                t = now()
                self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
                self.rec.add_chunk(t, kind, ids, t, now())
        else:  # llama-server's shape: one event per token, the step's events in one write
            events = step_events(self.fmt, out, self.split)
            framed = []
            for payload, _, _ in events:
                data = b"data: " + orjson.dumps(payload) + b"\n\n"
                framed.append(b"%x\r\n%b\r\n" % (len(data), data))
            t0 = time.perf_counter_ns()
            self.transport.write(b"".join(framed))
            t = time.perf_counter_ns()  # after: the events had all reached the client's socket by then
            for _, kind, ids in events:
                self.rec.add_chunk(t, kind, ids, t0, t)
        if seq.finished:
            seq.wake()


async def _fire(kind: str, request: web.Request, resp: web.StreamResponse, rec: RequestTruth,
                plan: FaultPlan) -> bool:
    """Inject the stream fault `kind` now; returns False if the stream must end here."""
    if kind == "disconnect":
        if request.transport is not None:
            request.transport.close()
        return False
    if kind == "error_event":
        rec.add_chunk(time.perf_counter_ns(), "error", [])
        await resp.write(_sse(ApiError(500, "simulated engine failure (injected fault)").vllm_body()))
        rec.add_chunk(time.perf_counter_ns(), "done", [])
        await resp.write(DONE)
        return False
    if kind == "malformed":
        rec.add_chunk(time.perf_counter_ns(), "malformed", [])
        await resp.write(MALFORMED)
    elif kind == "stall":
        await asyncio.sleep(plan.stall_s)
    return True


async def _stream(request: web.Request, seq: Sequence, fmt: Formatter, rec: RequestTruth, plan: FaultPlan,
                  headers: dict[str, str], split: list[str | None] | None = None) -> web.StreamResponse:
    resp = web.StreamResponse(headers={**SSE_HEADERS, **headers})
    direct = plan.stream_fault is None and request.version >= HttpVersion11 and request.transport is not None
    if direct:
        resp.enable_chunked_encoding()
    await resp.prepare(request)
    rec.headers_ns = time.perf_counter_ns()
    sink = DirectSink(fmt, rec, request.transport, split) if direct and request.transport else None
    fault_at = plan.at_chunk if plan.stream_fault else -1  # events written before the fault fires
    sent = 0
    write, add, dumps, now_ns = resp.write, rec.add_chunk, orjson.dumps, time.perf_counter_ns
    try:
        finished = ended = False  # ended: [DONE] went out with the last events
        while True:
            out = await seq.next_outputs()
            if out is None:
                if seq.aborted:
                    return resp
                events = fmt.final()
                finished = True
            else:
                events = step_events(fmt, out, split)
                if split is not None and seq.finished and not seq.pending and fault_at < 0:
                    events = events + fmt.final()  # the last output: the stream's end goes with it
                    finished = ended = True
            if split is not None and len(events) > 1 and not 0 <= fault_at - sent < len(events):
                data = b"".join(b"data: " + dumps(p) + b"\n\n" for p, _, _ in events)
                t0 = now_ns()
                await write(data + DONE if ended else data)  # one write
                t = now_ns()
                for _, kind, ids in events:
                    add(t, kind, ids, t0, t)
                if ended:
                    add(t, "done", [], t0, t)
                sent += len(events)
                events = []
            for payload, kind, ids in events:
                if sent == fault_at:
                    fault_at = -1
                    if not await _fire(plan.stream_fault or "", request, resp, rec, plan):
                        return resp
                data = b"data: " + dumps(payload) + b"\n\n"
                t0 = now_ns()
                await write(data)
                t = now_ns()
                add(t, kind, ids, t0, t)  # after: aiohttp's write path (headers on the first) ran
                sent += 1
            if finished:
                break
            if sink is not None and seq.sink is None:
                seq.sink = sink  # headers and first events are out: the engine may write directly
        if fault_at >= 0 and not await _fire(plan.stream_fault or "", request, resp, rec, plan):
            return resp
        if not ended:
            await write(DONE)
            add(now_ns(), "done", [])
        await resp.write_eof()
    except ConnectionResetError:  # the client went away: the caller aborts the sequence
        if request.transport is not None:
            request.transport.close()
    return resp


async def _whole(request: web.Request, seq: Sequence, fmt: Formatter, rec: RequestTruth, plan: FaultPlan,
                 headers: dict[str, str]) -> web.StreamResponse:
    merged: StepOutput | None = None
    while (out := await seq.next_outputs()) is not None:
        if merged is None:
            merged = out
        else:
            merged.merge(out)
    if merged is None:
        merged = StepOutput([], "", None, None, seq.finish_reason)
    if plan.stream_fault == "stall":
        await asyncio.sleep(plan.stall_s)
    if plan.stream_fault == "disconnect":
        if request.transport is not None:
            request.transport.close()
        rec.status = 499  # no byte of the response was sent
        return web.Response(status=499)
    data = orjson.dumps(fmt.body(merged))
    rec.add_chunk(time.perf_counter_ns(), "body", merged.token_ids)
    resp = web.Response(body=data, content_type="application/json", headers=headers)
    with contextlib.suppress(ConnectionResetError):
        await resp.prepare(request)
        await resp.write_eof()
    return resp
