"""Time slices (`report.slice_s`) of runs against the simulator: a server whose step cost doubles
mid-run (`target.sim.slowdown`) shows it in the slices' ITL p50 and throughput; the slices reach
summary.json, the console and the HTML report, and `loadgate report` rebuilds the same ones."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import orjson
import pytest

from loadgate.analysis.slices import time_slices
from loadgate.cli import main
from loadgate.config.profile import Report
from loadgate.config.simconfig import SimConfig, SlowdownConfig
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.report.html import write_comparison_html, write_html
from loadgate.sim.process import SimProcess
from tests.simtruth import profile_for, run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.timing
def test_a_step_cost_doubled_mid_run_doubles_the_itl_p50_of_the_slices_after_it(tmp_path: Path) -> None:
    """Timing-dependent (marked `timing`): the simulator's steps are slept in real time. The bounds are
    loose (ratio 1.6-2.4 where the settings give 2): a p50 of gaps on the engine's deadline grid barely
    moves when a busy machine delays a few steps."""
    base_us, factor, after_s, slice_s = 10_000.0, 2.0, 1.4, 0.5
    cfg = SimConfig(seed=11, fixed_step_us=base_us, slowdown=SlowdownConfig(after_s=after_s, factor=factor))
    with SimProcess(cfg) as sim:
        profile = profile_for(sim.url, tmp_path, requests=48, concurrency=4, isl=16, osl=20)
        run_dir, records, meta = run(dataclasses.replace(profile, report=Report(slice_s=slice_s)))
        truth = sim.truth_records()
    sl = load_json(run_dir / "summary.json")["levels"]["4"]["slices"]
    # the engine's first step began when the first request reached it: the change, in seconds of the window
    start_ns = meta["t0_ns"] + min(r.origin_ns for r in records if not r.warmup)
    change_s = (min(t["arrival_ns"] for t in truth) - start_ns) / 1e9 + after_s
    request_s = 21 * base_us / 1e6  # a request's 20 steps at the base cost, and one waiting to be admitted
    before = [x for x in sl["slices"] if x["end_s"] + request_s <= change_s and x["requests"]]
    after = [x for x in sl["slices"] if x["start_s"] >= change_s + 0.05 and x["requests"] and not x["partial"]]
    assert len(before) >= 2 and len(after) >= 2, (change_s, [(x["start_s"], x["requests"]) for x in sl["slices"]])
    itl_before = statistics.median(x["metrics"]["itl"]["p50"] for x in before)
    itl_after = statistics.median(x["metrics"]["itl"]["p50"] for x in after)
    assert 0.8 * base_us / 1e3 <= itl_before <= 1.5 * base_us / 1e3, itl_before
    assert 0.8 * factor <= itl_after / itl_before <= 1.2 * factor, (itl_before, itl_after)
    # four streams of a token a step: the output rate halves too (the slice before the change and the first after
    # it, both with four requests in flight throughout)
    rate = after[0]["output_throughput"] / before[-1]["output_throughput"]
    assert 0.7 / factor <= rate <= 1.3 / factor, (before[-1], after[0])


def test_the_slices_reach_the_summary_the_console_and_the_html_and_report_rebuilds_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    osl, n = 24, 24
    with SimProcess(SimConfig(seed=3, decode_step_us=1000)) as sim:
        profile = profile_for(sim.url, tmp_path, requests=n, concurrency=4, osl=osl)
        run_dir, records, _ = run(dataclasses.replace(profile, report=Report(slice_s=0.04)))
    assert load_json(run_dir / "meta.json")["profile"]["report"] == {"slice_s": 0.04}
    written = load_json(run_dir / "summary.json")["levels"]["4"]["slices"]
    measured = [r for r in records if not r.warmup]
    assert written == orjson.loads(orjson.dumps(time_slices(measured, 0.04)))  # the same numbers, from the records
    assert sum(x["requests"] for x in written["slices"]) == n
    assert sum(x["output_tokens"] for x in written["slices"]) == n * osl
    assert len(written["slices"]) >= 2
    # `loadgate report` rebuilds them from the folder's files (the setting is meta.json's profile)
    capsys.readouterr()
    assert main(["report", "--format", "json", str(run_dir)]) == 11  # exactness not established: --unverified
    assert orjson.loads(capsys.readouterr().out)["levels"]["4"]["slices"] == written
    assert main(["report", str(run_dir)]) == 11
    text = capsys.readouterr().out
    assert "by time, slices of 0.04 s of the window: a request counts in the slice it started in" in text
    rows = [line.split() for line in text.splitlines() if line.startswith(("0–", "0.04–"))]
    assert [row[:3] for row in rows] == [[f"{round(x['start_s'], 3):g}–{round(x['end_s'], 3):g}", str(x["requests"]), str(x["failed"])]
                                         for x in written["slices"][:2]]  # the first two slices' rows
    page = write_html(run_dir).read_text()
    png = run_dir / "plots" / "slices.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and 'alt="slices"' in page
    both = write_comparison_html({"a": run_dir, "b": run_dir}, tmp_path / "ab.html")  # one series per run and level
    assert (tmp_path / "ab-plots" / "slices.png").read_bytes()[:8] == PNG_MAGIC and 'alt="slices"' in both.read_text()


def test_without_report_slice_s_there_are_no_slices_anywhere(tmp_path: Path) -> None:
    with SimProcess(SimConfig(seed=3, decode_step_us=1000)) as sim:
        run_dir, _, _ = run(profile_for(sim.url, tmp_path, requests=8, concurrency=2, osl=8))
    assert load_json(run_dir / "summary.json")["levels"]["2"]["slices"] is None
    write_html(run_dir)
    assert not (run_dir / "plots" / "slices.png").exists()
    assert list(read_records(run_dir / "records.jsonl"))  # the run itself measured


def test_the_docs_example_is_a_valid_profile_that_slices_and_slows_down(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loadgate.config.profile import load_profile

    doc = (Path(__file__).resolve().parents[2] / "docs" / "measurement.md").read_text()
    snippet = doc.split("## Time slices", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    p = tmp_path / "drift.yaml"
    p.write_text(snippet)
    assert main(["validate", str(p)]) == 0
    profile = load_profile(p)
    assert profile.report.slice_s == 0.5 and profile.target.sim.slowdown == SlowdownConfig(after_s=1.4, factor=2.0)
