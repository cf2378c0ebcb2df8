"""The performance phase's load levels, one after another: for each level (a concurrency of a
closed loop, or the rate of an open loop), empty the prefix cache when asked, run the warmup, then the
ramp (`load.ramp`: the load rising to the level's, every request of it finished before what follows),
scrape the server's counters, run the measured requests while the scraper process
(`loadgate.net.scraper`, one for all the levels, the caller's) keeps the server's metrics as a series
in the run folder and samples its gauges, and scrape again.

`loadgate.runs.measure` opens the run folder's record writer and the progress bar, admits the gate's
token and writes meta.json, then hands the levels to `run_levels` and writes what it returns
(server.json: the snapshots and gauges per level; health.json: the client's health per level).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from loadgate.analysis.search import probe_load
from loadgate.config.profile import Profile
from loadgate.documents import GaugeStats, HealthPhase, ServerLevel
from loadgate.engine.adapters import metric_prefixes
from loadgate.engine.adapters.base import GAUGE_KEYS
from loadgate.load.distributed import RayGroup
from loadgate.load.executors import Concurrency, LoadLevel, Rate, StopFlag
from loadgate.load.plan import Plan, build_plan
from loadgate.load.recorder import read_abort
from loadgate.load.replica_metrics import scrape_all
from loadgate.load.target import LiveTarget, TargetSpec
from loadgate.load.workers import Phase, WorkerGroup, run_phase_here
from loadgate.net.connect import Engine
from loadgate.net.http import empty_prefix_cache
from loadgate.net.scraper import Scraper
from loadgate.records import RecordWriter
from loadgate.snapshot import Snapshot, snapshot_to_json

if TYPE_CHECKING:
    from loadgate.load.abort_watch import AbortWatch

Tick = Callable[[int], None]
# after each level: (the level, its server.json entry, its health) -> the next level, None to end
# (the capacity search decides its probes this way; a listed sweep passes none)
NextLevel = Callable[[LoadLevel, ServerLevel, list[HealthPhase]], LoadLevel | None]


def levels(profile: Profile) -> list[LoadLevel]:
    """The profile's load levels in the order they run: its rate (an open loop, with its cap; a
    timed trace is one, numbered by `load.trace_speed`), each of
    its rates (a list is a sweep), or each of its concurrencies (a closed loop; a list is a sweep). `.level` is each one's number."""
    load = profile.load
    if load.search is not None:  # the first probe; the prober appends the others as it goes
        s = load.search
        return [Concurrency(int(s.lo)) if s.over == "concurrency" else Rate(probe_load(s, s.lo), load.max_in_flight)]
    if load.schedule == "trace":  # one level, numbered by its speed: the times are the trace's
        return [Rate(load.trace_speed, load.max_in_flight)]
    if load.rate is not None:
        return [Rate(r, load.max_in_flight) for r in load.rates]
    c = load.concurrency
    return [Concurrency(n) for n in (c if isinstance(c, tuple) else (c or 1,))]


def at_level(profile: Profile, loop: LoadLevel) -> Profile:
    """The profile as one open-loop level sees it: `load.rate` that level's rate (a rate sweep's, or a
    search's probe over rate, the search then left out), so the plan's arrival times (here and in
    worker processes) are that rate's. Any other profile is returned as is."""
    if not isinstance(loop, Rate):
        return profile
    s = profile.load.search
    if s is not None and s.over == "rate":
        return replace(profile, load=replace(profile.load, rate=loop.per_s, search=None))
    if isinstance(profile.load.rate, tuple):
        return replace(profile, load=replace(profile.load, rate=loop.per_s))
    return profile


Runner = LiveTarget | WorkerGroup | RayGroup


def _runner(e: Engine, spec: TargetSpec, at: Profile, pool: list[int], plan: Plan, workers_dir: Path,
            stop: StopFlag, round_: int, level: str) -> Runner:
    """Where a level's phases run: this process, its worker processes, or Ray actors on other hosts."""
    load = at.load
    if load.distributed is not None:
        return RayGroup(spec, at, pool, workers_dir, stop, round_, plan.dataset, plan, level)
    if load.workers == 1:
        return LiveTarget(spec, e.session)
    return WorkerGroup(spec, at, pool, load.workers, workers_dir, stop, round_=round_, dataset=plan.dataset)


async def _phase(plan: Plan, phase: Phase, writer: RecordWriter, tick: Tick,
                 runner: Runner, stop: StopFlag) -> list[dict[str, Any]]:
    if isinstance(runner, WorkerGroup | RayGroup):
        return await runner.run(phase, writer, on_progress=tick)
    return await run_phase_here(runner, plan, phase, writer, on_done=lambda: tick(1), stop_flag=stop)


def _snapshot(s: Snapshot | None) -> Any:
    return None if s is None else snapshot_to_json(s, metric_prefixes())


async def run_levels(e: Engine, plan: Plan, pool: list[int], spec: TargetSpec, level_list: list[LoadLevel],
                     writer: RecordWriter, tick: Tick, *, run_tag: str, t0_ns: int, round_base: int,
                     workers_dir: Path, stop: StopFlag, scraper: Scraper, next_level: NextLevel | None = None,
                     watch: AbortWatch | None = None) -> tuple[dict[str, ServerLevel], dict[str, list[HealthPhase]]]:
    """Run every level (see the module docstring); (server.json's, health.json's) contents, keyed by
    level. Level k sends the prompts of round `round_base + k` (`workload.cache: fresh`; see
    load.plan). A stop between levels (or phases) ends the loop with what was measured. `next_level`,
    when given, is asked after each level for the level to append to `level_list` (a search's probes).
    `scraper` is told where each level's measured window begins and ends.
    `watch`: the watcher of the thresholds with abort_on_fail (`loadgate.load.abort_watch`), told of each
    measured phase."""
    profile = e.profile
    load = profile.load
    metrics_urls = [profile.metrics_url(b) for b in spec.endpoints or (e.base,)]  # replicas: summed
    server: dict[str, ServerLevel] = {}
    health: dict[str, list[HealthPhase]] = {}
    index = 0
    while index < len(level_list):
        loop = level_list[index]
        level = loop.level
        if stop.is_set():
            break
        round_ = round_base + index
        at = at_level(profile, loop)  # a rate sweep's level, or a search's probe over rate: its own arrivals
        if (profile.workload.cache == "fresh" and round_ != plan.round) or at is not profile:  # (warm: one plan for
            plan = build_plan(at, pool, round_, plan.dataset)  # all levels of a closed loop)
        reset = await empty_prefix_cache(e.session, e.base, profile.target.api) if load.reset_prefix_cache else None
        tag = f"{run_tag}-L{level}"
        # warmup and measurement share the connections (the warmup opens them), in this process
        # or in worker processes kept for the level
        runner = _runner(e, spec, at, pool, plan, workers_dir, stop, round_, str(level))
        try:
            if plan.n_warmup:
                await _phase(plan, Phase(plan.warmup_requests(), loop, tag + "w", t0_ns, warmup=True),
                             writer, tick, runner, stop)
            if load.ramp is not None and not stop.is_set():  # before the scrape: the counters hold none of it
                await _phase(plan, Phase(range(len(plan), len(plan)), loop, tag + "r", t0_ns, ramp=load.ramp),
                             writer, lambda n: None, runner, stop)
            if stop.is_set():
                break
            before = await scrape_all(e.session, metrics_urls)
            scraper.begin(level)
            poll = None
            if watch is not None:  # the thresholds with abort_on_fail, judged as the phase's requests finish
                watch.level(tag, perf_counter_ns())
                poll = asyncio.create_task(watch.poll(stop, now=load.workers == 1 and load.distributed is None))
            try:
                health[str(level)] = [HealthPhase(**h) for h in await _phase(
                    plan, Phase(plan.measured_requests(), loop, tag, t0_ns, load.duration_s), writer, tick,
                    runner, stop)]
            finally:
                if watch is not None and poll is not None:
                    watch.end()
                    poll.cancel()
                scraped = scraper.end(level)
            gauges = scraped.pop("gauges") or dict.fromkeys(GAUGE_KEYS)
            if (why := read_abort(workers_dir)) is not None:  # a worker's breaker (or this process's) tripped
                stop.abort(why, now=False)
            after = await scrape_all(e.session, metrics_urls)
            server[str(level)] = ServerLevel(  # prefix_cache_reset: the route that emptied the cache (None: not asked)
                before=_snapshot(before), after=_snapshot(after), prefix_cache_reset=reset,
                gauges={k: None if v is None else GaugeStats(**v) for k, v in gauges.items()}, scrape=scraped)
        finally:
            runner.close()  # (worker processes, Ray actors, or this process's pools)
        if isinstance(runner, RayGroup) and runner.lost:  # part of the level was not sent: no more levels
            break
        index += 1
        if next_level is not None and not stop.is_set():
            following = next_level(loop, server[str(level)], health[str(level)])
            if following is not None:
                level_list.append(following)
    return server, health
