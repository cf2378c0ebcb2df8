"""Sending corpus cases: one case -> one request body -> one `Observed` output.

Every case is sent with every sampling parameter explicit (temperature 0, neutral penalties, the
profile's seed), `ignore_eos` off (stopping is part of the behaviour compared), streaming on (the
path production traffic takes) and `logprobs` top alternatives requested. Completion cases go to
the target's own API; chat cases to `/v1/chat/completions` on the same server.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadgate.engine.adapters import chat_api_for
from loadgate.engine.adapters.base import (
    Decoded,
    GenRequest,
    Sampling,
    merged_body,
    template_kwargs,
    with_template_kwargs,
)
from loadgate.errors import EngineError
from loadgate.exactness.compare import SeqOutput
from loadgate.exactness.corpus import Case
from loadgate.load.target import LiveTarget, TargetSpec, decode, fetch
from loadgate.net.http import get_json


@dataclass
class Observed:
    """One sequence as an engine produced it, and how it was asked for."""

    case_id: str
    body: dict[str, Any]
    route: str
    decoded: Decoded
    order: int = 0  # position in the scenario's send order
    in_flight: int = 1  # requests in flight when this one was sent (itself included)
    api: str | None = None  # the adapter that sent it (bundles replay through the same one)
    # when its answer began (its headers; else when it was sent) and ended (perf_counter_ns): while the
    # engine was serving it, as the client saw it
    span_ns: tuple[int, int] | None = None

    def output(self) -> SeqOutput:
        d = self.decoded
        return SeqOutput(
            ids=tuple(d.output_ids or ()),
            logprobs=None if d.logprobs is None else tuple(d.logprobs),
            top=None if d.top_logprobs is None else tuple(tuple((int(i), v) for i, v in pos) for pos in d.top_logprobs),
            finish_reason=d.finish_reason, placeholders=frozenset(d.placeholder_positions))


class CaseSender:
    """Builds and sends case requests to one engine (its API for completions, chat for chat)."""

    def __init__(self, spec: TargetSpec, session: aiohttp.ClientSession, *, logprobs: int, seed: int) -> None:
        self.spec = spec
        self.targets = {"completion": LiveTarget(spec, session),
                        "chat": LiveTarget(TargetSpec(**{**spec.__dict__, "api": chat_api_for(spec.api)}), session)}
        self.logprobs, self.sampling = logprobs, Sampling(seed=seed)
        self.in_flight = 0

    def body(self, case: Case, *, written: bool = False, **changes: Any) -> dict[str, Any]:
        """The case's request body; `changes` replace GenRequest fields (the protocol checks').
        `written`: with `target.extra_body` as the profile writes it (`${NAME}` unexpanded), the body
        baselines and bundles keep (replay expands it from its own environment)."""
        t = self.targets[case.kind]
        g = GenRequest(max_tokens=case.max_tokens, prompt_text=case.prompt, messages=case.messages, tools=case.tools,
                       ignore_eos=False, stop=case.stop, logprobs=self.logprobs or None, sampling=self.sampling,
                       stream=t.adapter.ids_in_stream)
        body = t.adapter.build_body(dataclasses.replace(g, **changes) if changes else g, self.spec.model)
        return merged_body(body, self.spec.extra_body_written if written else self.spec.extra_body, check=True)

    async def count_tokens(self, case: Case) -> int:
        """The prompt's token count from the engine's /tokenize (chat cases with their template);
        without that route, a conservative estimate of one token per 3 characters."""
        t = self.targets[case.kind]
        if case.kind == "chat":
            body: dict[str, Any] = with_template_kwargs(
                {"model": self.spec.model, "messages": list(case.messages or ()), "add_generation_prompt": True},
                template_kwargs(self.spec.extra_body))
        else:
            body = t.adapter.tokenize_body(self.spec.model, case.prompt or "", add_special=None)
        try:
            data = await get_json(t.session, self.spec.base_url + "/tokenize", method="POST", body=body)
        except EngineError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("count"), int):
            return int(data["count"])
        if isinstance(data, dict) and isinstance(data.get("tokens"), list):  # llama-server
            return len(data["tokens"])
        text = case.prompt or "".join(str(m.get("content", "")) for m in case.messages or ())
        return len(text) // 3 + 16

    async def decoded(self, case: Case, request_id: str, **changes: Any) -> Decoded:
        """The case sent once with GenRequest `changes` (the protocol checks' and sampling
        contracts' variants), decoded."""
        t = self.targets[case.kind]
        body = self.body(case, **changes)
        raw = await fetch(t, orjson.dumps(body), request_id)
        return decode(t.adapter, bool(body.get("stream", True)), raw, t.spec.max_event_bytes)

    async def send(self, case: Case, request_id: str, order: int = 0) -> Observed:
        t = self.targets[case.kind]
        body = self.body(case)
        self.in_flight += 1
        in_flight = self.in_flight
        try:
            raw = await fetch(t, orjson.dumps(body), request_id)
        finally:
            self.in_flight -= 1
        d = decode(t.adapter, bool(body.get("stream", True)), raw, t.spec.max_event_bytes)
        began = raw.start_ns if raw.headers_ns is None else raw.headers_ns
        kept = self.body(case, written=True) if self.spec.extra_body else body  # no secret in what is kept
        return Observed(case.id, kept, t.url, d, order, in_flight, t.spec.api, (began, raw.end_ns))

    async def send_all(self, cases: Sequence[Case], concurrency: int, tag: str) -> list[Observed]:
        """Send `cases` in order with `concurrency` requests in flight (closed loop)."""
        out: list[Observed | None] = [None] * len(cases)
        it = iter(enumerate(cases))

        async def worker() -> None:
            for k, case in it:
                out[k] = await self.send(case, f"{tag}-{k}", order=k)

        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(cases))))))
        return [o for o in out if o is not None]

    def close(self) -> None:
        for t in self.targets.values():
            if t.pool is not None:
                t.pool.close()
