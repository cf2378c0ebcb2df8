"""Run one phase of a plan (warmup or measured, at one load level), in this process or in workers.

One event loop can only stamp so many reads per second before its own lag shows in the figures.
With `load.workers: N` the phase runs in N processes, each with its own loop and connection pool:
- closed loop: the concurrency is split across workers (c // N, the first c % N get one more) and
  all of them draw the next request from one shared counter, so the global order and the global
  number in flight are those of a single closed loop;
- open loop: request k goes to worker k % N, each starting its share at the same absolute
  intended times (`perf_counter_ns` is one system-wide monotonic clock on Linux).
Each worker writes its own part file; the parent appends the parts to `records.jsonl` after the
phase. Workers rebuild the (pure, lazy) plan from the profile and token pool instead of receiving
it, so nothing large crosses process boundaries.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from loadgate.attack import Recorder, Target, TargetSpec, closed_loop, make_session, open_loop
from loadgate.health import HealthMonitor
from loadgate.jsonutil import dump_json, load_json
from loadgate.plan import Plan, build_plan
from loadgate.profile import Profile
from loadgate.records import RecordWriter


@dataclass(frozen=True)
class Phase:
    indices: range  # plan indices sent in this phase
    level: int | float  # concurrency (closed loop) or rate (open loop)
    open_loop: bool
    run_tag: str
    t0_ns: int
    max_in_flight: int | None = None
    duration_s: float | None = None


def _share(total: int, n: int, j: int) -> int:
    return total // n + (1 if j < total % n else 0)


async def _run_in_loop(spec: TargetSpec, plan: Plan, phase: Phase, writer: RecordWriter,
                       on_done: Callable[[], None] | None, *, concurrency: int | None,
                       next_index: Callable[[], int | None] | None, start_ns: int | None,
                       mine: Callable[[int], bool] = lambda k: True) -> dict[str, Any]:
    async with make_session(spec.headers) as session:
        target = Target(spec, session)
        recorder = Recorder(target, writer, on_done)
        try:
            return await _drive(target, plan, phase, recorder, concurrency=concurrency,
                                next_index=next_index, start_ns=start_ns, mine=mine)
        finally:
            if target.pool is not None:
                target.pool.close()


async def _drive(target: Target, plan: Plan, phase: Phase, recorder: Recorder, *, concurrency: int | None,
                 next_index: Callable[[], int | None] | None, start_ns: int | None,
                 mine: Callable[[int], bool]) -> dict[str, Any]:
    gc.collect()
    gc.freeze()  # what exists now (plan, pools, modules) never needs scanning again: shorter pauses
    monitor = HealthMonitor()
    monitor.start()
    stop = None if phase.duration_s is None else perf_counter_ns() + int(phase.duration_s * 1e9)
    if phase.open_loop:
        await open_loop(target, (plan[k] for k in phase.indices if mine(k)), float(phase.level), recorder,
                        run_tag=phase.run_tag, t0_ns=phase.t0_ns, start_ns=start_ns or perf_counter_ns(),
                        max_in_flight=phase.max_in_flight, stop_at_ns=stop)
    else:
        def draw() -> Iterator[Any]:
            while next_index is not None and (k := next_index()) is not None:
                yield plan[k]
        src = draw() if next_index is not None else (plan[k] for k in phase.indices)
        await closed_loop(target, src, concurrency or int(phase.level), recorder, run_tag=phase.run_tag,
                          t0_ns=phase.t0_ns, stop_at_ns=stop, level=int(phase.level))
    return await monitor.stop()


async def run_phase_here(spec: TargetSpec, plan: Plan, phase: Phase, writer: RecordWriter,
                         on_done: Callable[[], None] | None = None, *,
                         target: Target | None = None) -> list[dict[str, Any]]:
    """Run the phase on the current event loop; returns [health]. With `target` (kept open by the
    caller across phases) the measured phase reuses the connections its warmup opened."""
    if target is not None:
        return [await _drive(target, plan, phase, Recorder(target, writer, on_done), concurrency=None,
                             next_index=None, start_ns=None, mine=lambda k: True)]
    return [await _run_in_loop(spec, plan, phase, writer, on_done, concurrency=None, next_index=None,
                               start_ns=None)]


def _worker(j: int, n: int, spec: TargetSpec, profile: Profile, pool: list[int], phase: Phase,
            part: str, counter: Any, done: Any, ready: Any, go: Any, start: Any, health_path: str) -> None:
    from loadgate.runner import run_async  # late import: the child process's own loop

    plan = build_plan(profile, pool)
    end = phase.indices.stop

    def next_index() -> int | None:
        with counter.get_lock():
            k = counter.value
            if k >= end:
                return None
            counter.value = k + 1
            return int(k)

    def on_done() -> None:
        with done.get_lock():
            done.value += 1

    ready.wait()
    go.wait()
    conc = _share(int(phase.level), n, j) if not phase.open_loop else None
    p = phase if not phase.open_loop or not phase.max_in_flight else \
        Phase(phase.indices, phase.level, True, phase.run_tag, phase.t0_ns,
              max(1, _share(phase.max_in_flight, n, j)), phase.duration_s)
    with RecordWriter(Path(part)) as writer:
        if conc == 0:
            health: dict[str, Any] = {}
        else:
            health = run_async(_run_in_loop(spec, plan, p, writer, on_done, concurrency=conc,
                                            next_index=None if phase.open_loop else next_index,
                                            start_ns=start.value, mine=lambda k: k % n == j))
    dump_json(Path(health_path), health)


async def run_phase_workers(spec: TargetSpec, profile: Profile, pool: list[int], phase: Phase, n: int,
                            run_dir: Path, writer: RecordWriter,
                            on_progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Run the phase in `n` worker processes; append their records to `writer`'s file."""
    ctx = mp.get_context("spawn")
    counter, done = ctx.Value("q", phase.indices.start), ctx.Value("q", 0)
    ready, go, start = ctx.Barrier(n + 1), ctx.Event(), ctx.Value("q", 0)
    parts = [run_dir / f".part-{phase.run_tag}-{j}.jsonl" for j in range(n)]
    healths = [run_dir / f".health-{phase.run_tag}-{j}.json" for j in range(n)]
    procs = [ctx.Process(target=_worker, args=(j, n, spec, profile, pool, phase, str(parts[j]), counter, done,
                                               ready, go, start, str(healths[j])), daemon=False)
             for j in range(n)]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, ready.wait, 120.0)
    except threading.BrokenBarrierError:
        for p in procs:
            p.kill()
        raise RuntimeError("load workers did not start within 120 s") from None
    start.value = perf_counter_ns() + 20_000_000  # every worker is up: start 20 ms from now
    go.set()
    seen = 0
    while any(p.is_alive() for p in procs):
        await asyncio.sleep(0.2)
        if on_progress and done.value > seen:
            on_progress(done.value - seen)
            seen = done.value
    if on_progress and done.value > seen:
        on_progress(done.value - seen)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    out: list[dict[str, Any]] = []
    for part, hp in zip(parts, healths, strict=True):
        if part.exists():
            writer.append_file(part)
            part.unlink()
        if hp.exists():
            out.append(load_json(hp))
            hp.unlink()
    if bad:
        raise RuntimeError(f"{len(bad)} load worker(s) failed (exit codes {bad})")
    return out
