"""Clocks of several hosts: each client host's wall-clock offset to the driver's, NTP-style.

A latency is always a difference of two stamps taken on one host (`perf_counter_ns`), so no offset
enters it. What spans hosts — a level's window, its throughput, an open loop's arrival times — is put
on the driver's time line: each host's wall clock is read through a round trip (driver reads its
clock at t1, the host reads its own at t2, the driver again at t4), and

    offset = t2 - (t1 + t4) / 2,   known within (t4 - t1) / 2

(the host's reading lies somewhere inside the round trip). The round trip with the least time gives
the estimate. It is taken when a level's actors start and again when they end: the offset used is the
start's, and what it is known within at the end is the larger half round trip plus how far the offset
moved meanwhile (a clock stepped or slewed during the level). Over `health.clock_offset_ms` the run is
invalid. Written here: it is a dozen lines of arithmetic.

`wall_ns` is the host's wall clock. `LOADGATE_CLOCK_DRIFT_PPM`, set in a node's environment, makes that
node's wall clock run fast by that many parts per million from the first reading (a fault to inject:
how the check sees a clock that moves during a run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

_DRIFT_PPM = float(os.environ.get("LOADGATE_CLOCK_DRIFT_PPM") or 0.0)
_FIRST: list[int] = []


def wall_ns() -> int:
    """This host's wall clock (CLOCK_REALTIME), nanoseconds."""
    now = time.time_ns()
    if not _DRIFT_PPM:
        return now
    if not _FIRST:
        _FIRST.append(now)
    return now + int((now - _FIRST[0]) * _DRIFT_PPM / 1e6)


def perf_at(wall: int) -> int:
    """The `perf_counter_ns` reading of this host when its wall clock reads `wall`."""
    return time.perf_counter_ns() + (wall - wall_ns())


@dataclass(frozen=True)
class Offset:
    """One host's offset to the driver: `offset_ns` (its clock minus the driver's), known within
    `within_ns`; `rtt_ns`: the round trip it was read through."""

    offset_ns: int
    within_ns: int
    rtt_ns: int


def best_offset(samples: list[tuple[int, int, int]]) -> Offset:
    """From (t1, t2, t4) round trips (driver, host, driver), the one with the least round trip."""
    if not samples:
        raise ValueError("no round trip to estimate a clock offset from")
    t1, t2, t4 = min(samples, key=lambda s: s[2] - s[0])
    rtt = t4 - t1
    return Offset(t2 - (t1 + t4) // 2, (rtt + 1) // 2, rtt)


def read_offset(host_clock: Callable[[], int], rounds: int = 8, clock: Callable[[], int] = wall_ns) -> Offset:
    """Round trips to `host_clock` (a call that returns the host's wall clock), the best one's offset."""
    samples = []
    for _ in range(rounds):
        t1 = clock()
        t2 = host_clock()
        samples.append((t1, t2, clock()))
    return best_offset(samples)


def uncertainty_ns(start: Offset, end: Offset) -> int:
    """What the start's offset is known within by the end: the larger half round trip plus how far the
    offset moved."""
    return max(start.within_ns, end.within_ns) + abs(end.offset_ns - start.offset_ns)
