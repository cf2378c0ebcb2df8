"""The capacity search end to end on the embedded simulator: probes as level folders chosen as the
run goes, the verdict judged on the answer's level (or the lowest probe when it fails: exit 20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.profiles import LAX_HEALTH, tiny_corpus

# the simulator: 8 sequences a step at most, decode steps of a fixed cost, a small prefill; outputs
# long enough that the step a prompt's prefill joins is a small part of a request's time
SIM = {"max_num_seqs": 8, "decode_step_us": 4000.0, "decode_us_per_seq": 0.0, "prefill_us_per_token": 20.0}
IN, OUT = 20, 20


def write(tmp: Path, name: str, search: dict[str, Any], thresholds: dict[str, list[str]], requests: int) -> Path:
    doc: dict[str, Any] = {
        "name": name, "target": {"endpoint": "embedded", "sim": SIM},
        "workload": {"requests": requests, "input_len": {"dist": "fixed", "value": IN},
                     "output_len": {"dist": "fixed", "value": OUT}},
        "load": {"search": search, "arrival": "constant"},
        "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp))},
        "thresholds": thresholds, "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": name},
    }
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.timing
def test_rate_search_finds_the_simulators_saturation_rate_within_one_resolution_step(tmp_path: Path) -> None:
    # The engine's time per request: its OUT tokens take OUT of the max_num_seqs slots of a full
    # step each, and its prefill stalls the whole batch for the step it joins (every running
    # sequence waits), so  rate = max_num_seqs / (OUT x full step + max_num_seqs x prefill).
    full_step_s = (SIM["decode_step_us"] + (SIM["max_num_seqs"] - 1) * SIM["decode_us_per_seq"]) / 1e6
    prefill_s = IN * SIM["prefill_us_per_token"] / 1e6
    knee = SIM["max_num_seqs"] / (OUT * full_step_s + SIM["max_num_seqs"] * prefill_s)
    # below the knee a request waits at most a step or two; above it the queue grows through the
    # probe. lo is off the knee's half so that no probe lands on the knee itself (a queue that
    # neither grows nor drains, passing or failing by chance)
    lo = knee * 0.52
    p = write(tmp_path, "knee", {"over": "rate", "lo": lo, "hi": lo * 4, "resolution": 0.05},
              {"ttft": ["p(50) < 25ms"]}, 400)
    assert main(["run", "-q", str(p)]) == 0
    meta = load_json(tmp_path / "out" / "knee" / "meta.json")
    verdict = load_json(tmp_path / "out" / "knee" / "verdict.json")
    loads = [float(x) for x in meta["levels"]]
    assert loads[:3] == pytest.approx([lo, lo * 2, lo * 3 / 2])  # doubling, then halfway
    assert all(float(f"{x:.4g}") == x for x in loads)  # each probe's load to 4 significant digits (its key too)
    judged = {t["level"] for t in verdict["thresholds"]}
    assert len(judged) == 1
    answer = float(judged.pop())
    assert abs(answer - knee) / knee <= 0.05, (answer, knee, loads)


def test_a_search_whose_lowest_probe_fails_exits_20_naming_the_threshold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "low", {"over": "concurrency", "lo": 1, "hi": 4, "resolution": 0.5},
              {"ttft": ["p(50) < 1us"]}, 24)
    assert main(["run", "-q", str(p)]) == 20
    assert "ttft p(50) < 1us" in capsys.readouterr().err
    assert load_json(tmp_path / "out" / "low" / "meta.json")["levels"] == [1]  # the search ended there
    section = load_json(tmp_path / "out" / "low" / "summary.json")["search"]
    assert (section["ended"], section["answer"], section["bracket"]) == ("lowest failed", None,
                                                                         {"passing": None, "failing": 1.0})
    assert main(["report", str(tmp_path / "out" / "low")]) == 20
    assert ("no concurrency within the thresholds: the lowest probe, 1, failed ttft p(50) < 1us"
            in capsys.readouterr().out.splitlines())


def test_concurrency_search_judges_only_its_answer_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "conc", {"over": "concurrency", "lo": 1, "hi": 4, "resolution": 0.5},
              {"ttft": ["p(50) < 5s"]}, 24)
    assert main(["run", "-q", str(p)]) == 0
    meta = load_json(tmp_path / "out" / "conc" / "meta.json")
    assert meta["levels"] == [1, 2, 4]  # every probe passes: doubling to hi
    verdict = load_json(tmp_path / "out" / "conc" / "verdict.json")
    assert {t["level"] for t in verdict["thresholds"]} == {"4"}
    section = load_json(tmp_path / "out" / "conc" / "summary.json")["search"]
    assert (section["ended"], section["answer"], section["bracket"]) == ("hi passed", 4.0,
                                                                         {"passing": 4.0, "failing": None})
    assert main(["report", str(tmp_path / "out" / "conc")]) == 0
    assert ("highest concurrency within the thresholds: 4, the search's hi: every probe passed, so there is no "
            "failing end (raise load.search.hi to look further)") in capsys.readouterr().out.splitlines()


def test_an_invalid_probe_the_bracket_does_not_rest_on_is_a_caveat_not_an_invalid_run(tmp_path, capsys):
    """Concurrency 1, 2, 4 all pass (answer 4, no failing end): a probe below the answer is no end of
    the bracket, so its client trouble is a caveat of the verdict, and the run keeps its exit 0;
    the same trouble at the answer's level makes the run INVALID (30)."""
    from loadgate.analysis.search import deciding_levels
    from loadgate.jsonutil import dump_json

    assert deciding_levels({"1": True, "2": True, "4": True}) == ["4"]
    assert deciding_levels({"1": True, "2": True, "4": False, "3": True}) == ["4", "3"]
    assert deciding_levels({"1": False}) == ["1"]
    assert deciding_levels({"8": True, "16": False, "12": False, "10": True}) == ["12", "10"]
    p = write(tmp_path, "conc", {"over": "concurrency", "lo": 1, "hi": 4, "resolution": 0.5},
              {"ttft": ["p(50) < 5s"]}, 24)
    assert main(["run", "-q", str(p)]) == 0
    run = tmp_path / "out" / "conc"
    meta = load_json(run / "meta.json")
    meta["profile"]["health"]["stamp_error_p99_ms"] = 100.0  # every probe's bounds are far inside this

    def doctor(level: int) -> None:  # that probe's chunks each said to have arrived up to 10 s early
        lines = []
        for line in (run / "records.jsonl").read_bytes().splitlines():
            r = json.loads(line)
            if r["level"] == level and not r["warmup"]:
                r["chunk_early_ns"] = [10**10] * len(r["chunk_ns"])
            lines.append(json.dumps(r).encode())
        (run / "records.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    dump_json(run / "meta.json", meta)
    doctor(2)
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "INVALID: TTFT and ITL stamps may be off by up to 10000.00 ms" in out  # the probe's own lines say it
    assert "outcome: PASSED (exit 0); probe 2 was INVALID (its level says why), but the answer's bracket " \
           "does not rest on it" in out
    doctor(4)
    assert main(["report", str(run)]) == 30
