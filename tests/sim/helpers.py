"""Shared helpers for the simulator tests (a helper module: no tests, so not named test_*).

`fast_cfg` gives a SimConfig whose steps cost nothing (the engine only yields to the event loop
between steps), `serve` runs test code against an in-process simulator, `post_stream` collects a
streaming response as its SSE data payloads, and `shape` / `assert_same_shape` compare JSON values
by key sets and value types, recursively.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import numpy as np
import orjson

from loadgate.config.simconfig import SimConfig
from loadgate.exactness.compare import ulp_distance
from loadgate.sim.server import RunningSim, running_sim
from tests.fixtures_path import fixture_file

T = TypeVar("T")


def ulp(a: float, b: float) -> int:
    """float32 ULPs between a and b, by loadgate's own comparison."""
    return int(ulp_distance(np.asarray(a), np.asarray(b)))


def vllm_fixture(name: str) -> Path:
    """A recorded vLLM response (tests/fixtures_path.py)."""
    return fixture_file("vllm-cpu", name)


def fixture_events(name: str) -> list[Any]:
    """The JSON payloads of a recorded SSE stream (`[DONE]` as the string "[DONE]")."""
    return sse_payloads(vllm_fixture(name).read_bytes())


def fixture_json(name: str) -> Any:
    """A recorded JSON body (the trailing `HTTP nnn` line of the error fixtures dropped)."""
    text = vllm_fixture(name).read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("HTTP ")]
    return orjson.loads("\n".join(lines))


def fast_cfg(**kw: Any) -> SimConfig:
    """A SimConfig for tests: zero step costs unless overridden."""
    base = SimConfig(prefill_us_per_token=0.0, decode_step_us=0.0, decode_us_per_seq=0.0,
                     verify_us_per_token=0.0, draft_us_per_token=0.0)
    return replace(base, **kw)


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    """Run a coroutine to completion with a time limit."""
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def serve(cfg: SimConfig, body: Callable[[RunningSim, aiohttp.ClientSession], Awaitable[T]],
          timeout: float = 30.0) -> T:
    """Start a simulator with `cfg`, run `body(sim, session)`, stop the simulator."""
    async def main() -> T:
        async with running_sim(cfg) as sim, aiohttp.ClientSession() as session:
            return await body(sim, session)
    return run(main(), timeout)


def sse_payloads(raw: bytes) -> list[Any]:
    """Data payloads of an SSE byte stream: parsed JSON, or the raw text if it is not JSON."""
    out: list[Any] = []
    for event in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                data = line[6:]
                try:
                    out.append(orjson.loads(data))
                except orjson.JSONDecodeError:
                    out.append(data.decode())
    return out


async def post_json(session: aiohttp.ClientSession, url: str, body: Any,
                    headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """POST `body`; returns the status and the parsed JSON answer."""
    async with session.post(url, json=body, headers=headers) as r:
        return r.status, orjson.loads(await r.read())


async def post_stream(session: aiohttp.ClientSession, url: str, body: Any,
                      headers: dict[str, str] | None = None) -> tuple[int, list[Any]]:
    """POST a streaming request; returns the status and the SSE data payloads."""
    async with session.post(url, json=body, headers=headers) as r:
        return r.status, sse_payloads(await r.read())


def completion_ids(events: list[Any]) -> list[int]:
    """Output token ids of an OpenAI stream that asked for `return_token_ids`."""
    ids: list[int] = []
    for e in events:
        if isinstance(e, dict) and e.get("choices"):
            ids.extend(e["choices"][0].get("token_ids") or [])
    return ids


def shape(v: Any, maps: frozenset[str] = frozenset(), key: str = "") -> Any:
    """The type skeleton of a JSON value: dicts keep their keys, lists the shape of their first
    element, scalars become type names. Dicts under a key in `maps` (data-keyed maps, such as
    completions' `top_logprobs`) keep only the shape of their values."""
    if isinstance(v, dict):
        if key in maps:
            return {"<map>": shape(next(iter(v.values())), maps) if v else None}
        return {k: shape(x, maps, k) for k, x in v.items()}
    if isinstance(v, list):
        return ["list", shape(v[0], maps, key) if v else None]
    return type(v).__name__ if v is not None else "null"


def assert_same_shape(ours: Any, theirs: Any, maps: frozenset[str] = frozenset(), where: str = "$") -> None:
    """Fail with the path of the first difference in key sets or value types."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{where}: expected an object, got {ours!r}"
        if where.rsplit(".", 1)[-1].split("[")[0] in maps:
            if ours and theirs:
                assert_same_shape(next(iter(ours.values())), next(iter(theirs.values())), maps, where + ".*")
            return
        assert set(ours) == set(theirs), (f"{where}: keys differ: missing {sorted(set(theirs) - set(ours))}, "
                                          f"extra {sorted(set(ours) - set(theirs))}")
        for k in theirs:
            assert_same_shape(ours[k], theirs[k], maps, f"{where}.{k}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), f"{where}: expected a list, got {ours!r}"
        if ours and theirs:
            assert_same_shape(ours[0], theirs[0], maps, where + "[0]")
    else:
        assert shape(ours) == shape(theirs), f"{where}: {shape(ours)} ({ours!r}) != {shape(theirs)} ({theirs!r})"
