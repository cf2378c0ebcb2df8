"""The circuit breaker (`load.abort`) against a simulator that starts failing half its requests
mid-run: the run stops within the breaker's window of the failures' start, keeps what finished and
what it cut off (errors of kind `aborted`), and is ABORTED with exit 20, also when `report` judges
its folder again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loadgate
from loadgate.cli import main
from loadgate.config.profile import Abort, Distribution, Load, Output, Profile, Target, Workload
from loadgate.config.simconfig import FaultConfig, SimConfig
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_BUDGETS

ONSET = 60  # the simulator's requests before it starts failing (its own counter: no warmup here)


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig(decode_step_us=2000.0, faults=FaultConfig(http_500=0.5, after_requests=ONSET)),
                    startup_timeout=60) as s:
        yield s


def profile(url: str, tmp: Path, abort: Abort | None, workers: int = 1) -> Profile:
    return Profile(name="abort", seed=3, target=Target(endpoint=url, api="openai-completions"),
                   workload=Workload(requests=2000, input_len=Distribution(dist="fixed", value=16),
                                     output_len=Distribution(dist="fixed", value=16)),
                   load=Load(concurrency=4, abort=abort, grace_s=0.2, workers=workers), health=LAX_BUDGETS,
                   output=Output(dir=str(tmp / "out")), path=str(tmp / "p.yaml"))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_server_that_starts_failing_is_aborted_within_the_window(sim, tmp_path, capsys, workers):
    window = 1.0
    result = loadgate.run(profile(sim.url, tmp_path, Abort(error_rate=0.3, window_s=window, min_requests=10), workers),
                          unverified=True)
    assert result.exit_code == 20, result
    run = result.run_dir
    stop = load_json(run / "stop.json")
    assert stop["outcome"] == "aborted" and stop["code"] == 20 and "load.abort:" in stop["message"]
    recs = sorted(read_records(run / "records.jsonl"), key=lambda r: r.end_ns)
    assert len(recs) < 2000  # stopped: the rest were never sent
    failed = [r for r in recs if r.error is not None and r.error.kind == "http_status"]
    onset = failed[0].end_ns
    # every request began before the breaker's window after the failures began had passed, plus the
    # grace for those in flight (and a slack for this busy machine's scheduling)
    assert max(r.start_ns for r in recs) - onset <= (window + 0.2 + 1.0) * 1e9
    assert all(r.error is None for r in recs if r.end_ns < onset)
    cut = [r for r in recs if r.error is not None and r.error.kind == "aborted"]
    assert all("cut off by the abort" in r.error.detail for r in cut)
    capsys.readouterr()
    assert main(["report", str(run)]) == 20
    out = capsys.readouterr().out
    assert "ABORTED (exit 20" in out and "load.abort:" in out


def test_without_a_breaker_the_run_goes_on_and_fails_its_requests(sim, tmp_path):
    p = profile(sim.url, tmp_path, None)
    p = Profile(**{**p.__dict__, "workload": Workload(requests=120, input_len=Distribution(dist="fixed", value=16),
                                                      output_len=Distribution(dist="fixed", value=16))})
    result = loadgate.run(p, unverified=True)
    assert result.exit_code == 11 and not (result.run_dir / "stop.json").exists()
    recs = list(read_records(result.run_dir / "records.jsonl"))
    assert len(recs) == 120 and any(r.error is not None for r in recs)


def test_requests_in_flight_when_it_trips_are_cut_off_after_the_grace_and_kept(sim, tmp_path):
    p = profile(sim.url, tmp_path, Abort(error_rate=0.3, window_s=5.0, min_requests=4))
    slow = Workload(requests=400, input_len=Distribution(dist="fixed", value=16),
                    output_len=Distribution(dist="fixed", value=1500))  # ~3 s each: in flight when it trips
    p = Profile(**{**p.__dict__, "workload": slow, "load": Load(concurrency=8, abort=p.load.abort, grace_s=0.1)})
    sim_counter_past_onset = True  # the module's earlier runs took the simulator past ONSET: it fails half from here
    assert sim_counter_past_onset
    result = loadgate.run(p, unverified=True)
    assert result.exit_code == 20, result
    recs = list(read_records(result.run_dir / "records.jsonl"))
    cut = [r for r in recs if r.error is not None and r.error.kind == "aborted"]
    assert cut and all("cut off by the abort: load.abort:" in r.error.detail for r in cut)
    assert all(r.completion_tokens is None or r.completion_tokens < 1500 for r in cut)
