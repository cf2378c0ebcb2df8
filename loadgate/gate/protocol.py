"""Protocol checks (`exactness.protocol`): the interface behaviour around the exactness check.

An equivalence result says the candidate computes the same tokens; it does not say that the
service streams them as it answers them whole, honours stop strings and max_tokens, emits tool
calls that parse, or survives a client that gives up. Each check below sends its own requests
after the scenarios, greedy and seeded like the check's, and ends in one of:
  passed          with the sentence it proved, and the numbers it saw
  failed          the check's reason joins the exactness check's (exit 10)
  not applicable  the engine cannot answer it (named tool_choice refused, no /metrics gauge…),
                  with the engine's reason
  not established a request failed in transport, so nothing was shown (exit 11)

  stream      a completion case streamed and not: the same token ids (text where the API gives
              no ids), finish reason and usage counts
  max_tokens  the case with max_tokens k (shorter than its output): finish 'length', the first k ids
  stop        the case with a stop string taken from the middle of its own output: finish
              'stop', and the text before that string exactly (the API leaves the string out)
  tools       a chat request with one function tool and a named tool_choice: a tool call of that
              name whose arguments parse as JSON and validate against its schema (jsonschema);
              the tool is declared `strict: true`, the API's request for schema-true arguments
  timeout     a long request the client abandons after `client_timeout_s`: the running gauge
              back to its idle value within `free_within_s`, and the next request succeeds
  cancel      a long stream the client closes after its first tokens: the running gauge back
              to idle within `free_within_s`, the generated-token counter no longer growing,
              and fewer tokens generated than asked for (the server stopped, not finished)
A walk-away check shows something only if the server was still generating when the client left
(its counter, read at once, short of max_tokens): a client held up until the whole answer was
generated — seen on 2 cores beside vLLM's CPU engine, whose busy processes can keep both the client
and vLLM's API server off the CPU for the whole generation — is tried again, up to 3 times, and
is otherwise not established, never failed.

The running gauge and the generated-token counter are the engine family's own (`Family.gauges`,
`Family.generated`): vLLM, SGLang and llama-server (`--metrics`) serve both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from loadgate.config.profile import Protocol
from loadgate.engine.adapters import family_for
from loadgate.engine.adapters.base import Decoded, merged_body
from loadgate.exactness.corpus import Case, Corpus
from loadgate.exactness.replay import CaseSender
from loadgate.snapshot import Snapshot, first_name

Status = Literal["passed", "failed", "not applicable", "not established"]
Scrape = Callable[[], Awaitable[Snapshot | None]]

TOOL_NAME = "get_weather"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TOOL: dict[str, Any] = {"type": "function", "function": {  # strict: the arguments must follow the schema (OpenAI)
    "name": TOOL_NAME, "description": "The weather in a city.", "parameters": TOOL_SCHEMA, "strict": True}}
TOOL_MESSAGES = [{"role": "user", "content": "What is the weather in Paris? Answer with the tool."}]
POLL_S = 0.05
REFUSED = (400, 404, 405, 422, 501)  # an engine saying it does not do named tool_choice
WALK_AWAY_TRIES = 3
RETRY_PAUSE_S = 1.0
SETTLE_S = 60.0  # how long a walk-away check waits for the engine to be idle before it starts


@dataclass
class ProtocolCheck:
    name: str
    status: Status
    proved: str  # the sentence it proves when it passes
    detail: str  # what was seen (or why it failed, or does not apply)
    late: bool = False  # a walk-away whose client left after the whole answer: worth another attempt

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "late"}


PROVES = {
    "stream": "streamed and non-streamed answers carry the same ids, finish reason and usage",
    "max_tokens": "max_tokens ends the output there with finish reason 'length'",
    "stop": "a stop string ends the output before it with finish reason 'stop'",
    "tools": "a named tool_choice gives a tool call whose arguments validate against the tool's schema",
    "timeout": "a request the client gave up on leaves the server healthy",
    "cancel": "a client that disconnects mid-stream frees its slot, and the server stops generating for it",
}


class _Probe:
    """Sends the checks' requests to one engine through the check's own sender."""

    def __init__(self, sender: CaseSender, session: aiohttp.ClientSession, scrape: Scrape, tag: str) -> None:
        self.sender, self.session, self.scrape, self.tag = sender, session, scrape, tag
        self.n = 0
        self.idle: float | None = None

    def rid(self) -> str:
        self.n += 1
        return f"{self.tag}-protocol-{self.n}"

    async def send(self, case: Case, **changes: Any) -> Decoded:
        return await self.sender.decoded(case, self.rid(), **changes)

    async def gauge(self) -> tuple[float | None, float | None]:
        """(running requests, generated tokens so far) from /metrics; None where it has neither."""
        snap = await self.scrape()
        if snap is None:
            return None, None
        family = family_for(self.sender.spec.api, snap)
        if family is None:
            return None, None
        running = first_name(snap, family.gauges.get("running", ()))
        generated = first_name(snap, (family.generated,) if family.generated else ())
        return (None if running is None else snap.total(running),
                None if generated is None else snap.total(generated))

    async def back_to_idle(self, idle: float, within_s: float) -> float | None:
        """Seconds until the running gauge reads `idle` or less again; None if not within `within_s`."""
        t0 = time.monotonic()
        while True:
            running, _ = await self.gauge()
            if running is not None and running <= idle:
                return time.monotonic() - t0
            if time.monotonic() - t0 > within_s:
                return None
            await asyncio.sleep(POLL_S)


def _reading(v: float | None) -> str:
    return "no reading of" if v is None else f"{v:g}"


def _ids_or_text(d: Decoded) -> tuple[str, Any]:
    return ("ids", tuple(d.output_ids)) if d.output_ids is not None else ("text", d.text)


def _lost(name: str, d: Decoded) -> ProtocolCheck | None:
    if d.error is None:
        return None
    return ProtocolCheck(name, "not established", PROVES[name], f"a request failed: {d.error.kind}: {d.error.detail}")


DRIFT = ("case {case}: two non-streamed answers to the same greedy request differed (run-to-run drift), so "
         "a difference here says nothing about the interface")


async def _drifts(p: _Probe, case: Case, full: Decoded) -> bool:
    """Whether the uncut non-streamed request, sent again, answers otherwise than `full`: then a
    mismatch belongs to the engine's run-to-run drift, not to the interface under test."""
    again = await p.send(case, stream=False)
    return again.error is not None or _ids_or_text(again) != _ids_or_text(full)


async def check_stream(p: _Probe, case: Case) -> tuple[ProtocolCheck, Decoded | None]:
    streamed, whole = await p.send(case, stream=True), await p.send(case, stream=False)
    lost = _lost("stream", streamed) or _lost("stream", whole)
    if lost:
        return lost, None
    (kind, a), (_, b) = _ids_or_text(streamed), _ids_or_text(whole)
    if streamed.output_ids is None or whole.output_ids is None:
        kind, a, b = "text", streamed.text, whole.text
    problems = []
    if a != b:
        problems.append(f"the {kind} differ (streamed {len(a)}, whole {len(b)})")
    if streamed.finish_reason != whole.finish_reason:
        problems.append(f"finish reason streamed {streamed.finish_reason!r}, whole {whole.finish_reason!r}")
    usage = []
    for what in ("prompt_tokens", "completion_tokens"):
        x, y = getattr(streamed, what), getattr(whole, what)
        if x is not None and y is not None and x != y:
            problems.append(f"usage {what} streamed {x}, whole {y}")
        usage.append(f"{what.split('_')[0]} {y if y is not None else '?'}" + ("" if x is not None else " (stream: none)"))
    if a != b and await _drifts(p, case, whole):
        return ProtocolCheck("stream", "not established", PROVES["stream"], DRIFT.format(case=case.id)), None
    detail = (f"case {case.id}: " + "; ".join(problems) if problems else
              f"case {case.id}: the same {len(a)} {kind}, finish reason {whole.finish_reason!r}, usage {', '.join(usage)}")
    return ProtocolCheck("stream", "failed" if problems else "passed", PROVES["stream"], detail), whole


async def check_max_tokens(p: _Probe, case: Case, full: Decoded) -> ProtocolCheck:
    ids = full.output_ids
    if ids is None or len(ids) < 2:
        return ProtocolCheck("max_tokens", "not applicable", PROVES["max_tokens"],
                             f"case {case.id}'s output has {len(ids or ())} ids: nothing to cut")
    k = min(4, len(ids) - 1)
    d = await p.send(case, max_tokens=k, stream=False)
    if lost := _lost("max_tokens", d):
        return lost
    problems = []
    if d.finish_reason != "length":
        problems.append(f"finish reason {d.finish_reason!r}, not 'length'")
    if d.output_ids is not None and tuple(d.output_ids) != tuple(ids[:k]):
        if await _drifts(p, case, full):
            return ProtocolCheck("max_tokens", "not established", PROVES["max_tokens"], DRIFT.format(case=case.id))
        problems.append(f"{len(d.output_ids)} ids, not the first {k} of the uncut output")
    if d.completion_tokens is not None and d.completion_tokens != k:
        problems.append(f"usage says {d.completion_tokens} completion tokens")
    return ProtocolCheck("max_tokens", "failed" if problems else "passed", PROVES["max_tokens"],
                         f"case {case.id}, max_tokens {k}: " + ("; ".join(problems) if problems else
                                                                f"finish 'length', the first {k} ids"))


def stop_string(text: str) -> tuple[str, int] | None:
    """A 3-character stop string from the middle of `text` that occurs there first, and where."""
    for m in range(max(1, len(text) // 2), len(text) - 2):
        s = text[m:m + 3]
        if s.strip() and text.find(s) == m:
            return s, m
    return None


async def check_stop(p: _Probe, case: Case, full: Decoded) -> ProtocolCheck:
    found = stop_string(full.text)
    if found is None:
        return ProtocolCheck("stop", "not applicable", PROVES["stop"],
                             f"case {case.id}'s output text ({len(full.text)} characters) has no place for a stop string")
    s, m = found
    d = await p.send(case, stop=(s,), stream=False)
    if lost := _lost("stop", d):
        return lost
    problems = []
    if d.finish_reason != "stop":
        problems.append(f"finish reason {d.finish_reason!r}, not 'stop'")
    if d.text != full.text[:m] and s not in d.text and await _drifts(p, case, full):
        return ProtocolCheck("stop", "not established", PROVES["stop"], DRIFT.format(case=case.id))
    if d.text != full.text[:m]:
        problems.append(f"the text is {len(d.text)} characters, not the {m} before the stop string"
                        + (" (it holds the stop string)" if s in d.text else ""))
    return ProtocolCheck("stop", "failed" if problems else "passed", PROVES["stop"],
                         f"case {case.id}, stop {s!r} at character {m}: "
                         + ("; ".join(problems) if problems else f"finish 'stop', the {m} characters before it"))


def tools_unsupported(fp: dict[str, Any]) -> str | None:
    """Why the engine cannot answer a tool call, where it says so itself: llama-server's /props
    `chat_template_caps` (its template renders no tools without `--jinja` and a tool-aware
    template; it then ignores `tools` and answers in text). None: it is asked."""
    caps = ((fp.get("engine") or {}).get("props") or {}).get("chat_template_caps")
    if isinstance(caps, dict) and caps.get("supports_tool_calls") is False:
        return ("llama-server's /props says its chat template supports no tool calls (chat_template_caps."
                "supports_tool_calls false; start it with --jinja and a tool-aware template)")
    return None


async def check_tools(p: _Probe, unsupported: str | None = None) -> ProtocolCheck:
    if unsupported is not None:
        return ProtocolCheck("tools", "not applicable", PROVES["tools"], unsupported)
    t = p.sender.targets["chat"]
    body = {"model": t.spec.model, "messages": TOOL_MESSAGES, "tools": [TOOL], "max_tokens": 256, "temperature": 0.0,
            "seed": p.sender.sampling.seed, "stream": False,
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}}
    body = merged_body(body, t.spec.extra_body, check=True)
    name = TOOL_NAME
    try:
        async with p.session.post(t.url, data=orjson.dumps(body), timeout=aiohttp.ClientTimeout(total=t.spec.timeout_s),
                                  headers={"content-type": "application/json", "x-request-id": p.rid(),
                                           **t.spec.headers}) as r:
            raw = await r.content.read(1 << 20)
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as e:
        return ProtocolCheck("tools", "not established", PROVES["tools"], f"the request failed: {type(e).__name__}")
    said = raw[:200].decode("utf-8", "replace").strip()
    if status in REFUSED:
        return ProtocolCheck("tools", "not applicable", PROVES["tools"],
                             f"{t.url} refused a named tool_choice (HTTP {status}): {said}")
    if status >= 500 and status not in (502, 503, 504):
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"HTTP {status} for a named tool_choice: {said}")
    if status != 200:
        return ProtocolCheck("tools", "not established", PROVES["tools"], f"HTTP {status}: {said}")
    try:
        msg = orjson.loads(raw)["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"HTTP {status}: no chat message in the answer")
    if not calls:
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"no tool call in the answer (content: "
                             f"{str(msg.get('content'))[:80]!r})")
    fn = calls[0].get("function") if isinstance(calls, list) and isinstance(calls[0], dict) else None
    if not isinstance(fn, dict):
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"a tool call without a function: {str(calls)[:80]}")
    if fn.get("name") != name:
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"the call names {fn.get('name')!r}, not {name!r}")
    raw_args = fn.get("arguments")
    if not isinstance(raw_args, str):  # the API's arguments are a JSON string, not an object
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"the arguments are a {type(raw_args).__name__}, "
                             "not the JSON string the API gives")
    import jsonschema  # here, not at import: only the tools check needs it

    try:
        args = orjson.loads(raw_args)
        jsonschema.validate(args, TOOL_SCHEMA)
    except orjson.JSONDecodeError as e:
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"the arguments are not JSON ({e}): "
                             f"{str(fn.get('arguments'))[:80]!r}")
    except jsonschema.ValidationError as e:
        return ProtocolCheck("tools", "failed", PROVES["tools"], f"the arguments break the schema: {e.message}")
    return ProtocolCheck("tools", "passed", PROVES["tools"],
                         f"{len(calls)} call(s) of {name} with arguments {orjson.dumps(args).decode()}")


async def _long_request(p: _Probe, case: Case, max_tokens: int, *, after_s: float | None, after_events: int
                        ) -> tuple[int, bool, str | None]:
    """Stream the case with `max_tokens` (ignore_eos) and walk away: after `after_s` seconds, or
    once `after_events` SSE events came. (events seen, whether the stream ended first, error)."""
    t = p.sender.targets[case.kind]
    body = p.sender.body(case, max_tokens=max_tokens, ignore_eos=True, stream=True, stop=(), logprobs=None)
    events, ended = 0, False
    # its own connection, closed when the client walks away: nothing kept alive or pooled can
    # carry the request, or hold its answer back, or make the walk-away wait for the rest of it
    ssl = t.spec.tls.context() if t.url.startswith("https:") else None
    connector = aiohttp.TCPConnector(force_close=True, ssl=ssl if ssl is not None else True)
    try:
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session, \
                asyncio.timeout(after_s if after_s is not None else t.spec.timeout_s):
            async with session.post(t.url, data=orjson.dumps(body), headers={
                    "content-type": "application/json", "accept-encoding": "identity", "x-request-id": p.rid(),
                    **t.spec.headers}) as r:
                if r.status != 200:
                    return 0, False, f"HTTP {r.status}"
                async for line in r.content:
                    if line.startswith(b"data:"):
                        events += 1
                    if after_s is None and events >= after_events:
                        r.close()  # the connection, not released for reuse: the server sees it go
                        return events, False, None
                ended = True
    except TimeoutError:
        if after_s is None:
            return events, False, f"no {after_events} events within {t.spec.timeout_s:g} s"
    except aiohttp.ClientError as e:
        return events, False, type(e).__name__
    return events, ended, None


async def check_walk_away(p: _Probe, name: Literal["timeout", "cancel"], case: Case, cfg: Protocol,
                          max_tokens: int) -> ProtocolCheck:
    proves = PROVES[name]
    idle = p.idle
    if idle is None:
        return ProtocolCheck(name, "not applicable", proves,
                             "the engine serves no running-requests gauge on /metrics, so a freed slot cannot be seen")
    if await p.back_to_idle(idle, SETTLE_S) is None:  # (an earlier check's request may still run)
        running, _ = await p.gauge()
        return ProtocolCheck(name, "not established", proves, f"the engine was still running {_reading(running)} "
                             f"request(s) {SETTLE_S:g} s after the previous check (idle: {idle:g})")
    _, gen0 = await p.gauge()
    if name == "timeout":
        events, ended, err = await _long_request(p, case, max_tokens, after_s=cfg.client_timeout_s, after_events=0)
        how = f"the client gave up after {cfg.client_timeout_s:g} s ({events} events received)"
    else:
        events, ended, err = await _long_request(p, case, max_tokens, after_s=None, after_events=3)
        how = f"the client closed the stream after {events} events"
    if err is not None:
        return ProtocolCheck(name, "not established", proves, f"the long request failed: {err}")
    running_left, gen_left = await p.gauge()  # at once: what the server had generated when the client left
    reached = events > 0 or (running_left is not None and running_left > idle) or (
        gen0 is not None and gen_left is not None and gen_left > gen0)
    if not reached:
        return ProtocolCheck(name, "not established", proves, f"{how}; the engine showed no sign of the request "
                             "(no event, no running request, no token generated): nothing was abandoned")
    if ended or (gen0 is not None and gen_left is not None and gen_left - gen0 >= max_tokens):
        return ProtocolCheck(name, "not established", proves, late=True, detail=
                             f"the {max_tokens}-token request had finished when the client left ({how}): the "
                             "client was held up, or the engine is faster than the check; raise "
                             "exactness.protocol.long_max_tokens (or lower client_timeout_s)")
    freed = await p.back_to_idle(idle, cfg.free_within_s)
    if freed is None:
        running, _ = await p.gauge()
        if running is None:  # /metrics stopped answering: nothing seen either way
            return ProtocolCheck(name, "not established", proves, f"{how}; then /metrics gave no running gauge")
        return ProtocolCheck(name, "failed", proves, f"{how}; the running gauge still read {running:g} (idle "
                             f"{idle:g}) {cfg.free_within_s:g} s later: the slot was not freed")
    problems = []
    _, gen1 = await p.gauge()
    await asyncio.sleep(max(0.3, 4 * POLL_S))
    _, gen2 = await p.gauge()
    generated = None if gen0 is None or gen2 is None else gen2 - gen0
    if gen1 is not None and gen2 is not None and gen2 > gen1:
        problems.append(f"the generated-token counter still grew by {gen2 - gen1:g} after the slot was freed")
    if generated is not None and generated >= max_tokens:
        problems.append(f"the server generated {generated:g} tokens, all {max_tokens} asked for: it did not stop")
    after = ""
    if name == "timeout":
        small = await p.send(case, max_tokens=4, stream=False)
        if small.error is not None:
            problems.append(f"the next request failed: {small.error.kind}: {small.error.detail}")
        else:
            after = "; the next request succeeded"
    seen = f"{how}; running back to {idle:g} in {freed:.2f} s" + (
        f"; {generated:g} of the {max_tokens} tokens asked for were generated" if generated is not None else "")
    return ProtocolCheck(name, "failed" if problems else "passed", proves,
                         seen + ("; " + "; ".join(problems) if problems else after))


async def run_protocol(sender: CaseSender, session: aiohttp.ClientSession, corpus: Corpus, cfg: Protocol, *,
                       scrape: Scrape, tag: str, max_len: int | None, fingerprint: dict[str, Any] | None = None
                       ) -> list[ProtocolCheck]:
    """Every check `cfg` turns on, in the module's order, against the engine behind `sender`
    (`fingerprint`: what the engine said of itself, for the checks it rules out)."""
    p = _Probe(sender, session, scrape, tag)
    p.idle, _ = await p.gauge()  # the running gauge with nothing of ours in flight: 0, once the
    if p.idle:                   # check's own requests (a timed-out one may still run) are gone
        p.idle = 0.0 if await p.back_to_idle(0.0, SETTLE_S) is not None else p.idle
    out: list[ProtocolCheck] = []
    case = next((c for c in corpus.cases if c.kind == "completion" and "long" not in c.tags), None)
    if case is None:
        return [await check_tools(p, tools_unsupported(fingerprint or {})) if n == "tools" else
                ProtocolCheck(n, "not applicable", PROVES[n], "the corpus has no short completion case to send")
                for n in PROVES if getattr(cfg, n)]
    long_tokens = cfg.long_max_tokens
    if max_len is not None:  # the prompt's own count (or a bound: never more tokens than bytes)
        prompt_tokens = await sender.count_tokens(case)
        long_tokens = max(16, min(long_tokens, max_len - prompt_tokens - 8))
    full: Decoded | None = None
    if cfg.stream or cfg.max_tokens or cfg.stop:
        check, full = await check_stream(p, case)
        if cfg.stream:
            out.append(check)
    for name, fn in (("max_tokens", check_max_tokens), ("stop", check_stop)):
        if getattr(cfg, name):
            out.append(await fn(p, case, full) if full is not None else
                       ProtocolCheck(name, "not established", PROVES[name], f"no uncut answer to compare with ({check.detail})"))
    if cfg.tools:
        out.append(await check_tools(p, tools_unsupported(fingerprint or {})))
    for name in ("timeout", "cancel"):
        if getattr(cfg, name):
            attempt = 0
            while attempt < WALK_AWAY_TRIES:
                attempt += 1  # a client held up past the whole answer shows nothing
                if attempt > 1:
                    await asyncio.sleep(RETRY_PAUSE_S)
                check = await check_walk_away(p, name, case, cfg, long_tokens)  # type: ignore[arg-type]
                if not check.late:
                    break
            if attempt > 1:
                check.detail += f" (attempt {attempt} of {WALK_AWAY_TRIES})"
            out.append(check)
    return out
