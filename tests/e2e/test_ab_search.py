"""An A/B of capacity searches end to end on the embedded simulator (docs/capacity.md): each run of the
A/B is a whole search of its side; the comparison gives the capacity line (the ratio of the answers,
its interval from the brackets), decides the verdict on it, and compares per level only the loads
every run of both sides probed. `report` and `compare` on the folder give the same line."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.e2e.test_capacity_search import IN, OUT, write

# Both sides take decode steps of the same fixed cost; the candidate batches twice as many sequences.
# (Doubling the batch rather than halving the step keeps the ratio of the two knees what the formula
# says when a busy host adds a fixed cost to every step: the two sides' steps stay alike.)
STEP = {"decode_step_us": 4000.0, "decode_us_per_seq": 0.0, "prefill_us_per_token": 20.0}
BASE, CAND = {"max_num_seqs": 8, **STEP}, {"max_num_seqs": 16, **STEP}


def knee(sim: dict[str, float]) -> float:
    """The simulator's saturation rate (tests/e2e/test_capacity_search.py): its OUT tokens take OUT of
    the slots of a full step each, and its prefill stalls the batch for the step it joins."""
    full_step_s = (sim["decode_step_us"] + (sim["max_num_seqs"] - 1) * sim["decode_us_per_seq"]) / 1e6
    return sim["max_num_seqs"] / (OUT * full_step_s + sim["max_num_seqs"] * IN * sim["prefill_us_per_token"] / 1e6)


def write_ab(tmp: Path, name: str, search: dict[str, Any], thresholds: dict[str, list[str]], requests: int,
             base: dict[str, float] = BASE, cand: dict[str, float] = CAND) -> Path:
    """test_capacity_search's profile of a search, its target the candidate, with an A/B of two pairs."""
    p = write(tmp, name, search, thresholds, requests)
    doc = yaml.safe_load(p.read_text())
    doc["target"]["sim"] = cand
    doc["ab"] = {"baseline": {"endpoint": "embedded", "sim": base}, "pairs": 2}
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.timing
def test_an_ab_of_rate_searches_gives_the_capacity_line_around_the_simulators_knee_ratio(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = knee(CAND) / knee(BASE)  # 185.2 / 96.15 = 1.93
    # lo 33: no probe of either side's search lands within 2 % of its knee (where passing is chance);
    # 80 requests a probe resolve 12 %, and a queue 3 % above a knee already lifts the ttft median past 15 ms
    p = write_ab(tmp_path, "abs", {"over": "rate", "lo": 33, "hi": 528, "resolution": 0.12},
                 {"ttft": ["p(50) < 15ms"]}, 80)
    began = time.monotonic()
    assert main(["run", "-q", str(p)]) == 0  # the candidate serves more: improved
    assert time.monotonic() - began <= 60
    run = tmp_path / "out" / "abs"
    line = load_json(run / "comparison.json")["capacity"]
    assert line["decision"] == "improved" and len(line["pairs"]) == 2
    for pair in line["pairs"]:
        a, b = pair["baseline"], pair["candidate"]
        assert (a["ended"], b["ended"]) == ("answer below hi", "answer below hi")
        assert pair["ratio"] == pytest.approx(b["answer"] / a["answer"])
        assert (pair["low"], pair["high"]) == pytest.approx((b["passing"] / a["failing"], b["failing"] / a["passing"]))
        # each bracket holds its side's knee to within a resolution step
        for side, sim in ((a, BASE), (b, CAND)):
            assert side["passing"] / 1.12 <= knee(sim) <= side["failing"] * 1.12, (side, knee(sim))
    assert line["low"] == min(x["low"] for x in line["pairs"]) and line["high"] == max(x["high"] for x in line["pairs"])
    assert line["low"] / 1.12 <= expected <= line["high"] * 1.12, (line, expected)
    assert abs(line["ratio"] - expected) / expected <= 2 * 0.12, (line["ratio"], expected)
    out = capsys.readouterr().out
    said = f"over 2 pairs: candidate serves {line['ratio']:.2f}× ({line['low']:.2f}–{line['high']:.2f}) the rate"
    assert said in out
    # per level, only the loads every search probed: its doublings up to the baseline's first failure
    shared = list(load_json(run / "comparison.json")["levels"])
    assert shared[:2] == ["33.0", "66.0"] and "132.0" in shared and "264.0" not in shared
    assert "per level: each side's search chose its own loads after its first failure" in out
    # the thresholds: each candidate run judged on its answer's level, naming the run
    verdict = load_json(run / "verdict.json")
    assert sorted(t["run"] for t in verdict["thresholds"]) == ["B1", "B2"]
    assert {(t["run"], float(t["level"])) for t in verdict["thresholds"]} == {
        (x["candidate"]["run"], x["candidate"]["answer"]) for x in line["pairs"]}
    # report and compare on the folder: the same line and the same exit code
    assert main(["report", str(run)]) == 0
    assert said in capsys.readouterr().out
    assert main(["compare", str(run)]) == 0
    text = capsys.readouterr().out
    assert said in text and re.search(r"pair 1 \(A1, B1\): candidate serves [0-9.]+× \(", text)


def test_a_candidate_with_half_the_slots_regresses_and_a_baseline_that_passed_hi_bounds_only_above(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Over concurrency a request waits for a slot once more are in flight than the engine batches.
    # Equal requests run in waves, so with one or two more than the slots those few wait for a whole
    # request (20 tokens of 6 ms steps: about 120 ms), and from 7 in flight on 4 slots most do: a
    # 25 ms ttft mean passes up to the slots (about 12 ms) and fails at 7 and above by a margin no busy
    # host closes. The baseline (8 slots) passes every probe to hi = 8; the candidate (4 slots) fails
    # at 8, then bisection finds its first failing load, 7 at the most.
    step = {"decode_step_us": 6000.0, "decode_us_per_seq": 0.0, "prefill_us_per_token": 20.0}
    p = write_ab(tmp_path, "half", {"over": "concurrency", "lo": 2, "hi": 8, "resolution": 0.25},
                 {"ttft": ["avg < 25ms"]}, 20, base={"max_num_seqs": 8, **step}, cand={"max_num_seqs": 4, **step})
    assert main(["run", "-q", str(p)]) == 21
    captured = capsys.readouterr()
    run = tmp_path / "out" / "half"
    comparison = load_json(run / "comparison.json")
    line = comparison["capacity"]
    for pair in line["pairs"]:
        a, b = pair["baseline"], pair["candidate"]
        assert (a["ended"], a["answer"], a["passing"], a["failing"]) == ("hi passed", 8.0, 8.0, None)
        assert b["ended"] == "answer below hi" and 4 <= b["answer"] == b["passing"] == b["failing"] - 1 <= 6
        # the baseline has no failing end, so the ratio has no low: only "at most"
        assert (pair["ratio"], pair["low"], pair["high"]) == (b["answer"] / 8, None, b["failing"] / 8)
        said = (f"pair {pair['pair']} ({a['run']}, {b['run']}): candidate serves {b['answer'] / 8:.2f}×, at most "
                f"{b['failing'] / 8:.2f}× (no lower end) the concurrency within the thresholds (baseline 8, its hi, "
                f"which passed: no failing end; candidate {b['answer']:g}, bracket {b['answer']:g}–{b['failing']:g})")
        assert said in captured.out
    ratios = [x["ratio"] for x in line["pairs"]]
    assert line["ratio"] == sum(ratios) / 2 and line["low"] is None  # the median of two: their mean
    assert line["high"] == max(x["high"] for x in line["pairs"]) < 0.95 and line["decision"] == "regressed"
    assert (f"the candidate's capacity regressed: it serves {line['ratio']:.2f}×, at most {line['high']:.2f}× (no "
            "lower end) the baseline's concurrency within the thresholds, wholly below 1 - 0.05 (ab.practical)"
            ) in captured.err
    # per level, only the probes every run made (2, 4, 8), not the candidate's bisection
    assert list(comparison["levels"]) == ["2", "4", "8"]
    assert load_json(run / "verdict.json")["ab_decision"] == "regressed"
    assert main(["report", "--html", str(run)]) == 21
    html = (run / "report.html").read_text()  # the line heads the HTML report too
    assert said in capsys.readouterr().out and said in html  # (the last pair's words)
    assert main(["compare", str(run)]) == 0  # compare prints; it judges nothing
    assert said in capsys.readouterr().out


def _short(p: Path, base_step_us: float) -> None:
    """Two output tokens a request, and the baseline's steps `base_step_us` long (quick probes)."""
    doc = yaml.safe_load(p.read_text())
    doc["workload"]["output_len"] = {"dist": "fixed", "value": 2}
    doc["ab"]["baseline"]["sim"] = {**BASE, "decode_step_us": base_step_us}
    p.write_text(yaml.safe_dump(doc))


def test_a_candidate_whose_lowest_probe_fails_exits_20_as_a_single_search_would(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_ab(tmp_path, "low", {"over": "concurrency", "lo": 1, "hi": 2, "resolution": 0.25},
                 {"ttft": ["p(50) < 1us"]}, 20)
    _short(p, STEP["decode_step_us"])
    assert main(["run", "-q", str(p)]) == 20
    assert "ttft p(50) < 1us" in capsys.readouterr().err
    run = tmp_path / "out" / "low"
    thresholds = load_json(run / "verdict.json")["thresholds"]
    assert [(t["run"], t["level"], t["passed"]) for t in thresholds] == [("B1", "1", False), ("B2", "1", False)]
    line = load_json(run / "comparison.json")["capacity"]
    assert all(x[s]["ended"] == "lowest failed" for x in line["pairs"] for s in ("baseline", "candidate"))
    assert (line["ratio"], line["low"], line["high"], line["decision"]) == (None, None, None, "inconclusive")
    assert main(["report", str(run)]) == 20
    out = capsys.readouterr().out
    assert ("pair 1 (A1, B1): candidate serves ?× (no bound on either end) the concurrency within the thresholds "
            "(baseline none: its lowest probe, 1, failed; candidate none: its lowest probe, 1, failed)") in out
    assert "thresholds (candidate run B1, level 1: its lowest probe, which failed):" in out


def test_a_baseline_whose_lowest_probe_fails_bounds_the_candidate_from_below_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a request's second token comes a decode step after its first: the baseline's 40 ms steps put the
    # e2e median past 30 ms even alone, the candidate's 4 ms do not
    p = write_ab(tmp_path, "base", {"over": "concurrency", "lo": 1, "hi": 2, "resolution": 0.25},
                 {"e2e": ["p(50) < 30ms"]}, 20)
    _short(p, 40_000.0)
    assert main(["run", "-q", str(p)]) == 0  # not the candidate's failure: at least 2x the baseline
    line = load_json(tmp_path / "out" / "base" / "comparison.json")["capacity"]
    for pair in line["pairs"]:
        assert (pair["baseline"]["ended"], pair["candidate"]["ended"]) == ("lowest failed", "hi passed")
        assert (pair["ratio"], pair["low"], pair["high"]) == (None, 2.0, None)  # candidate's 2 / baseline's 1
    assert line["decision"] == "improved"
    out = capsys.readouterr().out
    assert ("pair 1 (A1, B1): candidate serves at least 2.00× (no upper end) the concurrency within the thresholds "
            "(baseline none: its lowest probe, 1, failed; candidate 2, its hi, which passed: no failing end)") in out
    assert "over 2 pairs: candidate serves at least 2.00× (no upper end) the concurrency within the thresholds" in out


def test_two_sides_that_both_pass_hi_are_inconclusive_and_exit_22(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # both sides pass every probe up to hi (2 in flight, within either's slots): each capacity is only
    # "at least hi", so the ratio has neither end
    p = write_ab(tmp_path, "both", {"over": "concurrency", "lo": 1, "hi": 2, "resolution": 0.25},
                 {"ttft": ["p(50) < 10s"]}, 20)
    _short(p, STEP["decode_step_us"])
    assert main(["run", "-q", str(p)]) == 22
    line = load_json(tmp_path / "out" / "both" / "comparison.json")["capacity"]
    assert (line["ratio"], line["low"], line["high"], line["decision"]) == (1.0, None, None, "inconclusive")
    assert ("the capacity comparison is inconclusive: the candidate serves 1.00× (no bound on either end) the "
            "baseline's concurrency within the thresholds, an interval with neither end (no side's search bracketed "
            "its answer)") in capsys.readouterr().err
