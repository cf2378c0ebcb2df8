"""The open loop's timing against the clock itself (the request is a stub that notes when it ran):
each request runs at its intended time, never before, though its task is made early; one whose time
comes after a stop is never sent, even when its task already waits; a cap on requests in flight
keeps the wait in the request's lateness."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from typing import Any

import pytest

from loadgate.load import executors
from loadgate.load.executors import OpenLoop, StopFlag
from loadgate.load.plan import PlannedRequest

MS = 1_000_000


def reqs(offsets_ms: list[float]) -> list[PlannedRequest]:
    return [PlannedRequest(i, False, (1,), 4, int(o * MS)) for i, o in enumerate(offsets_ms)]


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(request, ready_ns, intended_ns) of every request the loop ran; each holds its slot 30 ms."""
    out: list[tuple[int, int, int]] = []

    async def fake(t: Any, req: PlannedRequest, run_tag: str, rec: Any, *, t0_ns: int, level: Any, ready_ns: int,
                   intended_ns: int | None) -> None:
        assert intended_ns is not None
        out.append((req.i, ready_ns, intended_ns))
        await asyncio.sleep(0.03)

    monkeypatch.setattr(executors, "run_one", fake)
    return out


def test_each_request_runs_at_its_time_never_before(ran):
    start = perf_counter_ns() + 20 * MS
    asyncio.run(OpenLoop(1.0, start).run(None, reqs([0, 0.5, 1, 40, 41, 80]), None, run_tag="t", t0_ns=0))  # type: ignore[arg-type]
    assert [i for i, _, _ in ran] == [0, 1, 2, 3, 4, 5]
    for _, ready, intended in ran:
        assert ready >= intended  # never early, though the task was made LEAD_NS before
    assert [intended - start for _, _, intended in ran] == [0, MS // 2, MS, 40 * MS, 41 * MS, 80 * MS]


def test_a_request_due_after_the_stop_is_not_sent_though_its_task_waits(ran, monkeypatch):
    monkeypatch.setattr(executors, "LEAD_NS", 1000 * MS)  # the second task is made 1 s before its time

    async def go() -> int:
        stop = StopFlag()
        start = perf_counter_ns() + 20 * MS
        loop = OpenLoop(1.0, start, stop=stop)
        task = asyncio.create_task(loop.run(None, reqs([0, 2000]), None, run_tag="t", t0_ns=0))  # type: ignore[arg-type]
        while perf_counter_ns() < start + 1500 * MS:  # half a second after that task was made, as long before its time
            await asyncio.sleep(0.01)
        waiting = len(asyncio.all_tasks()) - 2  # less this coroutine and the loop's own task
        stop.set()
        await task
        return waiting

    assert asyncio.run(go()) == 1  # the second request's task was there, waiting
    assert [i for i, _, _ in ran] == [0]


def test_a_capped_loop_keeps_the_wait_for_a_slot_in_the_lateness(ran):
    start = perf_counter_ns() + 20 * MS
    asyncio.run(OpenLoop(1.0, start, max_in_flight=1).run(None, reqs([0, 1]), None, run_tag="t", t0_ns=0))  # type: ignore[arg-type]
    (_, r0, i0), (_, r1, i1) = ran
    assert r0 - i0 < 10 * MS and r1 - i1 >= 25 * MS  # the second waited for the first's 30 ms


def test_a_cancelled_loop_leaves_no_task_of_its_own_to_start_after_it(ran, monkeypatch):
    """A worker halted without the stop flag cancels the loop while a request's task, made ahead of its
    time, still waits: that task goes with it instead of sending after the phase (where its body is gone)."""
    monkeypatch.setattr(executors, "LEAD_NS", 200 * MS)  # the second task is made 200 ms before its time

    async def go() -> None:
        start = perf_counter_ns() + 20 * MS
        task = asyncio.create_task(OpenLoop(1.0, start).run(None, reqs([0, 300, 5000]), None, run_tag="t", t0_ns=0))  # type: ignore[arg-type]
        while perf_counter_ns() < start + 150 * MS:  # the second request's task is made, its time 150 ms off
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # past the second request's time

    asyncio.run(go())
    assert [i for i, _, _ in ran] == [0]
