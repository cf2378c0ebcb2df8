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
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from time import perf_counter_ns, time_ns
from typing import Any, TypeVar

import aiohttp
from tqdm import tqdm

from loadgate.analysis.summary import build_summary, snapshot_to_json
from loadgate.config.profile import Profile
from loadgate.engine.adapters import CHAT_APIS
from loadgate.engine.http import get_json
from loadgate.engine.servermetrics import GaugeSampler, scrape
from loadgate.errors import (
    EngineError,
    ExactnessNotEstablished,
    Inconclusive,
    MeasurementInvalid,
    Regression,
    ThresholdFailed,
)
from loadgate.jsonutil import dump_json, load_json
from loadgate.load.attack import Target, TargetSpec
from loadgate.load.plan import Plan, build_plan, trace_of
from loadgate.load.workers import Phase, WorkerGroup, run_phase_here
from loadgate.load.workload.pool import TokenPool, token_pool
from loadgate.records import RecordWriter
from loadgate.report.table import capacity_table, render_summary
from loadgate.version import __version__

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
    """The engine's base URL. For `endpoint: embedded`, loadgate starts its simulator itself, in a
    child process on loopback (`loadgate sim`): the engine's work then never runs on the client's
    event loop, where it would show up as client lag and trip the health budgets."""
    if profile.target.endpoint != "embedded":
        yield profile.target.endpoint.rstrip("/")
        return
    from loadgate.sim.process import SimProcess

    sim = SimProcess(profile.target.sim)
    await asyncio.get_running_loop().run_in_executor(None, sim.start)
    try:
        yield sim.url
    finally:
        await asyncio.get_running_loop().run_in_executor(None, sim.stop)


async def discover_model(session: aiohttp.ClientSession, base: str) -> str:
    data = await get_json(session, f"{base}/v1/models")
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise EngineError(f"{base}/v1/models lists no model; set target.model in the profile") from None


@contextlib.contextmanager
def run_folder(profile: Profile) -> Iterator[Path]:
    """A new run folder that is removed again when the run fails before anything was written to
    it (an engine that cannot be reached, a missing token source): no empty folders behind."""
    root = Path(profile.output.dir)
    made = [p for p in (root, *root.parents) if not p.exists()]  # folders this run creates
    path = new_run_dir(profile)
    try:
        yield path
    except BaseException:
        for p in (path, *made):
            try:
                p.rmdir()  # only succeeds when empty
            except OSError:
                break
        raise


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


async def _phase(plan: Plan, phase: Phase, writer: RecordWriter, bar: tqdm,
                 runner: Target | WorkerGroup) -> list[dict[str, Any]]:
    if isinstance(runner, WorkerGroup):
        return await runner.run(phase, writer, on_progress=bar.update)
    return await run_phase_here(runner, plan, phase, writer, on_done=lambda: bar.update(1))


async def _run(profile: Profile, progress: bool) -> Path:
    from loadgate.gate.policy import open_engine

    async with open_engine(profile) as e:
        with run_folder(profile) as run_dir:
            await perform(profile, e.base, e.session, e.model, run_dir, progress)
    return run_dir


Tokens = tuple[TokenPool, int | None]


async def prepare_tokens(profile: Profile, session: aiohttp.ClientSession, base: str, model: str) -> Tokens:
    """The token pool and the chat template's token count, from `workload.tokenizer`; done before
    the exactness check so that a missing source fails in a second, not after the check."""
    return await token_pool(profile.workload.tokenizer, profile.resolve, session, base, model,
                            profile.target.api, profile.target.api in CHAT_APIS)


async def perform(profile: Profile, base: str, session: aiohttp.ClientSession, model: str, run_dir: Path,
                  progress: bool, extra_meta: dict[str, Any] | None = None, tokens: Tokens | None = None) -> None:
    """The performance phase: warmup, then each load level with counters scraped at the measured
    window's boundaries; writes meta.json, records.jsonl, server.json and health.json."""
    chat = profile.target.api in CHAT_APIS
    tp, overhead = tokens or await prepare_tokens(profile, session, base, model)
    need_text = chat or not tp.exact
    pool = list(tp.ids)
    plan = build_plan(profile, pool)
    spec = TargetSpec(base, profile.target.api, model, profile.target.timeout_s, stream=profile.load.stream,
                      headers=dict(profile.target.headers), pool_text=tp.text if need_text else None,
                      prompt_overhead=overhead if tp.exact else None, transport=profile.load.transport)
    metrics_url = profile.metrics_url(base)
    t0 = perf_counter_ns()
    dump_json(run_dir / "meta.json", {
        "loadgate": __version__, "run_id": run_dir.name, "profile": dataclasses.asdict(profile),
        "engine_url": base, "api": profile.target.api, "model": model, "t0_ns": t0,
        "t0_unix_ns": time_ns(), "python": sys.version.split()[0], "host": platform.node(),
        "levels": levels(profile), "token_pool": {"size": len(pool), "source": tp.source, "exact": tp.exact},
        "chat_template_tokens": overhead if chat else None, **(extra_meta or {})})
    server: dict[str, Any] = {}
    health: dict[str, Any] = {}
    total = len(plan) * len(levels(profile))
    load = profile.load
    with RecordWriter(run_dir / "records.jsonl") as writer, \
            tqdm(total=total, desc=profile.name, unit="req", file=sys.stderr,
                 disable=None if progress else True, leave=False) as bar:
        for level in levels(profile):
            tag = f"{run_dir.name}-L{level}"
            # warmup and measurement share the connections (the warmup opens them), in this process
            # or in worker processes kept for the level
            runner = Target(spec, session) if load.workers == 1 else \
                WorkerGroup(spec, profile, pool, load.workers, run_dir)
            try:
                if plan.n_warmup:
                    await _phase(plan, Phase(plan.warmup_requests(), level, load.rate is not None, tag + "w", t0,
                                             load.max_in_flight, warmup=True), writer, bar, runner)
                before = await scrape(session, metrics_url)
                sampler = GaugeSampler(session, metrics_url)
                if before is not None:
                    sampler.start()
                try:
                    health[str(level)] = await _phase(
                        plan, Phase(plan.measured_requests(), level, load.rate is not None, tag, t0,
                                    load.max_in_flight, load.duration_s), writer, bar, runner)
                finally:
                    gauges = await sampler.stop()
                after = await scrape(session, metrics_url)
                server[str(level)] = {
                    "before": None if before is None else snapshot_to_json(before),
                    "after": None if after is None else snapshot_to_json(after), "gauges": gauges}
            finally:
                if isinstance(runner, WorkerGroup):
                    runner.close()
                elif runner.pool is not None:
                    runner.pool.close()
    dump_json(run_dir / "server.json", server)
    dump_json(run_dir / "health.json", health)


def measure(profile: Profile, *, progress: bool = False) -> Path:
    """The performance phase alone: send the plan, write the run folder, return its path."""
    return run_async(_run(profile, progress))


def run_profile(profile: Profile, *, progress: bool = True, unverified: bool = False) -> None:
    """`loadgate run`: fingerprint -> exactness check -> attestation -> performance -> fingerprint
    again (for both engines, in interleaved runs, with an `ab` section); print the check reports
    and the tables; apply thresholds; raise the error that carries the exit code unless all passed."""
    if profile.exactness is None and not unverified:
        raise ExactnessNotEstablished(
            f"{profile.path or 'profile'}: no `exactness` section, so no speed can be reported for this "
            "configuration; add one (README: exactness) or measure anyway with `loadgate run --unverified`")
    profile.check_files(("workload",) if unverified else ("workload", "exactness"))
    if profile.workload.trace is not None:
        trace_of(profile)  # every line, before the exactness check
    if profile.ab is not None:
        _run_ab(profile, progress, unverified)
        return
    run_dir = run_async(_gated(profile, progress, unverified))
    summary = build_summary(run_dir)
    if unverified:
        print("\nUNVERIFIED: no exactness check ran for this configuration; these figures are not a result.")
    print(render_summary(summary))
    cap = capacity_table(summary, dataclasses.asdict(profile.slo))
    if cap:
        print("\n" + cap)
    outcomes = _thresholds(profile, {lv: s for lv, s in summary["levels"].items()}, None)
    summary["thresholds"] = outcomes
    dump_json(run_dir / "summary.json", summary)
    print(f"\nrecords: {run_dir / 'records.jsonl'}\nsummary: {run_dir / 'summary.json'}")
    print(_html(run_dir))
    _finish(summary["valid"], [p for s in summary["levels"].values() for p in s["invalid"]], outcomes, None,
            unverified)


def _html(run_dir: Path) -> str:
    """Write the run's self-contained HTML report with plots when matplotlib is installed."""
    from loadgate.errors import UsageError
    from loadgate.report.views import render_run

    try:
        return render_run(run_dir, "table", html=True).rsplit("\n\n", 1)[-1]
    except UsageError as e:
        return f"(no HTML report: {e.message})"


def _thresholds(profile: Profile, cand: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]] | None
                ) -> list[dict[str, Any]]:
    """Evaluate the profile's thresholds on every load level; print them; return them as JSON."""
    if not profile.thresholds:
        return []
    from loadgate.analysis import thresholds as th

    ts = th.parse_all({k: list(v) for k, v in profile.thresholds.items()})
    out = []
    for lv, summary in cand.items():
        outcomes = th.evaluate_all(ts, summary, None if base is None else base.get(lv))
        where = f"level {lv}" if len(cand) > 1 else "this run"
        if base is not None:
            where += ", on the median candidate run" + (" against the median baseline run" if any(
                t.value is None for t in ts) else "")
        print(f"\nthresholds ({where}):\n" + th.render(outcomes))
        out += [{"level": lv, **th.to_json(o)} for o in outcomes]
    return out


def _finish(valid: bool, problems: list[str], thresholds: list[dict[str, Any]], verdict: str | None,
            unverified: bool) -> None:
    """Map the run's outcome to its exit code (the first failing stage wins)."""
    if not valid:
        raise MeasurementInvalid("measurement invalid: " + "; ".join(problems))
    if unverified:
        raise ExactnessNotEstablished("exactness not established: the run was --unverified")
    failed = [t for t in thresholds if not t["passed"]]
    if failed:
        raise ThresholdFailed(f"{len(failed)} threshold(s) failed: " + "; ".join(
            f"{t['metric']} {t['threshold']}" for t in failed[:5]))
    if verdict == "regressed":
        raise Regression("the candidate regressed against the baseline (see the comparison above)")
    if verdict in ("inconclusive", "single run"):
        raise Inconclusive("the comparison is inconclusive: the runs cannot rule out a change that matters; "
                           "add pairs (ab.pairs) or reduce noise")
    if verdict == "n/a":
        raise Inconclusive("nothing to decide on: a deciding figure (ab.decide_on) has no value on one side "
                           "(every request failed, or the engine does not report it)")


def _run_ab(profile: Profile, progress: bool, unverified: bool) -> None:
    from loadgate.analysis import ab
    from loadgate.report.compare_table import as_table, to_json

    assert profile.ab is not None
    with run_folder(profile) as run_dir:
        run_async(ab.run_ab(profile, run_dir, progress, unverified))
    comps, settings = ab.comparisons(run_dir)
    verdict = ab.verdict(comps, list(profile.ab.decide_on))
    info = ab.load_ab(run_dir)
    summaries = {s: [load_json(d / "summary.json") for d in info["runs"][s]] for s in ab.SIDES}
    for lv, c in comps.items():
        print(f"\ncandidate vs baseline at {'rate' if profile.load.rate is not None else 'concurrency'} {lv}, "
              f"{profile.ab.pairs} pairs of runs (order {' '.join(info['ab']['order'])}):")
        print(as_table(c, len(info["runs"]["A"]), len(info["runs"]["B"])))
        for f in profile.ab.decide_on:
            if f in c:
                print("  " + c[f].words())
    print(f"\nverdict: {verdict} (decided on {', '.join(profile.ab.decide_on)}; practical change "
          f"{profile.ab.practical:.0%}, alpha {profile.ab.alpha})")
    outcomes = _thresholds(profile, ab.median_run(info["runs"]["B"]), ab.median_run(info["runs"]["A"]))
    problems = [p for side in summaries.values() for s in side for lv in s["levels"].values() for p in lv["invalid"]]
    dump_json(run_dir / "comparison.json", {"levels": {lv: to_json(c) for lv, c in comps.items()},
                                             "verdict": verdict, "thresholds": outcomes, "settings": settings})
    print(f"\nrun folders: {run_dir}/A1 … B{profile.ab.pairs}; comparison: {run_dir / 'comparison.json'}")
    print(_html(run_dir))
    _finish(not problems, problems, outcomes, verdict, unverified)


async def _gated(profile: Profile, progress: bool, unverified: bool) -> Path:

    with run_folder(profile) as run_dir:
        return await _gated_in(profile, progress, unverified, run_dir)


async def _gated_in(profile: Profile, progress: bool, unverified: bool, run_dir: Path) -> Path:
    from loadgate.gate import policy as gate

    async with gate.open_engine(profile) as e:
        att = None
        tokens = await prepare_tokens(profile, e.session, e.base, e.model)
        if not unverified:
            outcome = await gate.check_engine(e, run_dir)
            gate.print_check(outcome)
            gate.raise_if_failed(outcome)
            att = outcome.attestation
            assert att is not None
            await gate.verify_fingerprint(e, att, "between the check and the measurement")
            print()
        await perform(profile, e.base, e.session, e.model, run_dir, progress,
                      extra_meta={"unverified": unverified, "attestation": gate.attestation_meta(att)}, tokens=tokens)
        if att is not None:
            await gate.verify_fingerprint(e, att, "during the measurement")
    return run_dir
