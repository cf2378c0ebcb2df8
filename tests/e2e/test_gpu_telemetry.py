"""GPU telemetry through a run (`target.gpu`): the reader runs in its own process beside the levels,
the run folder keeps its readings (gpu.jsonl), and each level's summary cuts its window out of them.
The GPU here is a stand-in module with a known truth (tests/data/gpu/fake_nvml: 250 W, its energy
counter 250 J a second); NVML itself was read on an H200 (docs/validation/nvml-window-h200.txt)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import loadgate
from loadgate.cli import main
from loadgate.config.profile import Distribution, Gpu, Load, Output, Profile, Target, Workload
from loadgate.config.simconfig import SimConfig
from loadgate.jsonutil import load_json
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_BUDGETS

FAKE = Path(__file__).resolve().parents[1] / "data" / "gpu" / "fake_nvml"


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig(decode_step_us=2000.0), startup_timeout=60) as s:
        yield s


def profile(url: str, tmp: Path, telemetry: str, max_mb: float = 64.0) -> Profile:
    return Profile(name="gpu", seed=3, target=Target(endpoint=url, api="openai-completions",
                                                     gpu=Gpu(telemetry=telemetry, interval_s=0.1, max_mb=max_mb)),
                   workload=Workload(requests=120, input_len=Distribution(dist="fixed", value=16),
                                     output_len=Distribution(dist="fixed", value=16)),
                   load=Load(concurrency=4), health=LAX_BUDGETS, output=Output(dir=str(tmp / "out")),
                   path=str(tmp / "p.yaml"))


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))


def test_a_runs_levels_carry_the_gpus_energy_over_their_window_and_joules_per_token(sim, tmp_path, fake_nvml, capsys):
    result = loadgate.run(profile(sim.url, tmp_path, "nvml"), unverified=True)
    assert result.exit_code == 11, result
    lv = load_json(result.run_dir / "summary.json")["levels"]["4"]
    gpu, win = lv["gpu"], lv["gpu"]["window"]
    g = win["gpus"]["0"]
    assert gpu["source"] == "nvml" and gpu["absent"] is None and not gpu["capped"] and gpu["reader_cpu_s"] > 0
    assert g["name"] == "Fake GPU" and g["energy_source"] == "counter" and g["readings"] >= 2
    window_s = lv["throughput"]["window_s"]
    # the counter's rise over the window itself (its value interpolated at the window's edges): 250 J a
    # second of the window, give or take the time between a reading's stamp and its counter call (10 ms
    # here; the rise between the readings around the window counted up to 0.1 s more on each side)
    assert g["energy_j"] == pytest.approx(250 * window_s, abs=2.5), (g["energy_j"], window_s)
    tokens = lv["throughput"]["output_token_throughput"] * window_s
    assert win["joules_per_output_token"] == pytest.approx(g["energy_j"] / tokens)
    assert g["util_pct"] == {"mean": 40.0, "max": 40.0} and g["power_w"] == {"mean": 250.0, "max": 250.0}
    assert g["process_mem_bytes_max"] == {"4242": 9 * 2**30} and g["mem_used_bytes_max"] == 10 * 2**30
    capsys.readouterr()
    assert main(["report", str(result.run_dir)]) == 11
    out = capsys.readouterr().out
    assert "GPU 0 (Fake GPU" in out and "power 250 W (max 250 W)" in out and "GPU energy per output token" in out


def test_compare_puts_two_runs_gpu_figures_side_by_side_with_the_memory_difference(sim, tmp_path, fake_nvml,
                                                                                  monkeypatch, capsys):
    """The same server twice, the second drawing 375 W with 3 GiB more in its process (a draft's cost,
    as NVML reports memory per process): compare gives the ratio of power 1.5x and +3 GiB."""
    base = loadgate.run(profile(sim.url, tmp_path / "a", "nvml"), unverified=True).run_dir
    monkeypatch.setenv("FAKE_NVML_WATTS", "375")
    monkeypatch.setenv("FAKE_NVML_PROC_GIB", "12")
    cand = loadgate.run(profile(sim.url, tmp_path / "b", "nvml"), unverified=True).run_dir
    capsys.readouterr()
    assert main(["compare", str(base), str(cand)]) == 0
    out = capsys.readouterr().out
    assert "GPU (this host's, over each side's window):" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("power, mean (W)"))
    assert row.split()[3:6] == ["250", "375", "1.500x"], row
    mem = next(ln for ln in out.splitlines() if ln.startswith("the processes' GPU memory, peak (GiB)"))
    assert mem.split()[-3:] == ["12", "1.333x", "+3.000"], mem


def test_a_gpu_that_cannot_be_read_is_a_stated_absence_and_the_run_goes_on(sim, tmp_path, fake_nvml, monkeypatch,
                                                                           capsys):
    monkeypatch.setenv("FAKE_NVML_FAIL", "1")
    result = loadgate.run(profile(sim.url, tmp_path, "nvml"), unverified=True)
    assert result.exit_code == 11
    assert load_json(result.run_dir / "summary.json")["levels"]["4"]["gpu"]["absent"] == \
        "NVML did not start: Driver Not Loaded"
    capsys.readouterr()
    assert main(["report", str(result.run_dir)]) == 11
    assert "GPU: no readings (NVML did not start: Driver Not Loaded)" in capsys.readouterr().out


def test_readings_past_the_size_cap_are_not_kept_and_the_report_warns(sim, tmp_path, fake_nvml, capsys):
    result = loadgate.run(profile(sim.url, tmp_path, "nvml", max_mb=1000 / 2**20), unverified=True)
    assert result.exit_code == 11
    lines = (result.run_dir / "gpu.jsonl").read_bytes().splitlines()
    assert sum(len(x) + 1 for x in lines[1:-1]) <= 1000 and b'"capped":true' in lines[-1]
    capsys.readouterr()
    assert main(["report", str(result.run_dir)]) == 11
    assert "warning: GPU readings stopped at target.gpu.max_mb" in capsys.readouterr().out


@pytest.mark.parametrize("telemetry", ["off", "auto"])
def test_off_reads_no_gpu_and_auto_reads_none_without_the_drivers_library(sim, tmp_path, fake_nvml, telemetry):
    """auto reads a GPU only where the engine is on this host and NVIDIA's library is installed: the
    simulator is on 127.0.0.1 here, and this machine has no libnvidia-ml (the stand-in module alone
    does not count)."""
    import ctypes.util

    if telemetry == "auto" and ctypes.util.find_library("nvidia-ml") is not None:
        pytest.skip("this host has NVIDIA's library: auto would read its GPUs")
    result = loadgate.run(profile(sim.url, tmp_path, telemetry), unverified=True)
    assert result.exit_code == 11
    assert not (result.run_dir / "gpu.jsonl").exists()
    assert load_json(result.run_dir / "summary.json")["levels"]["4"]["gpu"] is None


@pytest.mark.parametrize(("line", "words"), [
    ("telemetry: nvm", "target.gpu.telemetry: expected one of 'auto', 'nvml', 'off', got 'nvm'"),
    ("interval_s: 0.01", "target.gpu.interval_s"),
    ("max_mb: 0", "target.gpu.max_mb"),
])
def test_a_bad_gpu_setting_is_refused_in_one_line(tmp_path, capsys, line, words):
    p = tmp_path / "g.yaml"
    p.write_text(f"name: g\ntarget:\n  endpoint: embedded\n  gpu:\n    {line}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(p) in err and words in err, err


@pytest.fixture
def dcgm_exporter() -> Any:
    """A stand-in DCGM exporter on loopback serving the fixture (tests/data/gpu/dcgm-exporter-a.txt,
    written from the exporter's documented names), GPU 0's energy counter rising 310.5 J a second (its
    stated power) on the monotonic clock, GPU 1's standing still."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    text = (Path(__file__).resolve().parents[1] / "data" / "gpu" / "dcgm-exporter-a.txt").read_text()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            mj = int(310.5 * time.perf_counter_ns() / 1e6)
            body = text.replace("} 982345000", f"}} {mj}").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_a_dcgm_exporter_among_the_extra_metrics_urls_gives_each_level_its_gpu_figures(sim, tmp_path, dcgm_exporter):
    import dataclasses

    p = profile(sim.url, tmp_path, "off")
    p = dataclasses.replace(p, target=dataclasses.replace(p.target, extra_metrics_urls=(dcgm_exporter,),
                                                          metrics_interval_s=0.1))
    result = loadgate.run(p, unverified=True)
    assert result.exit_code == 11
    lv = load_json(result.run_dir / "summary.json")["levels"]["4"]
    gpu, win = lv["gpu"], lv["gpu"]["window"]
    assert gpu["source"] == "dcgm" and gpu["urls"] == [dcgm_exporter]
    g0, g1 = win["gpus"]["0"], win["gpus"]["1"]
    assert g0["name"] == "NVIDIA H200" and g0["energy_source"] == "counter" and g0["power_w"]["mean"] == 310.5
    window_s = lv["throughput"]["window_s"]
    # each edge scrape is stamped when it is sent and the exporter reads its clock when it answers,
    # a scrape's latency later (milliseconds; more on a busy machine): 0.1 s of the GPU's draw allowed
    assert g0["energy_j"] == pytest.approx(310.5 * window_s, abs=310.5 * 0.1) and g1["energy_j"] == 0.0
    tokens = lv["throughput"]["output_token_throughput"] * window_s
    assert win["joules_per_output_token"] == pytest.approx(g0["energy_j"] / tokens)
