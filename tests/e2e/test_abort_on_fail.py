"""Thresholds with `abort_on_fail` against the embedded simulator made slow on purpose: a prefill
of PREFILL_US per prompt token, charged to the step that admits the prompt, so that a request's
TTFT is at least its own prefill (IN x PREFILL_US = 100 ms; on a machine so busy that the
simulator's steps run late, its deadline grid may shorten one now and then: the median holds it
by far, ~800 ms with 8 prompts queued). A threshold
that fails from the start aborts the level long before its requests are done, names itself and
what it measured in abort.json, and `report` re-judges the folder ABORTED with 20; a passing one
never aborts; `delay_abort_eval` holds the evaluation."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from tests.profiles import LAX_HEALTH, tiny_corpus

PREFILL_US, IN = 1000.0, 100
TTFT_FLOOR_MS = IN * PREFILL_US / 1000  # a request's first token comes no sooner than its prefill
SIM = {"prefill_us_per_token": PREFILL_US, "max_num_seqs": 8}
PLANNED = 400  # ~8 requests a second: the whole level would take about 50 s


def write(tmp: Path, name: str, thresholds: dict[str, list[Any]], requests: int = PLANNED, workers: int = 1,
          sim: dict[str, Any] | None = None, check: bool = True, out: int = 4) -> Path:
    doc: dict[str, Any] = {
        "name": name, "target": {"endpoint": "embedded", "sim": sim or SIM},
        "workload": {"requests": requests, "input_len": {"dist": "fixed", "value": IN},
                     "output_len": {"dist": "fixed", "value": out}},
        "load": {"concurrency": 8, "grace_s": 0.2, "workers": workers},
        "thresholds": thresholds, "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": name},
    }
    if check:
        doc["exactness"] = {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp))}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def measured(run: Path) -> list[Any]:
    return sorted((r for r in read_records(run / "records.jsonl") if not r.warmup), key=lambda r: r.end_ns)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_ttft_threshold_failing_from_the_start_aborts_the_level_long_before_its_requests_are_done(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: int) -> None:
    # outputs of 400 tokens (1.6 s of 4 ms decode steps): requests are still in flight after the grace
    p = write(tmp_path, "slow", {"ttft": ["p(99) < 30s", {"threshold": "p(50) < 50ms", "abort_on_fail": True}]},
              workers=workers, out=400)
    assert main(["run", "-q", str(p)]) == 20
    run = tmp_path / "out" / "slow"
    recs = measured(run)
    assert len(recs) < PLANNED / 2  # stopped: most were never sent
    abort = load_json(run / "abort.json")
    assert abort["metric"] == "ttft" and abort["threshold"] == "p(50) < 50ms" and abort["limit"] == 50.0
    assert abort["measured"] >= TTFT_FLOOR_MS and abort["samples"] >= 20  # p(50): 10 / (1 - 0.5) samples
    assert abort["trigger"].startswith('threshold ttft "p(50) < 50ms" (abort_on_fail) failed ')
    stop = load_json(run / "stop.json")
    assert stop["outcome"] == "aborted" and stop["code"] == 20 and abort["trigger"] in stop["message"]
    ok = [r for r in recs if r.succeeded]
    assert len(ok) >= 20 and statistics.median(r.chunk_ns[0] / 1e6 for r in ok) >= TTFT_FLOOR_MS
    cut = [r for r in recs if r.error is not None]
    assert all(r.error is not None and r.error.kind == "aborted" for r in cut)  # the only failures: those cut off
    if workers == 1:  # in flight when it tripped: cut after the grace (worker processes let them finish)
        assert cut and all(r.error is not None and "cut off by the abort: threshold ttft" in r.error.detail
                           for r in cut)
    capsys.readouterr()
    assert main(["report", str(run)]) == 20
    out = capsys.readouterr().out
    assert "ABORTED (exit 20" in out and 'threshold ttft "p(50) < 50ms" (abort_on_fail) failed' in out


def test_a_passing_abort_on_fail_threshold_never_aborts(tmp_path: Path) -> None:
    p = write(tmp_path, "fine", {"ttft": [{"threshold": "p(50) < 30s", "abort_on_fail": True}],
                                 "errors": [{"threshold": "rate < 1%", "abort_on_fail": True}]}, requests=60)
    assert main(["run", "-q", str(p)]) == 0
    run = tmp_path / "out" / "fine"
    assert len(measured(run)) == 60 and not (run / "abort.json").exists() and not (run / "stop.json").exists()


def test_a_failing_threshold_without_abort_on_fail_runs_to_the_end_and_fails(tmp_path: Path) -> None:
    p = write(tmp_path, "plain", {"ttft": ["p(50) < 50ms", {"threshold": "p(90) < 50ms", "abort_on_fail": False}]},
              requests=40)
    assert main(["run", "-q", str(p)]) == 20
    run = tmp_path / "out" / "plain"
    assert len(measured(run)) == 40 and not (run / "abort.json").exists()
    assert load_json(run / "verdict.json")["outcome"] == "threshold"  # FAILED at the end, not ABORTED


def test_delay_abort_eval_holds_the_evaluation(tmp_path: Path) -> None:
    delay = 8.0
    p = write(tmp_path, "held", {"ttft": [{"threshold": "p(50) < 50ms", "abort_on_fail": True,
                                           "delay_abort_eval": f"{delay:g}s"}]})
    assert main(["run", "-q", str(p)]) == 20
    run = tmp_path / "out" / "held"
    recs = measured(run)
    start = min(r.start_ns for r in recs)  # the level's first request
    assert len(recs) < PLANNED / 2
    # the threshold failed on the first 20 requests, well before the delay; it was judged only after
    assert sum(1 for r in recs if r.succeeded and r.end_ns - start < (delay - 1.5) * 1e9) >= 20
    assert load_json(run / "abort.json")["after_s"] >= delay
    # requests kept starting until about the delay (a slot frees every ~0.1 s), none was cut before it
    assert max(r.start_ns for r in recs) - start >= (delay - 1.0) * 1e9
    cut = [r for r in recs if r.error is not None]
    assert all(r.error is not None and r.error.kind == "aborted" and r.end_ns - start >= delay * 1e9 for r in cut)


def test_an_errors_threshold_counts_failures_as_they_finish(tmp_path: Path) -> None:
    onset = 30  # the simulator's requests before half of them fail (no check here: it would count them)
    sim = {"decode_step_us": 2000.0, "faults": {"http_500": 0.5, "after_requests": onset}}
    p = write(tmp_path, "errs", {"errors": [{"threshold": "count == 0", "abort_on_fail": True}]}, requests=2000,
              sim=sim, check=False)
    assert main(["run", "-q", "--unverified", str(p)]) == 20
    run = tmp_path / "out" / "errs"
    recs = measured(run)
    assert len(recs) < 2000
    abort = load_json(run / "abort.json")
    assert abort["metric"] == "errors" and abort["measured"] >= 1
    first = next(r for r in recs if r.error is not None and r.error.kind == "http_status")
    assert all(r.succeeded for r in recs if r.end_ns < first.end_ns)
    assert sum(1 for r in recs if r.succeeded) >= onset - 8  # (those before the onset, less a warmup's share)
