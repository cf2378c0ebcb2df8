"""`loadgate run`: reach (or start) the engine, plan, send, record, summarize, print.

The order is the product's: fingerprint -> exactness -> attestation -> performance. This module
wires the stages; each stage lives in its own module and is usable alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import platform
import sys
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from time import perf_counter_ns, time_ns
from typing import Any, TypeVar

import aiohttp
import orjson
from tqdm import tqdm

from loadgate import __version__
from loadgate.attack import Target, closed_loop, make_session, open_loop
from loadgate.engines import adapter_for
from loadgate.errors import EngineError
from loadgate.jsonutil import dump_json
from loadgate.metrics import summarize
from loadgate.plan import PlannedRequest, build_plan
from loadgate.profile import Profile
from loadgate.records import RecordWriter, read_records
from loadgate.report.table import render_summary
from loadgate.workload.text import filler_text

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed, else on asyncio's default loop."""
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    except ImportError:
        return asyncio.run(coro)


@contextlib.asynccontextmanager
async def engine_url(profile: Profile) -> AsyncIterator[str]:
    """The engine's base URL; for `endpoint: embedded`, a simulator started in this process."""
    if profile.target.endpoint != "embedded":
        yield profile.target.endpoint.rstrip("/")
        return
    from loadgate.sim.server import running_sim

    async with running_sim(profile.target.sim, host="127.0.0.1", port=0) as sim:
        yield sim.url


async def get_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET",
                   body: dict[str, Any] | None = None, timeout_s: float = 30.0) -> Any:
    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            data = await r.read()
            if r.status != 200:
                raise EngineError(f"{method} {url} answered HTTP {r.status}: {data[:200].decode('utf-8', 'replace')}")
            return orjson.loads(data)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise EngineError(f"{method} {url} failed: {e or type(e).__name__}; is the engine up?") from None
    except orjson.JSONDecodeError:
        raise EngineError(f"{method} {url} did not answer JSON") from None


async def discover_model(session: aiohttp.ClientSession, base: str) -> str:
    data = await get_json(session, f"{base}/v1/models")
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise EngineError(f"{base}/v1/models lists no model; set target.model in the profile") from None


async def token_pool(session: aiohttp.ClientSession, base: str, model: str) -> list[int]:
    """Real token ids of the target's tokenizer: its /tokenize applied to fixed filler text."""
    data = await get_json(session, f"{base}/tokenize", method="POST",
                          body={"model": model, "prompt": filler_text(), "add_special_tokens": False})
    ids = data.get("tokens") if isinstance(data, dict) else None
    if not ids:
        raise EngineError(f"{base}/tokenize returned no tokens")
    return sorted(set(int(i) for i in ids))


def new_run_dir(profile: Profile) -> Path:
    root = Path(profile.output.dir)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = profile.output.run_id or f"{profile.name}-{stamp}"
    path, k = root / name, 1
    while path.exists():
        k += 1
        path = root / f"{name}-{k}"
    path.mkdir(parents=True)
    return path


def levels(profile: Profile) -> list[int | float]:
    load = profile.load
    if load.rate is not None:
        return [load.rate]
    c = load.concurrency
    return list(c) if isinstance(c, tuple) else [c or 1]


async def _send(t: Target, reqs: list[PlannedRequest], level: int | float, profile: Profile,
                writer: RecordWriter, tag: str, t0: int, bar: tqdm) -> None:
    def done(_: dict[str, Any]) -> None:
        bar.update(1)

    stop = None if profile.load.duration_s is None else perf_counter_ns() + int(profile.load.duration_s * 1e9)
    if profile.load.rate is not None:
        await open_loop(t, reqs, float(level), writer, run_tag=tag, t0_ns=t0, start_ns=perf_counter_ns(),
                        max_in_flight=profile.load.max_in_flight, on_done=done, stop_at_ns=stop)
    else:
        await closed_loop(t, reqs, int(level), writer, run_tag=tag, t0_ns=t0, on_done=done, stop_at_ns=stop)


async def _run(profile: Profile, progress: bool) -> tuple[Path, dict[str, Any]]:
    async with engine_url(profile) as base, make_session(profile.target.headers) as session:
        model = profile.target.model or await discover_model(session, base)
        plan = build_plan(profile, await token_pool(session, base, model))
        adapter = adapter_for(profile.target.api)
        target = Target(session, base + adapter.path, adapter, model, profile.target.timeout_s,
                        stream=profile.load.stream)
        run_dir = new_run_dir(profile)
        t0 = perf_counter_ns()
        meta = {"loadgate": __version__, "run_id": run_dir.name, "profile": dataclasses.asdict(profile),
                "engine_url": base, "api": profile.target.api, "model": model, "t0_ns": t0,
                "t0_unix_ns": time_ns(), "python": sys.version.split()[0], "host": platform.node(),
                "levels": levels(profile)}
        dump_json(run_dir / "meta.json", meta)
        warm = [r for r in plan if r.warmup]
        measured = [r for r in plan if not r.warmup]
        total = (len(warm) + len(measured)) * len(levels(profile))
        with RecordWriter(run_dir / "records.jsonl") as writer, \
                tqdm(total=total, desc=profile.name, unit="req", file=sys.stderr,
                     disable=None if progress else True, leave=False) as bar:
            for level in levels(profile):
                if warm:
                    await _send(target, warm, level, profile, writer, f"{run_dir.name}-L{level}-w", t0, bar)
                await _send(target, measured, level, profile, writer, f"{run_dir.name}-L{level}", t0, bar)
    records = list(read_records(run_dir / "records.jsonl"))
    summary = {"run_id": run_dir.name, "levels": {}}
    for level in levels(profile):
        summary["levels"][str(level)] = summarize([r for r in records if r["level"] == level])
    dump_json(run_dir / "summary.json", summary)
    return run_dir, summary


def run_profile(profile: Profile, *, progress: bool = True) -> int:
    """Run a profile end to end; print the table; return the exit code."""
    run_dir, summary = run_async(_run(profile, progress))
    print(render_summary(summary, profile))
    print(f"\nrecords: {run_dir / 'records.jsonl'}\nsummary: {run_dir / 'summary.json'}")
    return 0
