"""Client health: is the measuring client itself the bottleneck?

- event-loop lag: a task asks to sleep `interval` and records how late it woke up; a busy loop
  delays every receive stamp by about as much;
- GC pauses: wall time between the `start` and `stop` callbacks of `gc.callbacks`;
- client CPU: process user + system CPU seconds / wall seconds over the window (1.0 = one core
  saturated: the client cannot keep up);
- host steal: the share of the machine's CPU time a hypervisor took over the window (`/proc/stat`).
  Above `STEAL_TRUSTED`, a loop turn's wake from an idle poll may have been held up by the host
  where no clock of the guest shows it, so reads of several segments are not narrowed by it
  (`loadgate.load.turns`);
The figures are judged against the profile's budgets afterwards, from the saved files
(`loadgate.analysis.validity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
from dataclasses import dataclass, field
from time import perf_counter, perf_counter_ns
from typing import Any

from loadgate.analysis.metrics import lag_percentiles


def host_ticks() -> tuple[int, int] | None:
    """(all CPU ticks, steal ticks) of this machine so far, from /proc/stat's first line (steal: the
    time a hypervisor ran something else while this virtual machine's CPUs wanted to run, a held-up
    wake included); None where there is no such file."""
    try:
        with open("/proc/stat", "rb") as f:
            parts = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(parts), parts[7]) if len(parts) == 8 else None


def steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time the hypervisor took between two `host_ticks`."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


@dataclass
class HealthMonitor:
    """Loop lag is sampled every 25 ms: a 5 ms timer measurably delayed receive stamps of a
    single stream on the 2-core machine (p50 +0.25 ms against the simulator's send times), 20 ms
    and more did not."""

    interval_s: float = 0.025
    lags_ms: list[float] = field(default_factory=list)
    gc_pauses_ms: list[float] = field(default_factory=list)
    _gc_start: int = 0
    _task: asyncio.Task[None] | None = None
    _cpu0: float = 0.0
    _wall0: float = 0.0
    cpu_fraction: float | None = None

    def _gc_cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = perf_counter_ns()
        elif self._gc_start:
            self.gc_pauses_ms.append((perf_counter_ns() - self._gc_start) / 1e6)
            self._gc_start = 0

    async def _lag_loop(self) -> None:
        while True:
            t = perf_counter()
            await asyncio.sleep(self.interval_s)
            self.lags_ms.append(max(0.0, (perf_counter() - t - self.interval_s) * 1e3))

    _steal0: tuple[int, int] | None = None

    @staticmethod
    def _cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    cpu_s = _cpu  # this process's CPU seconds so far

    def start(self) -> None:
        gc.callbacks.append(self._gc_cb)
        self._cpu0, self._wall0 = self._cpu(), perf_counter()
        self._steal0 = host_ticks()
        self._task = asyncio.get_running_loop().create_task(self._lag_loop())

    async def stop(self) -> dict[str, Any]:
        import numpy as np

        if self._gc_cb in gc.callbacks:
            gc.callbacks.remove(self._gc_cb)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        wall = perf_counter() - self._wall0
        self.cpu_fraction = (self._cpu() - self._cpu0) / wall if wall > 0 else None
        lags = np.asarray(self.lags_ms)
        return {
            "cpu_s": self._cpu() - self._cpu0,
            "loop_lag_ms": lag_percentiles(lags),
            "gc_pauses": len(self.gc_pauses_ms), "gc_pause_max_ms": max(self.gc_pauses_ms, default=0.0),
            "gc_pause_total_ms": float(sum(self.gc_pauses_ms)),
            "client_cpu_fraction": self.cpu_fraction,
            "host_steal_fraction": steal_fraction(self._steal0, host_ticks()),
        }
