"""Executors that send the plan: `ClosedLoop` (fixed concurrency) and `OpenLoop` (arrival schedule).

Every finished request becomes one record (see `loadgate.load.recorder`), written immediately.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter_ns

from loadgate.engine.adapters.base import ErrorInfo
from loadgate.load.plan import PlannedRequest
from loadgate.load.recorder import Recorder
from loadgate.load.stopflag import NEVER, StopFlag
from loadgate.load.target import LiveTarget, Raw, body_for, fetch
from loadgate.load.turns import LOOP_TURNS

__all__ = ["NEVER", "StopFlag"]  # here for the modules that always took them from here




@dataclass(frozen=True)
class Concurrency:
    """A closed-loop level: this many requests in flight, the next one sent when one finishes."""

    n: int

    @property
    def level(self) -> int:
        return self.n


@dataclass(frozen=True)
class Rate:
    """An open-loop level: requests start at their planned arrival times (`per_s` on average; a timed
    trace's level: `per_s` is its speed, the times its own), at most `max_in_flight` at once (None: no
    cap)."""

    per_s: float
    max_in_flight: int | None = None

    @property
    def level(self) -> float:
        return self.per_s


LoadLevel = Concurrency | Rate  # what a profile's `load.concurrency | load.rate` becomes, as typed


async def run_one(t: LiveTarget, req: PlannedRequest, run_tag: str, rec: Recorder, *, t0_ns: int, level: float | int,
                  ready_ns: int, intended_ns: int | None) -> None:
    body = t.bodies.pop(req.i, None) or body_for(t, req)
    endpoint = t.endpoint_of(req.i)
    try:
        raw = await fetch(t, body, f"{run_tag}-{req.i}", endpoint=endpoint)
    except asyncio.CancelledError:
        if rec.stop.why is not None:  # cut off by an abort: kept, an error of its own kind
            rec.submit(req, Raw(start_ns=ready_ns, end_ns=perf_counter_ns(), error=ErrorInfo(
                "aborted", f"cut off by the abort: {rec.stop.why}"[:300]),
                endpoint=endpoint if len(t.urls) > 1 else None), t0_ns=t0_ns, level=level,
                ready_ns=ready_ns, intended_ns=intended_ns)
        raise
    rec.submit(req, raw, t0_ns=t0_ns, level=level, ready_ns=ready_ns, intended_ns=intended_ns)
    LOOP_TURNS.touch()  # the completion's work ran after the turn's marker and before the next poll


@dataclass(frozen=True)
class ClosedLoop:
    """`concurrency` slots; each takes the next request as soon as its previous one finished.
    `ready_ns` is the moment the slot became free, so client-side queueing is visible. `level` is
    the whole run's concurrency when this loop is one worker process's share of it. With `delays_ns`
    (a ramp, `load.ramp`), slot j takes its first request at `start_ns + delays_ns[j]`; a slot that
    would open at or after `stop_at_ns` sends nothing."""

    concurrency: int
    level: int | None = None
    stop_at_ns: int | None = None
    stop: StopFlag = NEVER
    start_ns: int = 0
    delays_ns: tuple[int, ...] = ()

    async def run(self, t: LiveTarget, reqs: Iterable[PlannedRequest], recorder: Recorder, *, run_tag: str,
                  t0_ns: int) -> None:
        it: Iterator[PlannedRequest] = iter(reqs)
        level = self.level or self.concurrency

        async def slot(j: int) -> None:
            if self.delays_ns:
                opens = self.start_ns + self.delays_ns[j]
                if self.stop_at_ns is not None and opens >= self.stop_at_ns:
                    return
                await sleep_until(opens, self.stop)
            for req in it:
                ready = perf_counter_ns()
                if (self.stop_at_ns is not None and ready >= self.stop_at_ns) or self.stop.is_set():
                    return
                await run_one(t, req, run_tag, recorder, t0_ns=t0_ns, level=level, ready_ns=ready, intended_ns=None)

        await asyncio.gather(*(slot(j) for j in range(self.concurrency)))


async def sleep_until(t_ns: int, stop: StopFlag = NEVER, precise: bool = True) -> None:
    """Wait until about t_ns: never earlier when `precise` (the loop's timers have about 1 ms of
    granularity and may fire early, so the last millisecond is spent yielding to the loop); else on
    the loop's timers alone (within about a millisecond either side). A long wait wakes every 100 ms
    to see whether the run is stopping."""
    while (left := t_ns - perf_counter_ns()) > (1_500_000 if precise else 0):
        if stop.is_set():
            return
        await asyncio.sleep(min(left - 1_000_000 if precise else left, 100_000_000) / 1e9)
    while precise and perf_counter_ns() < t_ns:
        await asyncio.sleep(0)


LEAD_NS = 2_000_000  # an open loop's request task starts this early and waits out the rest itself


@dataclass(frozen=True)
class OpenLoop:
    """Start each request at `start_ns + intended_offset_ns`; latency counts from that intended
    time. Each request's task is made `LEAD_NS` before its time and waits out the rest itself, so a
    task's first turn on a busy loop is not added to its lateness. With `max_in_flight`, a request that
    finds no free slot waits (its wait stays in its latency)."""

    rate: float
    start_ns: int
    max_in_flight: int | None = None
    stop_at_ns: int | None = None
    stop: StopFlag = NEVER

    async def run(self, t: LiveTarget, reqs: Iterable[PlannedRequest], recorder: Recorder, *, run_tag: str,
                  t0_ns: int) -> None:
        def job(req: PlannedRequest) -> tuple[int, Callable[[int], Awaitable[None]]]:
            return req.intended_offset_ns or 0, lambda intended: run_one(
                t, req, run_tag, recorder, t0_ns=t0_ns, level=self.rate, ready_ns=perf_counter_ns(),
                intended_ns=intended)

        await at_their_times(self.start_ns, (job(r) for r in reqs), max_in_flight=self.max_in_flight,
                             stop_at_ns=self.stop_at_ns, stop=self.stop)


async def at_their_times(start_ns: int, jobs: Iterable[tuple[int, Callable[[int], Awaitable[None]]]], *,
                         max_in_flight: int | None, stop_at_ns: int | None, stop: StopFlag) -> None:
    """Start each job (offset from `start_ns`, what to run given its intended time) at its time, never
    earlier: its task is made `LEAD_NS` before and waits out the rest itself, so a task's first turn
    on a busy loop is not added to its lateness; with `max_in_flight`, a job that finds no free slot
    waits, and runs once it has one (the wait is in its lateness). A job due at or after `stop_at_ns`,
    or after `stop`, is not run, even when its task was already made; cancelled, it cancels the tasks it
    made (one made ahead of its time would otherwise start after the phase)."""
    sem = asyncio.Semaphore(max_in_flight) if max_in_flight else None
    tasks: set[asyncio.Task[None]] = set()

    async def one(run: Callable[[int], Awaitable[None]], intended: int) -> None:
        await sleep_until(intended, stop)
        if stop.is_set():
            return
        if sem is not None:
            await sem.acquire()
        try:
            await run(intended)
        finally:
            if sem is not None:
                sem.release()

    try:
        for offset, run in jobs:
            intended = start_ns + offset
            if (stop_at_ns is not None and intended >= stop_at_ns) or stop.is_set():
                break
            await sleep_until(intended - LEAD_NS, stop, precise=False)
            if stop.is_set():
                break
            task = asyncio.create_task(one(run, intended))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except BaseException:  # cancelled (a worker halted without the stop flag): no task made outlives it
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if tasks:
        await asyncio.gather(*tasks)
