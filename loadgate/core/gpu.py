"""GPU telemetry: what one reading of a GPU holds, where the two sources put it (an NVIDIA DCGM
exporter's Prometheus metrics, or NVML on the GPU host: `loadgate.net.nvml`), and a window's
figures from a series of readings (utilisation, memory, power, energy, joules per output token).

Pure: the readings are data (a run folder's series), so the analysis reads them without the
driver. A field a source does not give is None, and the reading names it in `absent` with the
reason, so a report can say "power: not reported by this GPU" instead of printing 0.

DCGM exporter metric names and units, from its documented default counters:
`DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_MEM_COPY_UTIL` (%), `DCGM_FI_DEV_FB_USED` and
`DCGM_FI_DEV_FB_FREE` (MiB), `DCGM_FI_DEV_POWER_USAGE` (W) and
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since the driver loaded, a counter); each sample is
labelled with the GPU's index (`gpu`), `UUID` and `modelName`. The exporter declares the energy
counter without a `_total` suffix, and prometheus_client's parser adds one: both spellings are read.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgate.snapshot import Snapshot

DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_MEM_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"
DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
DCGM_NAMES = (DCGM_UTIL, DCGM_MEM_UTIL, DCGM_FB_USED, DCGM_FB_FREE, DCGM_POWER, DCGM_ENERGY)
MIB = 1 << 20


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment (`t_ns`: `time.perf_counter_ns`, the records' clock, where the reader
    runs in the measuring host; the exporter's scrape time otherwise)."""

    t_ns: int
    gpu: str  # the index as the source names it ("0", "1", ...)
    uuid: str | None = None
    name: str | None = None
    util_pct: float | None = None  # share of the last sample period in which a kernel ran
    mem_util_pct: float | None = None  # share of it in which device memory was read or written
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None  # the GPU's energy counter (since the driver loaded), joules
    processes: dict[int, int] = field(default_factory=dict)  # pid -> its GPU memory, bytes
    absent: dict[str, str] = field(default_factory=dict)  # field -> why the source gave none

    def to_json(self) -> dict[str, Any]:
        return {"t_ns": self.t_ns, "gpu": self.gpu, "uuid": self.uuid, "name": self.name,
                "util_pct": self.util_pct, "mem_util_pct": self.mem_util_pct,
                "mem_used_bytes": self.mem_used_bytes, "mem_total_bytes": self.mem_total_bytes,
                "power_w": self.power_w, "energy_j": self.energy_j,
                "processes": {str(k): v for k, v in self.processes.items()}, "absent": dict(self.absent)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GpuReading:
        return cls(t_ns=int(d["t_ns"]), gpu=str(d["gpu"]), uuid=d.get("uuid"), name=d.get("name"),
                   util_pct=d.get("util_pct"), mem_util_pct=d.get("mem_util_pct"),
                   mem_used_bytes=d.get("mem_used_bytes"), mem_total_bytes=d.get("mem_total_bytes"),
                   power_w=d.get("power_w"), energy_j=d.get("energy_j"),
                   processes={int(k): int(v) for k, v in (d.get("processes") or {}).items()},
                   absent=dict(d.get("absent") or {}))


def from_dcgm(snap: Snapshot, t_ns: int) -> list[GpuReading]:
    """The GPUs a DCGM exporter's metrics describe, one reading each, in the order of their index;
    a metric the exporter was not configured to export is absent ("not exported")."""
    per: dict[str, dict[str, Any]] = {}
    for (name, labels), value in snap.values.items():
        name = name.removesuffix("_total") if name.endswith("_total") and name[:-6] in DCGM_NAMES else name
        if name not in DCGM_NAMES:
            continue
        lab = dict(labels)
        gpu = lab.get("gpu")
        if gpu is None:
            continue
        d = per.setdefault(gpu, {"uuid": lab.get("UUID"), "name": lab.get("modelName")})
        d[name] = value
    out = []
    for gpu in sorted(per, key=lambda g: (len(g), g)):
        d = per[gpu]
        used, free = d.get(DCGM_FB_USED), d.get(DCGM_FB_FREE)
        energy = d.get(DCGM_ENERGY)
        reading = GpuReading(
            t_ns=t_ns, gpu=gpu, uuid=d["uuid"], name=d["name"], util_pct=d.get(DCGM_UTIL),
            mem_util_pct=d.get(DCGM_MEM_UTIL),
            mem_used_bytes=None if used is None else int(used * MIB),
            mem_total_bytes=None if used is None or free is None else int((used + free) * MIB),
            power_w=d.get(DCGM_POWER), energy_j=None if energy is None else energy / 1000.0,
            absent={f: "not exported" for f, n in (("util_pct", DCGM_UTIL), ("mem_used_bytes", DCGM_FB_USED),
                                                   ("power_w", DCGM_POWER), ("energy_j", DCGM_ENERGY))
                    if n not in d})
        out.append(reading)
    return out


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    return {"mean": sum(values) / len(values), "max": max(values)} if values else None


def window_figures(readings: Sequence[GpuReading], start_ns: int, end_ns: int,
                   output_tokens: int | None) -> dict[str, Any]:
    """Per GPU, the figures of the window [start_ns, end_ns]: utilisation and power (mean and max of
    the readings inside it), memory in use (max), energy (the counter's rise between the last
    reading at or before the window's start and the first at or after its end, its value at the
    window's edges interpolated linearly between the readings around each, or, without a counter,
    power integrated by the trapezoid rule over the window, linear between readings, the edges
    interpolated, over the part of the window the readings span: `energy_source` says which)
    and, summed over the GPUs, joules per output token of the window. A figure no reading gave is
    None, with the source's reason in `absent`."""
    gpus: dict[str, list[GpuReading]] = {}
    for r in sorted(readings, key=lambda r: r.t_ns):
        gpus.setdefault(r.gpu, []).append(r)
    out: dict[str, Any] = {"gpus": {}, "energy_j": None, "joules_per_output_token": None}
    total = 0.0
    complete = bool(gpus)
    for gpu, rs in gpus.items():
        inside = [r for r in rs if start_ns <= r.t_ns <= end_ns]
        energy, source = _energy(rs, start_ns, end_ns)
        absent: dict[str, str] = {}
        for r in rs:
            absent.update(r.absent)
        out["gpus"][gpu] = {
            "name": rs[-1].name, "uuid": rs[-1].uuid, "readings": len(inside),
            "util_pct": _stats([r.util_pct for r in inside if r.util_pct is not None]),
            "power_w": _stats([r.power_w for r in inside if r.power_w is not None]),
            "mem_used_bytes_max": max((r.mem_used_bytes for r in inside if r.mem_used_bytes is not None),
                                      default=None),
            "mem_total_bytes": rs[-1].mem_total_bytes,
            "process_mem_bytes_max": _process_max(inside),
            "energy_j": energy, "energy_source": source, "absent": absent}
        if energy is None:
            complete = False
        else:
            total += energy
    if complete:
        out["energy_j"] = total
        if output_tokens:
            out["joules_per_output_token"] = total / output_tokens
    return out


def _process_max(readings: Sequence[GpuReading]) -> dict[str, int]:
    peak: dict[str, int] = {}
    for r in readings:
        for pid, used in r.processes.items():
            peak[str(pid)] = max(peak.get(str(pid), 0), used)
    return peak


def _energy(rs: Sequence[GpuReading], start_ns: int, end_ns: int) -> tuple[float | None, str | None]:
    """The energy one GPU used over the window, and how it was found ("counter" or "power")."""
    import numpy as np

    counted = [(r.t_ns, r.energy_j) for r in rs if r.energy_j is not None]
    ts = [t for t, _ in counted]
    if counted and ts[0] <= start_ns and ts[-1] >= end_ns:
        # the counter's value at the window's edges, interpolated between the readings around each
        # (the readings' own rise would count up to an interval of energy outside on each side)
        joules = [e for _, e in counted]
        at = np.interp([start_ns, end_ns], ts, joules)
        around = joules[bisect.bisect_right(ts, start_ns) - 1:bisect.bisect_left(ts, end_ns) + 1]
        if all(b >= a for a, b in zip(around, around[1:], strict=False)):  # a counter that went back (a
            return float(at[1] - at[0]), "counter"  # driver reload) says nothing
    powered = [(r.t_ns, r.power_w) for r in rs if r.power_w is not None]
    lo = max(start_ns, powered[0][0]) if powered else 0
    hi = min(end_ns, powered[-1][0]) if powered else 0
    if hi > lo:
        # power, linear between readings (each edge interpolated from the readings around it), over the
        # part of the window the readings span
        pt, pw = [t for t, _ in powered], [w for _, w in powered]
        xs = np.array([lo, *(t for t in pt if lo < t < hi), hi], dtype=np.float64)
        ws = np.interp(xs, pt, pw)
        joules_p = float(np.sum((ws[1:] + ws[:-1]) / 2 * np.diff(xs)) / 1e9)  # (np.trapezoid: numpy 2 only)
        if math.isfinite(joules_p):
            return joules_p, "power"
    return None, None
