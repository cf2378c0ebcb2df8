"""Run-to-run drift against the simulator, whose ground-truth log names every flipped position.

The baseline is captured from a simulator with every knob off; the check then repeats the corpus
against one with `run_to_run` (a request is armed at random and flips once) and `batch_variant`
(a near tie flips when its step is batched). The simulator's truth log says, per request, where it
emitted the runner-up token: two outputs of one prompt are equal exactly when their flip
positions are, and they first differ at the smallest position flipped in one and not the other.
So every count in the drift table has a known value.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from loadgate.cli import main
from loadgate.config.simconfig import DivergenceConfig, FaultConfig, SimConfig
from loadgate.jsonutil import load_json
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_HEALTH

FAST = {"decode_step_us": 150, "decode_us_per_seq": 5, "prefill_us_per_token": 0.5}
REPEAT, BATCH = 120, 8


def _corpus(tmp: Path) -> tuple[Path, list[str]]:
    """Eight completion cases long enough to pass a few near ties each."""
    cases = [{"id": f"p{k}", "kind": "completion", "prompt": f"Story {k}: the river ran past the mill and",
              "max_tokens": 24} for k in range(8)]
    p = tmp / "corpus.jsonl"
    p.write_text("".join(orjson.dumps(c).decode() + "\n" for c in cases))
    return p, [c["id"] for c in cases]


def _profile(tmp: Path, name: str, url: str, corpus: Path, *, baseline: str = "sim-reference",
             contract: dict[str, Any] | None = None) -> Path:
    doc = {"name": name, "target": {"endpoint": url},
           "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "load": {"concurrency": 1},
           "exactness": {"baseline": baseline, "corpus": str(corpus), "contract": contract or {"tier": "token-exact"},
                         "scenarios": {"solo": False, "repeat": REPEAT, "repeat_batch": BATCH}},
           "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": name}}
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    tmp = tmp_path_factory.mktemp("drift-baseline")
    corpus, ids = _corpus(tmp)
    with SimProcess(SimConfig(near_tie_rate=0.3, **FAST)) as clean:
        assert main(["baseline", str(_profile(tmp, "clean", clean.url, corpus)), "--out", str(tmp / "bl")]) == 0
    return next((tmp / "bl").glob("*.json")), corpus, ids


def _check(tmp: Path, baseline: tuple[Path, Path, list[str]], div: dict[str, Any], contract: dict[str, Any] | None = None
           ) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """`loadgate check` repeating the corpus against a simulator with `div`; its exit code, its
    exactness.json, and the truth records of the repeat scenario's requests, in send order."""
    bl, corpus, _ = baseline
    with SimProcess(SimConfig(near_tie_rate=0.3, divergence=DivergenceConfig(**div), **FAST)) as sim:
        code = main(["check", str(_profile(tmp, "d", sim.url, corpus, baseline=str(bl), contract=contract))])
        truth = [r for r in sim.truth_records() if "-check-repeat" in r["request_id"]]
    truth.sort(key=lambda r: int(r["request_id"].rsplit("-", 1)[1]))
    return code, load_json(tmp / "out" / "d" / "exactness.json"), truth


def _expected(truth: list[dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    """The drift table the truth log implies (the same sums as `exactness.drift`, from flips)."""
    flips: dict[str, list[tuple[int, ...]]] = {}
    for k, r in enumerate(truth):
        flips.setdefault(ids[k % len(ids)], []).append(tuple(r["flips"]))
    varying = {}
    for case, versions in flips.items():
        c = Counter(versions)
        if len(c) > 1:
            top = max(c.values())
            varying[case] = {"distinct": len(c), "modal_count": top}
    return {"differ_from_baseline": sum(1 for r in truth if r["flips"]),
            "differ_from_modal": sum(len(v) - max(Counter(v).values()) for v in flips.values()),
            "prompts_varying": len(varying), "varying": varying, "flips": flips}


@pytest.mark.parametrize("div", [{"run_to_run": 0.15}, {"batch_variant": True}, {"run_to_run": 0.15, "batch_variant": True}],
                         ids=["run_to_run", "batch_variant", "both"])
def test_the_drift_table_counts_equal_the_simulators_known_flips(tmp_path, baseline, div, capsys):
    code, ex, truth = _check(tmp_path, baseline, div)
    assert len(truth) == REPEAT and not ex["skipped_cases"]
    want = _expected(truth, baseline[2])
    assert want["differ_from_baseline"] > 0, "the knob flipped nothing: the test would prove nothing"
    (name, d), = ex["drift"].items()
    assert name == f"repeat:{REPEAT}x{BATCH}" and d["compared"] == REPEAT and d["prompts"] == 8
    for key in ("differ_from_baseline", "differ_from_modal", "prompts_varying"):
        assert d[key] == want[key], (key, d[key], want[key])
    got = {p["case"]: p for p in d["varying"] if p["distinct_outputs"] > 1}
    assert set(got) == set(want["varying"])
    for case, p in got.items():
        assert p["distinct_outputs"] == want["varying"][case]["distinct"]
        assert p["modal_count"] == want["varying"][case]["modal_count"]
        modal = next(v for v in p["versions"] if v["modal"])
        modal_flips = set(want["flips"][case][modal["requests"][0]["repeat"]])
        for v in p["versions"]:
            for m in v["requests"]:  # each member: its repeat index names its flips in the truth
                mine = set(want["flips"][case][m["repeat"]])
                assert (mine == modal_flips) == v["modal"]
                assert m["batch"] == m["order"] // BATCH and m["position"] == m["order"] % BATCH
                assert m["order"] % 8 == int(case[1:]) and m["repeat"] == m["order"] // 8
                if not v["modal"]:
                    assert v["first_divergence_from_modal"] == min(mine ^ modal_flips)
    # one bundle per distinct output that differs from the baseline, not one per sequence
    versions = {(c, f) for c, fl in want["flips"].items() for f in fl if f}
    assert len(list((tmp_path / "out" / "d" / "divergences").glob("*.json"))) == len(versions)
    out = capsys.readouterr().out
    assert (f"{want['differ_from_baseline']} of {REPEAT} differ from the baseline; {want['differ_from_modal']} of "
            f"{REPEAT} differ from their prompt's modal output; {want['prompts_varying']} of 8 prompts vary") in out


def test_stable_fails_with_run_to_run_drift_and_passes_without_it(tmp_path, baseline):
    stable = {"tier": "token-exact", "stable": True}
    code, ex, truth = _check(tmp_path / "drift", baseline, {"run_to_run": 0.15}, stable)
    want = _expected(truth, baseline[2])
    assert want["prompts_varying"] > 0
    assert code == 10 and any(r.startswith("not stable: in repeat") for r in ex["reasons"]), ex["reasons"]
    assert "and stable: within each scenario" in ex["contract"]["words"]
    code, ex, _ = _check(tmp_path / "clean", baseline, {}, stable)
    assert code == 0 and ex["passed"] and ex["drift"][f"repeat:{REPEAT}x{BATCH}"]["prompts_varying"] == 0


def test_stable_without_enough_repeats_is_not_established_and_without_repeat_a_profile_error(tmp_path, baseline):
    """A prompt sent once shows nothing about stability: with fewer repeats than twice the cases the
    check is not established (11), and `stable: true` without `repeat` is refused as a profile error."""
    bl, corpus, _ = baseline
    with SimProcess(SimConfig(near_tie_rate=0.3, **FAST)) as sim:
        p = _profile(tmp_path, "few", sim.url, corpus, baseline=str(bl), contract={"tier": "token-exact", "stable": True})
        doc = yaml.safe_load(p.read_text())
        doc["exactness"]["scenarios"]["repeat"] = 12  # 8 cases: 4 of them sent once
        p.write_text(yaml.safe_dump(doc))
        assert main(["check", str(p)]) == 11
        ex = load_json(tmp_path / "out" / "few" / "exactness.json")
        assert any(x.startswith("stable/repeat:12x8: 4 of 8 prompts sent once") for x in ex["not_established"])
        doc["exactness"]["scenarios"] = {"solo": True}
        p.write_text(yaml.safe_dump(doc))
        assert main(["check", str(p)]) == 2


def test_a_retried_repeat_keeps_its_place_in_the_send_order(tmp_path, baseline):
    """Requests that failed and were sent again keep their send order (not their place in the
    retry batch): the drift table's repeat indices and the bundles stay one per request."""
    bl, corpus, ids = baseline
    with SimProcess(SimConfig(near_tie_rate=0.3, divergence=DivergenceConfig(batch_variant=True),
                              faults=FaultConfig(http_503=0.08), **FAST)) as sim:
        assert main(["check", str(_profile(tmp_path, "retry", sim.url, corpus, baseline=str(bl)))]) == 10
    ex = load_json(tmp_path / "out" / "retry" / "exactness.json")
    assert ex["retried"] > 0
    (d,) = ex["drift"].values()
    orders = [m["order"] for p in d["varying"] for v in p["versions"] for m in v["requests"]]
    assert len(orders) == len(set(orders)) and all(0 <= o < REPEAT for o in orders)
    for p in d["varying"]:
        for v in p["versions"]:
            assert all(ids[m["order"] % 8] == p["case"] and m["repeat"] == m["order"] // 8 for m in v["requests"])
    names = [Path(b).name for b in ex["bundles"]]
    assert len(names) == len(set(names))
