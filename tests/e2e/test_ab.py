"""A/B runs, thresholds and exit codes (0 / 20 / 21 / 22), and compare/report on saved runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from loadgate.analysis.summary import build_summary
from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.profiles import LAX_HEALTH, tiny_corpus

FAST = {"decode_step_us": 1500, "decode_us_per_seq": 40, "prefill_us_per_token": 2}
# 2 x slower: the runs stay apart even where the host steals a third of the CPU (at 1.4 x, 23 %
# apart in throughput, the two sides' runs overlapped there and the verdict was inconclusive)
SLOW = {"decode_step_us": 3000, "decode_us_per_seq": 80, "prefill_us_per_token": 4}


def write_profile(tmp: Path, name: str, *, cand: dict[str, Any], base: dict[str, Any] | None, pairs: int = 5,
                  thresholds: dict[str, list[str]] | None = None, concurrency: Any = 4) -> Path:
    doc: dict[str, Any] = {
        "name": name,
        "target": {"endpoint": "embedded", "sim": cand},
        "workload": {"requests": 24, "input_len": {"dist": "fixed", "value": 32},
                     "output_len": {"dist": "fixed", "value": 24}},
        "load": {"concurrency": concurrency},
        "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp))},
        "health": LAX_HEALTH,  # about verdicts and exit codes, not the client's health
        "output": {"dir": str(tmp / "out"), "run_id": name},
    }
    if base is not None:
        doc["ab"] = {"baseline": {"endpoint": "embedded", "sim": base}, "pairs": pairs}
    if thresholds:
        doc["thresholds"] = thresholds
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_thresholds_that_pass_exit_0_and_are_printed_with_their_values(tmp_path, capsys):
    p = write_profile(tmp_path, "ok", cand=FAST, base=None,
                      thresholds={"ttft": ["p(99) < 5s"], "errors": ["rate < 1%"], "output_throughput": ["> 1"]})
    assert main(["run", "-q", str(p)]) == 0
    out = capsys.readouterr().out
    assert "thresholds: 3 passed, 0 failed" in out and "ttft p(99) < 5s" in out
    summary = load_json(tmp_path / "out" / "ok" / "summary.json")
    assert [t["passed"] for t in summary["thresholds"]] == [True, True, True]


def test_a_failed_threshold_exits_20_and_names_it(tmp_path, capsys):
    p = write_profile(tmp_path, "th", cand=FAST, base=None, thresholds={"ttft": ["p(50) < 1us"]})
    assert main(["run", "-q", str(p)]) == 20
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "ttft p(50) < 1us" in captured.err


def test_a_slower_candidate_is_reported_regressed_and_exits_21(tmp_path, capsys):
    p = write_profile(tmp_path, "slow", cand=SLOW, base=FAST)
    assert main(["run", "-q", str(p)]) == 21
    out = capsys.readouterr().out
    assert "verdict: regressed" in out and "output_throughput" in out
    ab = load_json(tmp_path / "out" / "slow" / "ab.json")
    assert sorted(ab["order"]) == sorted([f"{s}{i}" for s in "AB" for i in range(1, 6)])
    assert all({ab["order"][2 * k][1], ab["order"][2 * k + 1][1]} == {str(k + 1)} for k in range(5))  # in pairs
    comp = load_json(tmp_path / "out" / "slow" / "comparison.json")
    figs = comp["levels"]["4"]["figures"]
    assert "regressed" in {g["decision"] for g in figs.values()}  # the verdict's reason, in the figures
    f = figs["output_throughput"]
    assert f["ratio"] < 0.9 and f["interval"][0] < f["ratio"] < f["interval"][1]  # twice as slow
    # Regressed on throughput too, unless the machine's noise (CI installing engines beside the
    # suite) left too few pairs apart for the rank test or the interval: then not called, and why.
    # Each figure is tested at alpha over the figures the verdict reads (Bonferroni): p 0.016 was
    # rightly not called at 0.05 / 5 (0.01) on a busy host
    from loadgate.analysis.ab import comparisons

    settings = comparisons(tmp_path / "out" / "slow")[1]
    alpha = settings["alpha"] / max(1, len(settings["decide_on"]))
    assert f["decision"] == "regressed" or (f["decision"] == "inconclusive"
                                            and (f["p_mannwhitney"] >= alpha or f["interval"][1] >= 1)), f
    # each side's stamp bound, the worst of its five runs, is printed beside the comparison
    worst = {side: max(build_summary(tmp_path / "out" / "slow" / f"{side}{i}").levels["4"].client_health
                       .stamp_bound["stated_p99_ms"] for i in range(1, 6)) for side in "AB"}
    assert (f"level 4 stamps, stated bound p99 of the worst run: baseline {worst['A']:.3f} ms (5 runs; " in out
            and f"candidate {worst['B']:.3f} ms (5 runs; " in out)


def _verdict_part(out: str) -> list[str]:
    """From the first thresholds heading to the outcome line (thresholds tables and the verdict)."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("thresholds ("))
    end = next(k for k, line in enumerate(lines) if line.startswith("outcome: "))
    return lines[start:end + 1]


@pytest.mark.parametrize("name,base,code", [("thfail", None, 20), ("abrun", FAST, 22)])
def test_report_re_renders_the_runs_verdict_thresholds_and_exit_code(tmp_path, capsys, name, base, code):
    """`loadgate report RUN` judges the saved files again: the same thresholds tables, the same
    verdict line and the same exit code as the `loadgate run` that wrote them."""
    p = write_profile(tmp_path, name, cand=SLOW, base=base, pairs=2,
                      thresholds={"ttft": ["p(50) < 1us" if base is None else "p(99) < 5s"],
                                  "output_throughput": ["> 1"]})
    assert main(["run", "-q", str(p)]) == code
    ran = capsys.readouterr()
    assert main(["report", str(tmp_path / "out" / name)]) == code
    reported = capsys.readouterr()
    assert _verdict_part(ran.out) == _verdict_part(reported.out)
    assert ran.err.strip().splitlines()[-1] == reported.err.strip().splitlines()[-1]  # "loadgate: <why>"
    v = load_json(tmp_path / "out" / name / "verdict.json")
    assert v["code"] == code and f"(exit {code}" in _verdict_part(reported.out)[-1]
    assert "exactness check: PASSED" in reported.out  # the check's block, re-rendered from its files


def test_too_few_pairs_to_decide_exit_22(tmp_path, capsys):
    p = write_profile(tmp_path, "few", cand=SLOW, base=FAST, pairs=2)
    assert main(["run", "-q", str(p)]) == 22
    assert "verdict: inconclusive" in capsys.readouterr().out


def test_compare_and_report_work_on_saved_runs_with_no_engine(tmp_path, capsys):
    p = write_profile(tmp_path, "saved", cand=SLOW, base=FAST)
    assert main(["run", "-q", str(p)]) == 21
    capsys.readouterr()
    # the engines were child processes of the run and are gone; copy the folders elsewhere too
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "out" / "saved", moved)
    assert main(["compare", str(moved)]) == 0
    table = capsys.readouterr().out
    assert "output_throughput" in table and "regressed" in table and "verdict: regressed" in table
    assert main(["compare", str(moved), "--format", "json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["verdict"] == "regressed"
    assert main(["compare", str(moved), "--format", "csv"]) == 0
    csv_text = capsys.readouterr().out
    assert csv_text.splitlines()[0].startswith("figure,unit,baseline_mean")
    assert main(["compare", str(moved), "--format", "markdown"]) == 0
    assert "| figure" in capsys.readouterr().out
    # two single runs: compared with a request-level interval, marked as such
    assert main(["compare", str(moved / "A1"), str(moved / "B1")]) == 0
    single = capsys.readouterr().out
    assert "one run each" in single and "single run" in single
    for fmt in ("table", "markdown", "csv", "json"):
        assert main(["report", str(moved / "B2"), "--format", fmt]) == 0
        assert capsys.readouterr().out.strip()
    assert main(["report", str(moved)]) == 21  # the A/B folder: its verdict's code
    assert main(["compare", str(moved / "A1")]) == 2


@pytest.mark.parametrize("bad,reason", [
    ({"ttft": ["p(99) < 800 parsecs"]}, "unknown unit 'parsecs'"),
    ({"tft": ["p(99) < 8ms"]}, "did you mean ttft"),
    ({"output_throughput": ["p(99) > 5"]}, "aggregation"),
])
def test_threshold_grammar_errors_are_one_line_profile_errors(tmp_path, capsys, bad, reason):
    p = write_profile(tmp_path, "bad", cand=FAST, base=None, thresholds=bad)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and reason in err and "thresholds." in err and "bad.yaml:" in err


def test_a_concurrency_sweep_prints_a_capacity_table_and_the_highest_level_meeting_the_slos(tmp_path, capsys):
    p = write_profile(tmp_path, "sweep", cand=FAST, base=None, concurrency=[1, 4, 16])
    doc = yaml.safe_load(p.read_text())
    doc["slo"] = {"ttft_ms": 1000.0}
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "-q", str(p)]) == 0
    out = capsys.readouterr().out
    cap = out[out.index("capacity:"):]
    assert [line.split()[0] for line in cap.splitlines()[3:6]] == ["1", "4", "16"]
    assert "highest concurrency meeting the SLOs (ttft p99 <= 1000 ms): 16" in cap


def test_no_change_is_never_a_verdict_without_evidence():
    """A deciding figure with no value on one side (every request failed, no counters) is n/a, and
    so is a comparison of nothing; the run maps n/a to inconclusive (exit 22), never to exit 0."""
    from loadgate.analysis.abstats import compare_figure, overall, worst

    missing = compare_figure("ttft.p50", [10.0, 11.0, 10.5], [None, None, None])
    same = compare_figure("ttft.p50", [10.0, 10.1, 9.9, 10.0, 10.05], [10.0, 10.1, 9.9, 10.0, 10.05])
    assert missing.ratio is None and same.decision == "no change"
    assert overall({"ttft.p50": missing}, ["ttft.p50"]) == "n/a"
    assert overall({"ttft.p50": same, "e2e.p50": missing}, ["ttft.p50", "e2e.p50"]) == "n/a"
    assert overall({"ttft.p50": same}, ["ttft.p50"]) == "no change"
    assert worst([]) == "n/a" and worst(["no change", "regressed", "n/a"]) == "regressed"
    # a figure neither side has (ITL with `stream: false`, one chunk per request) does not apply:
    # identical runs are "no change", not n/a (which every unstreamed A/B run used to be)
    absent = compare_figure("itl.p50", [None, None, None], [None, None, None])
    assert overall({"ttft.p50": same, "itl.p50": absent}, ["ttft.p50", "itl.p50"]) == "no change"
    assert overall({"itl.p50": absent}, ["itl.p50"]) == "n/a"  # and nothing left to decide on is n/a


# --- prefix-cache state --------------------------------------------------------------------------
CACHED = {"decode_step_us": 1000, "decode_us_per_seq": 20, "prefill_us_per_token": 200, "prefix_cache_block": 16}


def _cache_profile(tmp: Path, name: str, *, cache: str, pairs: int, baseline: dict[str, Any]) -> Path:
    doc: dict[str, Any] = {
        "name": name,
        "target": {"endpoint": "embedded", "sim": CACHED},
        "workload": {"requests": 12, "input_len": {"dist": "fixed", "value": 256},
                     "output_len": {"dist": "fixed", "value": 8}, "cache": cache},
        "load": {"concurrency": 1},
        "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp))},
        "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": name},
        "ab": {"baseline": baseline, "pairs": pairs},
    }
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _side_runs(folder: Path, side: str) -> list[dict[str, Any]]:
    """The side's runs in the order they ran: (TTFT p50, prefix-cache hit rate)."""
    order = load_json(folder / "ab.json")["order"]
    out = []
    for name in (n for n in order if n[0] == side):
        lv = load_json(folder / name / "summary.json")["levels"]["1"]
        out.append({"ttft": lv["metrics"]["ttft"]["p50"], "hit": lv["prefix_cache"]["hit_rate"]})
    return out


@pytest.mark.parametrize("cache", ["warm", "fresh"])
def test_a_second_run_is_flattered_by_a_warm_prefix_cache_unless_its_prompts_are_fresh(tmp_path, cache):
    """Each side on its own simulator with vLLM-style prefix caching (prefill is most of TTFT):
    replaying one plan (`cache: warm`), each side's second run hits the cache and its TTFT drops;
    with the default fresh prompts the second run is cold like the first, hit rate 0."""
    p = _cache_profile(tmp_path, f"c-{cache}", cache=cache, pairs=2, baseline={"endpoint": "embedded", "sim": CACHED})
    assert main(["run", "-q", str(p)]) in (0, 22)
    for side in ("A", "B"):
        first, second = _side_runs(tmp_path / "out" / f"c-{cache}", side)
        assert first["hit"] == 0.0  # the check's corpus shares no block with the load's prompts
        if cache == "warm":
            assert second["hit"] > 0.9 and second["ttft"] < 0.5 * first["ttft"], (first, second)
        else:
            assert second["hit"] == 0.0 and second["ttft"] > 0.8 * first["ttft"], (first, second)


def test_an_ab_between_a_warm_and_a_cold_side_is_refused(tmp_path, capsys):
    """The baseline's simulator saw the plan's prompts before (a run of the same plan), the
    candidate's did not: the candidate looks slower only because its cache is cold. The A/B does
    not decide (exit 22) and says it is the cache (without the check it was judged on the speed the
    cache made: here, with 2 pairs, "inconclusive: add pairs", which more pairs would not cure)."""
    from loadgate.config.simconfig import SimConfig
    from loadgate.sim.process import SimProcess

    with SimProcess(SimConfig(**CACHED)) as warm:
        pre = _cache_profile(tmp_path, "prewarm", cache="warm", pairs=1, baseline={"endpoint": warm.url})
        doc = yaml.safe_load(pre.read_text())
        doc["target"] = {"endpoint": warm.url}
        del doc["ab"]
        pre.write_text(yaml.safe_dump(doc))
        assert main(["baseline", str(pre), "--out", str(tmp_path / "bl")]) == 0
        base = capsys.readouterr().out.strip().splitlines()[-1]
        assert main(["run", "-q", "--unverified", str(pre)]) == 11  # the plan's prompts are now in its cache
        capsys.readouterr()
        p = _cache_profile(tmp_path, "mixed", cache="warm", pairs=2, baseline={"endpoint": warm.url})
        doc = yaml.safe_load(p.read_text())
        doc["exactness"]["baseline"] = base
        doc["exactness"]["scenarios"] = {"reset_prefix_cache": False}  # (the check would empty the warm cache)
        p.write_text(yaml.safe_dump(doc))
        code = main(["run", "-q", str(p)])
    err = capsys.readouterr().err
    assert code == 22, err
    assert "met the prefix cache in different states" in err and "hit rate A 9" in err and "B 4" in err


def test_a_reset_before_each_run_clears_the_cache_a_replayed_plan_would_hit(tmp_path, capsys):
    """`load.reset_prefix_cache`: the engine's cache is emptied before each level and each A/B run
    (the simulator serves vLLM's POST /reset_prefix_cache), so even a replayed plan meets it cold;
    an engine without a reset route stops the run in one line (exit 3)."""
    p = _cache_profile(tmp_path, "reset", cache="warm", pairs=2, baseline={"endpoint": "embedded", "sim": CACHED})
    doc = yaml.safe_load(p.read_text())
    doc["load"]["reset_prefix_cache"] = True
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "-q", str(p)]) in (0, 22)
    for side in ("A", "B"):
        first, second = _side_runs(tmp_path / "out" / "reset", side)
        assert first["hit"] == 0.0 and second["hit"] == 0.0 and second["ttft"] > 0.8 * first["ttft"], (first, second)
    a1 = load_json(tmp_path / "out" / "reset" / "A1" / "server.json")["1"]
    assert a1["prefix_cache_reset"] == "/reset_prefix_cache"
    capsys.readouterr()
    doc["target"]["sim"] = {**CACHED, "prefix_cache_block": 0}  # no cache, no route
    doc["output"]["run_id"] = "noroute"
    del doc["ab"]
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "-q", str(p)]) == 3
    err = capsys.readouterr().err
    assert "has no prefix-cache reset route" in err and len(err.strip().splitlines()) == 1


def _single_run(folder: Path) -> dict[str, Any]:
    lv = load_json(folder / "summary.json")["levels"]["1"]
    salt = load_json(folder / "meta.json")["profile"]["workload"]["prompt_salt"]
    return {"ttft": lv["metrics"]["ttft"]["p50"], "hit": lv["prefix_cache"]["hit_rate"], "salt": salt}


def _three_runs_of_one_profile(tmp: Path, capsys: Any) -> list[dict[str, Any]]:
    """Three `loadgate run`s of one profile against one simulator with a prefix cache: the first two
    as written (fresh prompts, no salt set), the third with the first run's salt from its meta.json."""
    from loadgate.config.simconfig import SimConfig
    from loadgate.sim.process import SimProcess

    out = []
    with SimProcess(SimConfig(**CACHED)) as sim:
        p = _cache_profile(tmp, "again", cache="fresh", pairs=2, baseline={"endpoint": sim.url})
        doc = yaml.safe_load(p.read_text())
        doc["target"] = {"endpoint": sim.url}
        del doc["ab"], doc["output"]["run_id"]
        for k in range(3):
            if k == 2:
                doc["workload"]["prompt_salt"] = out[0]["salt"]
            p.write_text(yaml.safe_dump(doc))
            assert main(["run", "-q", "--unverified", str(p)]) == 11
            capsys.readouterr()
            newest = max((tmp / "out").iterdir(), key=lambda d: d.stat().st_mtime_ns)
            out.append(_single_run(newest))
    return out


def test_a_second_run_of_one_profile_meets_a_cold_cache_and_its_salt_replays_the_first(tmp_path, capsys):
    """Separate runs of one profile draw their own prompt salt (kept in meta.json's profile), so the
    second run does not meet the first one's prompts in the engine's cache (hit rate 0, the same
    prefill work); setting the first run's salt sends exactly its prompts again: every block hits."""
    first, second, replayed = _three_runs_of_one_profile(tmp_path, capsys)
    assert isinstance(first["salt"], int) and first["salt"] != second["salt"]
    assert first["hit"] == 0.0 and second["hit"] == 0.0, (first, second)
    assert second["ttft"] > 0.8 * first["ttft"], (first, second)
    assert replayed["salt"] == first["salt"] and replayed["hit"] > 0.9, replayed
    assert replayed["ttft"] < 0.5 * first["ttft"], (first, replayed)


@pytest.mark.timing
def test_a_second_run_of_one_profile_has_the_first_runs_ttft_within_5_percent(tmp_path, capsys):
    """The done-when figure, timed: with fresh prompts a second run's TTFT p50 is within ±5 % of
    the first (prefill of 256 tokens is ~51 ms of it on the simulator's schedule). Where the host
    took a share of this VM's CPU meanwhile, the simulator's schedule stretched by up to that share
    (seen here: 11 % apart at ~30 % steal), and the limit with it."""
    from tests.machine import Steal

    with Steal() as steal:
        first, second, _ = _three_runs_of_one_profile(tmp_path, capsys)
    limit = 0.05 + (steal.fraction if steal.fraction > 0.02 else 0.0)
    assert abs(second["ttft"] / first["ttft"] - 1) <= limit, (first, second, f"steal {steal.fraction:.0%}")


def test_the_checks_scenarios_each_meet_an_emptied_prefix_cache_and_report_their_hits(tmp_path, capsys):
    """The check replays one corpus in every scenario: without resets the second scenario meets the
    corpus the first left in the cache; with them (the default) every scenario is cold, and
    exactness.json and the report give each scenario's route and hit rate."""
    sim = {**CACHED, "prefix_cache_block": 2}  # the corpus's prompts are a few tokens long
    rates = {}
    for reset in (True, False):
        p = _cache_profile(tmp_path, f"sc-{reset}", cache="fresh", pairs=2, baseline={})
        doc = yaml.safe_load(p.read_text())
        doc["target"]["sim"] = sim
        del doc["ab"]
        doc["exactness"]["scenarios"] = {"solo": True, "concurrent": 3, "reset_prefix_cache": reset}
        p.write_text(yaml.safe_dump(doc))
        assert main(["check", str(p)]) == 0
        out = capsys.readouterr().out
        sc = load_json(next((tmp_path / "out").glob(f"sc-{reset}*")) / "exactness.json")["scenarios"]
        rates[reset] = {k.split(":")[0]: v["prefix_cache"]["hit_rate"] for k, v in sc.items()}
        if reset:
            assert {v["cache_reset"] for v in sc.values()} == {"/reset_prefix_cache"}
            assert "concurrent:3 (3 requests, 3 in flight, cache emptied, 0% prefix-cache hits)" in out, out
    assert rates[True] == {"solo": 0.0, "concurrent": 0.0}, rates
    assert rates[False]["solo"] == 0.0 and rates[False]["concurrent"] > 0.5, rates


def test_llama_cpp_apis_need_no_reset_because_their_requests_never_use_the_prompt_cache():
    """`empty_prefix_cache` answers without a route exactly for the APIs whose adapters send
    `cache_prompt: false` in every body (the load's and the check's)."""
    from loadgate.engine.adapters import ADAPTERS, adapter_for, is_chat
    from loadgate.engine.adapters.base import GenRequest
    from loadgate.net.connect import run_async
    from loadgate.net.http import empty_prefix_cache

    off = set()
    for api in ADAPTERS:
        req = GenRequest(4, messages=({"role": "user", "content": "hi"},)) if is_chat(api) else \
            GenRequest(4, prompt_ids=(1, 2, 3))
        body = adapter_for(api).build_body(req, "m")
        if body.get("cache_prompt") is False:
            off.add(api)
    assert off == {api for api in ADAPTERS if adapter_for(api).prompt_cache_off} and off
    assert run_async(empty_prefix_cache(None, "http://127.0.0.1:9", "llamacpp")) == "cache_prompt: false"  # type: ignore[arg-type]


def test_an_ab_folder_whose_runs_did_not_all_finish_is_incomplete_not_compared(tmp_path, capsys):
    """An A/B run killed after its first pair (state.json still `running`): `report` makes no
    comparison of what it holds and says INCOMPLETE with exit 5; stopped on a failed write, with 4."""
    from loadgate.jsonutil import dump_json
    from loadgate.runstate import write_state

    run = tmp_path / "ab"
    run.mkdir()
    dump_json(run / "ab.json", {"pairs": 3, "order": ["A1", "B1", "B2", "A2", "A3", "B3"], "sides": {}})
    for name in ("A1", "B1"):
        (run / name).mkdir()
        (run / name / "records.jsonl").write_bytes(b"")
    write_state(run, "running")
    assert main(["report", str(run)]) == 5
    out = capsys.readouterr().out
    assert "INCOMPLETE (exit 5" in out and "2 of 6 runs began (A1, B1)" in out, out
    write_state(run, "stopped", 4)
    assert main(["report", str(run)]) == 4


def test_a_candidate_that_regresses_in_one_category_only_exits_21_naming_it(tmp_path, capsys):
    """Long prompts pay the candidate's slower prefill, short ones barely: the level's TTFT p50 (a
    short prompt's, 12 of 16) moves less than the practical band, the `long` category's many times
    more. One request in flight, so no prompt waits behind another's prefill."""
    import json

    words = "river cache stone lamp orbit field quiet paper window garden".split()
    rows = [{"prompt": " ".join(words[(k + j) % 10] for j in range(8)), "category": "short"} for k in range(12)]
    rows += [{"prompt": " ".join(words[(k * j) % 10] for j in range(1500)), "category": "long"} for k in range(4)]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = {"decode_step_us": 1500, "prefill_us_per_token": 1}
    cand = {**base, "prefill_us_per_token": 20}
    doc = {"name": "cat", "target": {"endpoint": "embedded", "sim": cand},
           "workload": {"requests": 16, "dataset": {"path": "mixed.jsonl"}, "output_len": {"dist": "fixed", "value": 8}},
           "load": {"concurrency": 1},
           "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp_path))}, "health": LAX_HEALTH,
           "ab": {"baseline": {"endpoint": "embedded", "sim": base}, "pairs": 5, "decide_on": ["ttft.p50"]},
           "output": {"dir": str(tmp_path / "out"), "run_id": "cat"}}
    p = tmp_path / "cat.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "-q", str(p)]) == 21
    err = capsys.readouterr().err
    assert "the candidate regressed against the baseline at level 1 · category long" in err
    assert "category short" not in err and "at level 1," not in err and "at level 1 (" not in err
    comp = load_json(tmp_path / "out" / "cat" / "comparison.json")["levels"]
    assert comp["1 · category long"]["figures"]["ttft.p50"]["decision"] == "regressed"
    assert comp["1 · category long"]["figures"]["ttft.p50"]["ratio"] > 3
    assert comp["1"]["figures"]["ttft.p50"]["decision"] != "regressed"
    assert comp["1 · category short"]["figures"]["ttft.p50"]["decision"] != "regressed"
    # a group's throughput is its share of a window the other group set too: not compared
    assert "output_throughput" not in comp["1 · category short"]["figures"] and "output_throughput" in comp["1"]["figures"]
