"""load.ramp against the simulator (its truth log): the ramp's requests are flagged, reach the server,
rise on the curve, end before the measured window and stay out of every figure and count."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loadgate.analysis.summary import build_summary
from loadgate.config.profile import Ramp
from loadgate.config.simconfig import SimConfig
from loadgate.core import ramps
from loadgate.load.plan import build_plan
from loadgate.records import Record
from loadgate.report.table import render_summary
from loadgate.sim.process import SimProcess
from tests.simtruth import profile_for, run

FAST = SimConfig(seed=5, decode_step_us=1000, decode_us_per_seq=20)
T = 2.0  # seconds of ramp


def _in_flight(truth: list[dict[str, Any]], at_ns: int) -> int:
    """Requests the simulator had between their arrival and their last byte at `at_ns`."""
    return sum(1 for t in truth if t["arrival_ns"] <= at_ns < t["end_ns"])


def _apart(recs: list[Record]) -> tuple[list[Record], list[Record]]:
    return [r for r in recs if r.ramp], [r for r in recs if not r.excluded]


@pytest.mark.parametrize(("shape", "workers"), [("linear", 1), ("linear", 2), ("exponential", 1)])
def test_a_closed_loop_ramp_opens_its_slots_on_the_curve_and_stays_out_of_every_figure(
        tmp_path: Path, shape: str, workers: int) -> None:
    with SimProcess(FAST) as sim:
        run_dir, recs, meta = run(profile_for(sim.url, tmp_path, requests=40, concurrency=8, warmup=8, workers=workers,
                                              ramp=Ramp(duration_s=T, shape=shape)))
        truth = sim.truth_records()
    ramp, measured = _apart(recs)
    level = build_summary(run_dir).levels["8"]
    # flagged and counted apart: the summary's counts are the 40 measured requests, exactly
    assert len(measured) == level.requests == level.succeeded == level.metrics["ttft"]["count"] == 40
    assert level.token_counts.checked == 40
    assert level.ramp_requests == len(ramp) == len({r.i for r in ramp}) > 8  # no request sent twice by two workers
    assert min(r.i for r in ramp) >= 48 and not any(r.warmup for r in ramp) and sum(r.warmup for r in recs) == 8
    # each reached the server, and the counters scraped for the window hold none of them
    ramp_truth = [t for t in truth if "-L8r-" in t["request_id"]]
    assert sorted(t["request_id"] for t in ramp_truth) == sorted(f"{run_dir.name}-L8r-{r.i}" for r in ramp)
    assert level.contamination is not None and level.contamination["clean"]
    assert level.contamination["server_requests"] == 40 and level.contamination["client_requests"] == 40
    # outside the measured window: every ramp request ended before the window began
    assert max(r.start_ns for r in ramp) <= max(r.end_ns for r in ramp) < min(r.origin_ns for r in measured)
    assert level.throughput.window_s == (max(r.end_ns for r in measured) - min(r.origin_ns for r in measured)) / 1e9
    # in flight at the server over the ramp: floor(load(t)) slots are open at t (1 -> 8: at T/2, 4 linear,
    # 2 exponential), and never all 8 (the last slot would open at T: exact, whatever the machine's load)
    origin = meta["t0_ns"] + min(r.ready_ns for r in ramp)  # slot 0 opened: the ramp's start
    assert max(_in_flight(ramp_truth, t["arrival_ns"]) for t in ramp_truth) <= 7
    for f in (0.25, 0.5, 0.75):  # each at least 38 ms from a slot's opening
        expect = math.floor(ramps.load_at(shape, 1, 8, T, f * T))
        got = max(_in_flight(ramp_truth, origin + int((f * T + d) * 1e9)) for d in (-0.01, -0.005, 0, 0.005, 0.01))
        # tolerance for a busy machine: a slot late to send (-2), the first slot late to open, so that the
        # origin is late and the next slot counted early (+1)
        assert expect - 2 <= got <= expect + 1, (f, got, expect)
    assert f"ramp: {len(ramp)} requests before the measured window" in render_summary(build_summary(run_dir))


@pytest.mark.parametrize("workers", [1, 2])
def test_an_open_loop_ramp_sends_at_its_planned_times_and_ends_before_the_window(tmp_path: Path,
                                                                                  workers: int) -> None:
    profile = profile_for("http://127.0.0.1:1", tmp_path, requests=24, rate=20.0, arrival="constant", osl=4,
                          workers=workers, ramp=Ramp(duration_s=1.0, start=2.0))
    planned = build_plan(profile, list(range(100, 400))).ramp_offsets  # the times do not depend on the prompts
    assert planned is not None and len(planned) == 11  # 1 s x (2 + 20) / 2
    with SimProcess(FAST) as sim:
        run_dir, recs, _ = run(replace(profile, target=replace(profile.target, endpoint=sim.url)))
        truth = sim.truth_records()
    ramp, measured = _apart(recs)
    start = min(r.intended_ns for r in ramp if r.intended_ns is not None)
    assert sorted(r.intended_ns - start for r in ramp if r.intended_ns is not None) == planned  # exact, no timing
    assert len(ramp) == 11 and all(r.level == 20.0 for r in ramp)
    assert sum("-L20.0r-" in t["request_id"] for t in truth) == 11
    level = build_summary(run_dir).levels["20.0"]
    assert level.requests == level.succeeded == 24 and level.ramp_requests == 11
    assert level.contamination is not None and level.contamination["server_requests"] == 24
    assert max(r.start_ns for r in ramp) < max(r.end_ns for r in ramp) < min(r.origin_ns for r in measured)
