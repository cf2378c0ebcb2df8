"""A rate sweep against the simulator: each rate its own level, planned at its own rate, its own prompts."""

from __future__ import annotations

import pytest

from loadgate.analysis.summary import build_summary
from loadgate.config.simconfig import SimConfig
from loadgate.report.table import capacity_table, render_summary
from loadgate.sim.process import SimProcess
from tests.simtruth import profile_for, run

FAST = SimConfig(seed=5, decode_step_us=1000, decode_us_per_seq=20, truth_prompts=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rate_sweep_runs_each_rate_as_its_own_level_at_its_own_arrival_times(tmp_path, workers):
    with SimProcess(FAST) as sim:
        run_dir, recs, _ = run(profile_for(sim.url, tmp_path, requests=8, rate=(20.0, 50.0), osl=4,
                                           arrival="constant", max_in_flight=4, workers=workers))
        truth = sim.truth_records()
    summary = build_summary(run_dir)
    assert summary.load == "rate"
    assert list(summary.levels) == ["20.0", "50.0"]
    assert all(s.succeeded == 8 for s in summary.levels.values())
    for rate in (20.0, 50.0):
        intended = sorted(r.intended_ns for r in recs if r.level == rate and r.intended_ns is not None)
        assert len(intended) == 8
        gaps = {round((b - a) / 1e6) for a, b in zip(intended, intended[1:], strict=False)}
        assert gaps == {round(1000 / rate)}, gaps  # constant arrivals 1/rate apart, the level's own rate
    # each level sends its own round of prompts (workload.cache: fresh), as a concurrency sweep does
    prompts = {tag: {str(t["prompt"]) for t in truth if f"-L{tag}-" in t["request_id"]} for tag in summary.levels}
    assert all(len(p) == 8 for p in prompts.values()) and not prompts["20.0"] & prompts["50.0"]
    text = render_summary(summary)
    assert "rate 20.0: 8 requests, 8 succeeded" in text and "rate 50.0: 8 requests, 8 succeeded" in text
    capacity = capacity_table(summary, {"ttft_ms": 10_000.0}).splitlines()
    assert capacity[1].split()[0] == "rate" and [line.split()[0] for line in capacity[3:5]] == ["20.0", "50.0"]
    assert capacity[-1] == "highest rate meeting the SLOs (ttft p99 <= 10000 ms): 50.0"
