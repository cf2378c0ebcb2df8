"""GPU readings from NVML (`nvidia-ml-py`, imported as `pynvml`) on the host that runs loadgate:
utilisation, memory, power, the energy counter and each process's GPU memory
(`loadgate.core.gpu.GpuReading`). The library is optional (the `gpu` extra; `[dev]` has it): where
it or the driver is missing, `open_nvml` says why and there are no readings. A call a GPU does not
support (the energy counter before Volta, per-process memory in some containers) is an absence
named in the reading, never an error. Each reading is a few driver calls per GPU; it belongs in a
process of its own during a phase, like the /metrics scraper, never in the measuring loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from loadgate.core.gpu import GpuReading


class Nvml:
    """An initialised NVML and its devices; `read()` gives one reading per GPU."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
        self.names = [_text(self._call(lib.nvmlDeviceGetName, h, {}, "name")) for h in self.handles]
        self.uuids = [_text(self._call(lib.nvmlDeviceGetUUID, h, {}, "uuid")) for h in self.handles]

    def _call(self, fn: Callable[..., Any], handle: Any, absent: dict[str, str], what: str) -> Any:
        try:
            return fn(handle)
        except self.lib.NVMLError as e:
            absent[what] = _reason(self.lib, e)
            return None

    def read(self) -> list[GpuReading]:
        lib, out = self.lib, []
        for i, h in enumerate(self.handles):
            absent: dict[str, str] = {}
            t = time.perf_counter_ns()
            util = self._call(lib.nvmlDeviceGetUtilizationRates, h, absent, "util_pct")
            mem = self._call(lib.nvmlDeviceGetMemoryInfo, h, absent, "mem_used_bytes")
            power = self._call(lib.nvmlDeviceGetPowerUsage, h, absent, "power_w")  # milliwatts
            energy = self._call(lib.nvmlDeviceGetTotalEnergyConsumption, h, absent, "energy_j")  # millijoules
            procs = self._call(lib.nvmlDeviceGetComputeRunningProcesses, h, absent, "processes") or []
            out.append(GpuReading(
                t_ns=t, gpu=str(i), uuid=self.uuids[i], name=self.names[i],
                util_pct=None if util is None else float(util.gpu),
                mem_util_pct=None if util is None else float(util.memory),
                mem_used_bytes=None if mem is None else int(mem.used),
                mem_total_bytes=None if mem is None else int(mem.total),
                power_w=None if power is None else power / 1000.0,
                energy_j=None if energy is None else energy / 1000.0,
                processes={int(p.pid): int(p.usedGpuMemory) for p in procs
                           if getattr(p, "usedGpuMemory", None) is not None},
                absent=absent))
        return out

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except self.lib.NVMLError:
            pass


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def _reason(lib: Any, e: Exception) -> str:
    """Why NVML gave nothing, in words ("not supported by this GPU" for the usual case)."""
    not_supported = getattr(lib, "NVMLError_NotSupported", None)
    if not_supported is not None and isinstance(e, not_supported):
        return "not supported by this GPU or driver"
    no_permission = getattr(lib, "NVMLError_NoPermission", None)
    if no_permission is not None and isinstance(e, no_permission):
        return "no permission"
    return f"NVML error: {e}"


def open_nvml(lib: Any = None) -> tuple[Nvml | None, str | None]:
    """NVML, ready to read, or None and the reason there is none (no library, no driver, no GPU)."""
    if lib is None:
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install 'loadgate[gpu]')"
        lib = pynvml
    try:
        lib.nvmlInit()
    except lib.NVMLError as e:
        return None, f"NVML did not start: {e}"
    try:
        nvml = Nvml(lib)
    except lib.NVMLError as e:
        return None, f"NVML gave no devices: {e}"
    if not nvml.handles:
        nvml.close()
        return None, "NVML sees no GPU"
    return nvml, None


def record(out: Any, interval_s: float, max_bytes: int, stopped: Callable[[float], bool],
           ready: Callable[[], None] = lambda: None) -> None:
    """Write NVML readings to the binary file `out`, one JSON line per GPU reading, every `interval_s`
    until `stopped(timeout)` says so, and once more then (so a window that ends just before has a
    reading after it): a first line {"source": "nvml", "interval_s", "absent": the reason there are
    none, or null}, then the readings, then {"end": {"cpu_s", "readings", "capped"}} (this process's
    CPU time). `ready()` is called once the first readings (or the absence) are written. Past
    `max_bytes` no more readings are kept and the end says capped."""
    import resource

    import orjson

    nvml, why = open_nvml()
    out.write(orjson.dumps({"source": "nvml", "interval_s": interval_s, "absent": why}) + b"\n")
    n, size, capped = 0, 0, False
    if nvml is None:
        out.flush()
        ready()
    else:
        try:
            first, last = True, False
            while True:
                for r in [] if capped else nvml.read():
                    line = orjson.dumps(r.to_json()) + b"\n"
                    if size + len(line) > max_bytes:
                        capped = True
                        break
                    out.write(line)
                    size += len(line)
                    n += 1
                out.flush()
                if first:  # the first readings are on disk: the run may start
                    ready()
                    first = False
                if last:
                    break
                last = stopped(interval_s)
        finally:
            nvml.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.write(orjson.dumps({"end": {"cpu_s": ru.ru_utime + ru.ru_stime, "readings": n, "capped": capped}}) + b"\n")
    out.flush()


def _main() -> None:
    """`python -m loadgate.net.nvml OUT INTERVAL_S MAX_BYTES`: readings until standard input closes
    (the run that started it ends, or dies: no reader outlives its run)."""
    import os
    import select
    import sys

    path, interval_s, max_bytes = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

    def stopped(timeout: float) -> bool:
        readable, _, _ = select.select([sys.stdin], [], [], timeout)
        return bool(readable) and not os.read(sys.stdin.fileno(), 1)

    def ready() -> None:  # to the run that waits on this pipe (standard output is that pipe, no terminal)
        os.write(1, b"ready\n")

    with open(path, "wb") as out:
        record(out, interval_s, max_bytes, stopped, ready)


if __name__ == "__main__":
    _main()
