"""GPU telemetry: a DCGM exporter's metrics (a fixture written from the exporter's documented names,
tests/data/gpu/, not a recording) and NVML readings become one kind of reading, and a window's
figures (utilisation, memory, power, energy, joules per output token) follow from them exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgate.core.gpu import MIB, GpuReading, from_dcgm, window_figures
from loadgate.net.nvml import open_nvml
from loadgate.snapshot import parse_metrics

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
S = 1_000_000_000


def dcgm(name: str, t_ns: int) -> list[GpuReading]:
    return from_dcgm(parse_metrics((DATA / f"dcgm-exporter-{name}.txt").read_text()), t_ns)


def test_a_dcgm_exporters_metrics_read_as_one_reading_per_gpu_in_the_documented_units():
    a = dcgm("a", 0)
    assert [r.gpu for r in a] == ["0", "1"]
    g0 = a[0]
    assert g0.uuid == "GPU-0a1b2c3d-0000-4000-8000-000000000000" and g0.name == "NVIDIA H200"
    assert g0.util_pct == 35 and g0.mem_util_pct == 12 and g0.power_w == 310.5
    assert g0.mem_used_bytes == 123771 * MIB and g0.mem_total_bytes == (123771 + 20000) * MIB
    assert g0.energy_j == pytest.approx(982345.0)  # mJ since the driver loaded, read as joules
    assert g0.absent == {}


def test_a_window_between_two_scrapes_gives_the_energy_counters_rise_and_joules_per_token():
    a, b = dcgm("a", 0), dcgm("b", 10 * S)
    fig = window_figures(a + b, 0, 10 * S, output_tokens=14_505)
    g0, g1 = fig["gpus"]["0"], fig["gpus"]["1"]
    assert g0["energy_j"] == pytest.approx(6500.0) and g0["energy_source"] == "counter"
    assert g1["energy_j"] == pytest.approx(752.5)
    assert fig["energy_j"] == pytest.approx(7252.5)
    assert fig["joules_per_output_token"] == pytest.approx(7252.5 / 14_505)
    assert g0["util_pct"] == {"mean": 63.0, "max": 91.0} and g0["power_w"] == {"mean": 481.25, "max": 652.0}
    assert g0["mem_used_bytes_max"] == 125771 * MIB


def test_without_an_energy_counter_power_is_integrated_and_the_absence_is_named():
    text = "\n".join(ln for ln in (DATA / "dcgm-exporter-a.txt").read_text().splitlines()
                     if "ENERGY" not in ln)
    readings = [r for k, w in enumerate((300.0, 500.0, 400.0))
                for r in from_dcgm(parse_metrics(text.replace("} 310.5", f"}} {w}")), k * S)]
    fig = window_figures(readings, 0, 2 * S, output_tokens=1000)
    g0 = fig["gpus"]["0"]
    assert g0["energy_source"] == "power" and g0["energy_j"] == pytest.approx((300 + 500) / 2 + (500 + 400) / 2)
    assert g0["absent"] == {"energy_j": "not exported"}
    assert fig["joules_per_output_token"] == pytest.approx((400 + 450 + 75.25 * 2) / 1000)


def test_a_gpu_with_neither_counter_nor_power_leaves_the_windows_energy_unknown_not_zero():
    r = [GpuReading(t_ns=0, gpu="0", util_pct=10.0, absent={"power_w": "x", "energy_j": "x"}),
         GpuReading(t_ns=S, gpu="0", util_pct=20.0, absent={"power_w": "x", "energy_j": "x"})]
    fig = window_figures(r, 0, S, output_tokens=10)
    assert fig["energy_j"] is None and fig["joules_per_output_token"] is None
    assert fig["gpus"]["0"]["util_pct"] == {"mean": 15.0, "max": 20.0}
    assert GpuReading.from_json(r[0].to_json()) == r[0]


class FakeNvml:
    """The few NVML calls loadgate makes, as nvidia-ml-py names them, for one GPU whose energy counter
    is not supported (as before Volta): the reader must name the absence and keep the rest."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (nvidia-ml-py's name)
        pass

    class Util:
        gpu, memory = 77, 31

    class Mem:
        used, total = 5 * MIB, 80 * MIB

    class Proc:
        pid, usedGpuMemory = 4242, 3 * MIB  # noqa: N815

    def __init__(self) -> None:
        self.shut = False

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: return 1  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i  # noqa: N802
    def nvmlDeviceGetName(self, h: int) -> bytes: return b"NVIDIA H200"  # noqa: N802
    def nvmlDeviceGetUUID(self, h: int) -> str: return "GPU-x"  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any: return self.Util()  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any: return self.Mem()  # noqa: N802
    def nvmlDeviceGetPowerUsage(self, h: int) -> int: return 123_456  # noqa: N802  (milliwatts)
    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]: return [self.Proc()]  # noqa: N802

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        raise self.NVMLError_NotSupported()

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True


def test_nvml_readings_name_an_unsupported_call_and_keep_every_other_figure():
    nvml, why = open_nvml(FakeNvml())
    assert nvml is not None and why is None
    (r,) = nvml.read()
    assert (r.gpu, r.name, r.uuid) == ("0", "NVIDIA H200", "GPU-x")
    assert r.util_pct == 77 and r.mem_util_pct == 31 and r.power_w == pytest.approx(123.456)
    assert r.mem_used_bytes == 5 * MIB and r.mem_total_bytes == 80 * MIB and r.processes == {4242: 3 * MIB}
    assert r.energy_j is None and r.absent == {"energy_j": "not supported by this GPU or driver"}


def test_without_the_library_or_the_driver_nvml_says_why_there_are_no_readings():
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:  # noqa: N802
            raise self.NVMLError("NVML Shared Library Not Found")

    nvml, why = open_nvml(NoDriver())
    assert nvml is None and why == "NVML did not start: NVML Shared Library Not Found"


def test_a_windows_energy_is_the_counters_rise_over_the_window_itself_not_to_the_readings_around_it():
    """Readings each second, the GPU at 100 W until 5 s then 500 W; the window [5.5 s, 7.5 s] used
    500 W x 2 s = 1,000 J. The counter's rise from the reading before it (5 s) to the one after (8 s)
    is 1,500 J (a reading interval on each side counted in); its value interpolated at the window's
    edges gives the 1,000 J. Without a counter, power integrated over the window, its edges
    interpolated, gives them too (the readings inside alone, 6 s and 7 s: 500 J)."""
    def reading(k: int, counter: bool) -> GpuReading:
        energy = 100.0 * min(k, 5) + 500.0 * max(k - 5, 0)
        return GpuReading(t_ns=k * S, gpu="0", power_w=100.0 if k < 5 else 500.0,
                          energy_j=energy if counter else None, absent={} if counter else {"energy_j": "x"})

    for counter, source in ((True, "counter"), (False, "power")):
        fig = window_figures([reading(k, counter) for k in range(11)], 5 * S + S // 2, 7 * S + S // 2,
                             output_tokens=500)
        g0 = fig["gpus"]["0"]
        assert g0["energy_source"] == source and g0["energy_j"] == pytest.approx(1000.0), (source, g0["energy_j"])
        assert fig["joules_per_output_token"] == pytest.approx(2.0)
