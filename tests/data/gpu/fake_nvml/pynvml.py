"""A stand-in for nvidia-ml-py's `pynvml` with a known ground truth, put first on the GPU reader's
PYTHONPATH by tests/e2e/test_gpu_telemetry.py: one GPU drawing exactly 250 W whose energy counter is
250 W x the monotonic clock (so a window's energy is 250 J a second), 40 % busy, 10 GiB of 80 in use
by one process (FAKE_NVML_WATTS and FAKE_NVML_PROC_GIB change the draw and that memory). Not NVIDIA's library: only the calls loadgate makes, with their names and units
(milliwatts, millijoules, bytes)."""

import os
import time

WATTS = float(os.environ.get("FAKE_NVML_WATTS", "250"))  # a second "server": another draw
PROC_GIB = int(os.environ.get("FAKE_NVML_PROC_GIB", "9"))


class NVMLError(Exception):
    pass


class _Util:
    gpu, memory = 40, 15


class _Mem:
    used, total = 10 * 2**30, 80 * 2**30


class _Proc:
    pid, usedGpuMemory = 4242, PROC_GIB * 2**30


def nvmlInit():
    if os.environ.get("FAKE_NVML_FAIL"):
        raise NVMLError("Driver Not Loaded")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return "Fake GPU"


def nvmlDeviceGetUUID(h):
    return "GPU-fake"


def nvmlDeviceGetUtilizationRates(h):
    return _Util()


def nvmlDeviceGetMemoryInfo(h):
    return _Mem()


def nvmlDeviceGetPowerUsage(h):
    return int(WATTS * 1000)


def nvmlDeviceGetTotalEnergyConsumption(h):
    return int(WATTS * time.perf_counter_ns() / 1e6)  # mJ = W x ms


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_Proc()]
