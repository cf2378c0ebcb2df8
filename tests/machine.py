"""What the machine did while a timing test ran: time the hypervisor took from this VM (steal) and
a process's own CPU time, both from /proc. A timing test asserts the CPU cost it controls always,
and the wall-clock cadence only where the machine was there to keep it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from loadgate.load.health import host_ticks, steal_fraction


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Steal:
    """`with Steal() as s:` then `s.fraction`: the share of the machine's CPU time the hypervisor
    took while the block ran (0 where /proc/stat has no steal column)."""

    _start: tuple[int, int] | None = None
    fraction: float = 0.0

    def __enter__(self) -> Steal:
        self._start = host_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fraction = steal_fraction(self._start, host_ticks()) or 0.0
