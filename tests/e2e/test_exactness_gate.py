"""The exactness gate against the simulator, whose divergence knobs are the known ground truth.

The baseline is `sim-reference`: the same simulated model with speculation and every knob off,
replayed one request at a time. Each test turns one knob on and checks that exactly the scenario
meant to expose it does, under the contract meant to judge it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.profiles import LAX_HEALTH

FAST = {"decode_step_us": 150, "decode_us_per_seq": 5, "prefill_us_per_token": 0.5}


def profile(tmp: Path, *, sim: dict[str, Any] | None = None, contract: dict[str, Any] | None = None,
            scenarios: dict[str, Any] | None = None, run_id: str = "r", corpus: str | None = None,
            extra: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {
        "name": "gate",
        "target": {"endpoint": "embedded", "sim": {**FAST, **(sim or {})}},
        "workload": {"requests": 16, "input_len": {"dist": "fixed", "value": 32},
                     "output_len": {"dist": "fixed", "value": 16}},
        "load": {"concurrency": 4},
        "exactness": {"baseline": "sim-reference", "contract": contract or {"tier": "bit-exact"},
                      "scenarios": scenarios or {"solo": True}},
        "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": run_id},
    }
    if corpus:
        doc["exactness"]["corpus"] = corpus
    doc.update(extra or {})
    path = tmp / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def check(tmp: Path, **kw: Any) -> tuple[int, dict[str, Any]]:
    p = profile(tmp, **kw)
    code = main(["check", str(p)])
    return code, load_json(tmp / "out" / kw.get("run_id", "r") / "exactness.json")


def by_scenario(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for n in report["non_identical"]:
        out.setdefault(n["scenario"].split(":")[0], []).append(n)
    return out


def test_a_clean_engine_passes_bit_exact_with_speculation_on_and_proves_it_ran(tmp_path):
    code, r = check(tmp_path, sim={"speculative": {"method": "draft_model", "k": 4}},
                    scenarios={"solo": True, "concurrent": 8, "long": True})
    assert code == 0 and r["passed"], r["reasons"]
    assert set(r["verdicts"]) == {"identical"} and r["non_identical"] == []
    assert r["speculation"]["required"] and r["speculation"]["ran"]
    assert r["speculation"]["counter_drafts_delta"] > 0
    assert r["positions"]["ids_only"] == 0 and r["positions"]["logprob"] > 1000
    assert (tmp_path / "out" / "r" / "attestation.json").exists()


def test_batch_variant_is_caught_only_in_the_concurrent_scenario(tmp_path, capsys, monkeypatch):
    log = tmp_path / "truth.jsonl"
    monkeypatch.setenv("LOADGATE_SIM_TRUTH_LOG", str(log))  # the embedded simulator writes it when it stops
    code, r = check(tmp_path, sim={"divergence": {"batch_variant": True}},
                    scenarios={"solo": True, "concurrent": 8}, contract={"tier": "token-exact"})
    out = capsys.readouterr().out
    assert code == 10 and not r["passed"]
    groups = by_scenario(r)
    assert "solo" not in groups and len(groups["concurrent"]) >= 3
    truth = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    by_id = {t["request_id"]: t for t in truth}
    for n in groups["concurrent"]:
        assert n["verdict"] == "near-tie divergence" and n["baseline_top2_gap"] < 0.3
        assert n["first_divergence"] is not None and n["baseline_token"] != n["candidate_token"]
        rec = by_id[f"r-check-{n['scenario']}-{n['order']}"]
        # the simulator flipped exactly there, in a step that held more than this sequence (its truth log)
        assert rec["flips"][0] == n["first_divergence"] and rec["flip_batches"][0] >= 2, rec["flip_batches"]
        # (the client's count at that token is its view, ± an engine step: asserted only within the scenario)
        assert 1 <= n["in_flight_at_divergence"] <= 8, n
    assert "at it)" in out and "while its first diverging token arrived, as the client saw it" in out
    # every divergence is listed in the report, and each has a reproducer bundle
    assert out.count("concurrent:8") >= len(groups["concurrent"])
    assert len(list((tmp_path / "out" / "r" / "divergences").glob("*.json"))) == len(r["non_identical"])
    assert not (tmp_path / "out" / "r" / "attestation.json").exists()


def test_run_to_run_drift_is_caught_by_repeats(tmp_path):
    code, r = check(tmp_path, sim={"divergence": {"run_to_run": 0.03}},
                    scenarios={"solo": False, "repeat": 400, "repeat_batch": 8}, contract={"tier": "token-exact"})
    assert code == 10
    groups = by_scenario(r)
    assert set(groups) == {"repeat"} and 2 <= len(groups["repeat"]) <= 40  # about 3 % of 400
    assert r["scenarios"]["repeat:400x8"]["requests"] == 400


def test_logprob_jitter_passes_token_exact_and_fails_bit_exact(tmp_path):
    code_tok, tok = check(tmp_path, sim={"divergence": {"logprob_jitter": 3}}, contract={"tier": "token-exact"},
                          run_id="tok")
    code_bit, bit = check(tmp_path, sim={"divergence": {"logprob_jitter": 3}}, contract={"tier": "bit-exact"},
                          run_id="bit")
    assert code_tok == 0 and tok["passed"]
    assert code_bit == 10 and not bit["passed"]
    assert set(bit["verdicts"]) == {"equivalent"}
    assert {n["max_ulp"] for n in bit["non_identical"]} == {3}
    assert all(n["first_divergence"] is None for n in bit["non_identical"])


def test_spec_variant_near_ties_pass_near_tie_tolerant_and_fail_token_exact(tmp_path):
    sim = {"speculative": {"method": "draft_model", "k": 4}, "divergence": {"spec_variant": True}}
    code_nt, nt = check(tmp_path, sim=sim, contract={"tier": "near-tie-tolerant", "gap": 0.3}, run_id="nt")
    code_te, te = check(tmp_path, sim=sim, contract={"tier": "token-exact"}, run_id="te")
    assert code_nt == 0 and nt["passed"]
    assert nt["verdicts"].get("near-tie divergence", 0) >= 3  # still listed although the contract allows them
    assert all(n["verdict"] == "near-tie divergence" and n["passed"] for n in nt["non_identical"])
    assert code_te == 10 and not te["passed"]


def test_long_context_is_caught_only_by_the_long_cases(tmp_path):
    code, r = check(tmp_path, sim={"divergence": {"long_context": 6000}},
                    scenarios={"solo": True, "concurrent": 4, "long": True}, contract={"tier": "token-exact"})
    assert code == 10
    groups = by_scenario(r)
    assert set(groups) == {"long"} and groups["long"]
    from loadgate.exactness.corpus import default_corpus_path, load_corpus

    long_cases = {c.id for c in load_corpus(default_corpus_path()).cases if "long" in c.tags}
    # every long case (prompts of 8.2-9k tokens, past the knob's 6000) diverges; nothing else does
    assert {n["case"] for n in groups["long"] if n["first_divergence"] is not None} == long_cases


def test_no_false_positive_in_over_a_thousand_clean_sequences(tmp_path):
    code, r = check(tmp_path, sim={"speculative": {"method": "ngram", "k": 3}},
                    scenarios={"solo": True, "concurrent": 16, "repeat": 960, "repeat_batch": 8})
    assert code == 0 and r["passed"]
    assert sum(r["verdicts"].values()) >= 1000 and set(r["verdicts"]) == {"identical"}


def test_speculation_declared_but_never_seen_fails_the_check(tmp_path):
    code, r = check(tmp_path, contract={"tier": "token-exact"},
                    extra={"target": {"endpoint": "embedded", "sim": FAST, "declared": {"speculative": "eagle"}}})
    assert code == 10 and r["speculation"]["required"] and not r["speculation"]["ran"]
    assert any("speculation is on" in x for x in r["reasons"])


def test_replay_reruns_one_bundle_alone(tmp_path, capsys):
    code, r = check(tmp_path, sim={"divergence": {"batch_variant": True}}, scenarios={"solo": False, "concurrent": 8},
                    contract={"tier": "token-exact"})
    assert code == 10
    bundle = sorted((tmp_path / "out" / "r" / "divergences").glob("*.json"))[0]
    doc = orjson.loads(bundle.read_bytes())
    assert doc["request"]["temperature"] == 0.0 and doc["baseline"]["output_ids"] != doc["candidate"]["output_ids"]
    assert doc["scenario"]["in_flight_when_sent"] >= 1
    capsys.readouterr()
    # the embedded engine is gone; the same configuration alone answers like the baseline (the
    # batch effect needs company), which is what replay shows
    from loadgate.config.simconfig import DivergenceConfig, SimConfig
    from loadgate.sim.process import SimProcess

    seen = doc["scenario"]["in_flight_when_sent"]
    with SimProcess(SimConfig(divergence=DivergenceConfig(batch_variant=True), **FAST)) as sim:
        assert main(["replay", str(bundle), "--endpoint", sim.url, "--times", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count("same tokens as the baseline") == 2
        if seen > 1:  # it says so, and how to replay it as it was seen
            assert f"not reproduced alone: the divergence was seen with {seen} requests in flight" in out
            assert f"--concurrency {seen}" in out
        # with a batch of the size it diverged in, it diverges again
        assert main(["replay", str(bundle), "--endpoint", sim.url, "--concurrency", "8"]) == 10
        assert "with 7 companion request(s) in flight" in capsys.readouterr().out


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_fingerprint_change_around_the_measurement_stops_with_exit_11(tmp_path, monkeypatch, capsys, when):
    import loadgate.gate.policy as gate
    import loadgate.runs as runs
    from loadgate.config.simconfig import SimConfig
    from loadgate.sim.process import SimProcess

    cfg = SimConfig(**FAST)
    procs = [SimProcess(cfg).start()]
    port = int(procs[0].url.rsplit(":", 1)[1])

    def restart_with_other_flags() -> None:
        procs[-1].stop()
        procs.append(SimProcess(SimConfig(max_num_seqs=7, **FAST), port=port).start())

    if when == "before":
        real_check = gate.check_engine

        async def check_then_restart(e, run_dir):
            out = await real_check(e, run_dir)
            restart_with_other_flags()
            return out

        monkeypatch.setattr(gate, "check_engine", check_then_restart)
    else:
        real_measure = runs.measure

        async def measure_then_restart(*a, **k):
            await real_measure(*a, **k)
            restart_with_other_flags()

        monkeypatch.setattr(runs, "measure", measure_then_restart)
    try:
        # baseline from the same configuration, captured first
        p = profile(tmp_path, run_id="fp", extra={"target": {"endpoint": procs[0].url}})
        assert main(["baseline", str(p), "--out", str(tmp_path / "b")]) == 0
        base_file = capsys.readouterr().out.strip().splitlines()[-1]
        doc = yaml.safe_load(p.read_text())
        doc["exactness"]["baseline"] = base_file
        p.write_text(yaml.safe_dump(doc))
        code = main(["run", "-q", str(p)])
    finally:
        for sp in procs:
            sp.stop()
    err = capsys.readouterr().err
    assert code == 11
    assert "max_num_seqs" in err and ("between the check" in err if when == "before" else "during" in err)
    # the run folder says so too: `report` judges it again from its files, with the same code
    assert main(["report", str(tmp_path / "out" / "fp")]) == 11
    out = capsys.readouterr().out
    assert "NOT ESTABLISHED (exit 11" in out and "max_num_seqs" in out


def test_fingerprint_command_prints_the_hash_and_diffs_a_saved_one(tmp_path, capsys):
    code, r = check(tmp_path, run_id="saved")
    assert code == 0
    capsys.readouterr()
    same = profile(tmp_path, run_id="same")
    assert main(["fingerprint", str(same)]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["fingerprint_hash"] == r["fingerprint_hash"] and "sim" in doc["fingerprint"]["engine"]["server_info"]
    saved = tmp_path / "out" / "saved" / "attestation.json"
    assert main(["fingerprint", str(same), "--against", str(saved)]) == 0
    assert "identical fingerprints" in capsys.readouterr().out
    other = profile(tmp_path, run_id="other", sim={"max_num_seqs": 3})
    assert main(["fingerprint", str(other), "--against", str(saved)]) == 12  # CI can act on a difference
    got = capsys.readouterr()
    assert "max_num_seqs: 64 -> 3" in got.out and "the fingerprint differs" in got.err


_BUNDLE = {"format": 1, "api": "openai-completions", "route": "http://127.0.0.1:9/v1/completions",
           "request": {"model": "m", "prompt": "x", "max_tokens": 2}, "case": "c",
           "scenario": {"name": "solo", "in_flight_when_sent": 1}, "comparison": None,
           "baseline": {"output_ids": [1, 2], "logprobs": [-0.1, -0.2], "finish_reason": "length",
                        "top_logprobs": [[[1, -0.1], [3, -2.0]], [[2, -0.2], [4, -3.0]]]}}


@pytest.mark.parametrize("key,damage", [
    ("api", {"api": "bogus"}), ("api", {"api": 5}),
    ("scenario.in_flight_when_sent", {"scenario": {"name": "solo"}}),
    ("comparison", {"comparison": [1]}),
    ("baseline", {"baseline": {**_BUNDLE["baseline"], "top_logprobs": [[1]]}}),
    ("baseline", {"baseline": {**_BUNDLE["baseline"], "output_ids": ["a"]}}),
    ("baseline", {"baseline": {**_BUNDLE["baseline"], "logprobs": "x"}}),
])
def test_a_damaged_bundle_is_a_one_line_error_before_anything_is_sent(tmp_path, capsys, key, damage):
    path = tmp_path / "b.json"
    path.write_bytes(orjson.dumps({**_BUNDLE, **damage}))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"loadgate: {path}: {key}: missing or of the wrong type; " + err.split("; ", 1)[1]
    assert err.count("\n") == 1


def test_a_bad_route_in_a_bundle_is_named_as_the_bundle_route(tmp_path, capsys):
    path = tmp_path / "b.json"
    path.write_bytes(orjson.dumps({**_BUNDLE, "route": "ftp://h/v1/completions"}))
    assert main(["replay", str(path)]) == 2
    assert capsys.readouterr().err.startswith("loadgate: bundle route: expected an http:// or https:// URL")


def test_requests_that_keep_failing_leave_the_check_not_established_never_failed(tmp_path, capsys):
    """Only compared tokens can fail a check. An engine that answers every request with 503 gave
    exit 10 and a first divergence "end" before; now each request is sent again twice, and the
    check is not established (exit 11), naming the cases, with nothing said to diverge."""
    code, r = check(tmp_path, sim={"faults": {"http_503": 1.0}})
    out = capsys.readouterr()
    assert code == 11, out.out + out.err
    assert r["passed"] is False and r["reasons"] == [] and r["not_established"]
    assert r["retried"] == 2 * len(r["not_established"])  # every case: two more tries
    assert all(n["first_divergence"] is None and n["verdict"] is None for n in r["non_identical"])
    assert "exactness check: NOT ESTABLISHED" in out.out and "still failed after 2 retries" in out.out
    assert "exactness not established" in out.err and "solo/" in out.err
    from loadgate.verdict import _exactness_of
    assert _exactness_of(tmp_path / "out" / "r") == "not established"


def test_speculation_unproven_because_every_request_failed_is_not_established_either(tmp_path, capsys):
    code, r = check(tmp_path, sim={"faults": {"http_503": 1.0}, "speculative": {"method": "draft_model", "k": 2}})
    assert code == 11 and r["reasons"] == [], r["reasons"]


def test_a_retry_keeps_the_scenarios_batch_size():
    """A request that failed in a scenario of 4 in flight is sent again with 3 others of the
    scenario beside it (their answers unused), not alone: a batch-only divergence stays visible."""
    import asyncio

    from loadgate.engine.adapters.base import Decoded, ErrorInfo
    from loadgate.exactness.check import _send_with_retries
    from loadgate.exactness.corpus import Case
    from loadgate.exactness.replay import Observed

    cases = [Case(id=f"c{k}", kind="completion", max_tokens=2, stop=(), tags=(), prompt=f"p{k}", messages=None,
                  tools=None) for k in range(6)]
    calls: list[tuple[list[str], int]] = []

    class Sender:
        async def send_all(self, batch, concurrency, tag):
            calls.append(([c.id for c in batch], concurrency))
            fail = len(calls) == 1
            return [Observed(c.id, {}, "u", Decoded(error=ErrorInfo("disconnect", "x") if fail and c.id == "c2" else None))
                    for c in batch]

    observed, resent = asyncio.run(_send_with_retries(Sender(), cases, 4, "t"))
    assert resent == 1 and all(o.decoded.error is None for o in observed)
    assert calls[1][0][0] == "c2" and len(calls[1][0]) == 4 and calls[1][1] == 4


def test_fingerprint_against_a_file_saved_before_the_api_was_fingerprinted_is_identical(tmp_path, capsys):
    code, r = check(tmp_path, run_id="saved")
    assert code == 0
    saved = load_json(tmp_path / "out" / "saved" / "fingerprint.json")
    del saved["fingerprint"]["request"]["api"]
    saved["fingerprint"]["request"]["check_scenarios"] = {"solo": True, "concurrent": 4}
    old = tmp_path / "old-fp.json"
    old.write_bytes(orjson.dumps(saved))
    capsys.readouterr()
    assert main(["fingerprint", str(profile(tmp_path, run_id="same")), "--against", str(old)]) == 0
    assert "identical fingerprints" in capsys.readouterr().out


def test_a_transient_failure_is_retried_and_the_check_still_decides(tmp_path, capsys):
    """A fifth of the requests cut or refused: they are sent again, and the check passes on
    what it compared (or, if a case kept failing, is not established): never failed."""
    code, r = check(tmp_path, sim={"faults": {"http_503": 0.1, "disconnect": 0.1}}, scenarios={"solo": True, "concurrent": 4})
    assert r["retried"] > 0
    assert code in (0, 11) and r["reasons"] == [], r["reasons"]
    assert code == 0 or r["not_established"]
    assert "retried: " in capsys.readouterr().out


def _captured(tmp: Path, capsys: Any, **kw: Any) -> Path:
    p = profile(tmp, run_id="cap", **kw)
    assert main(["baseline", str(p), "--out", str(tmp / "bl")]) == 0
    return Path(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_baseline_has_a_stable_id_and_compares_engine_to_engine(tmp_path, capsys):
    """Capturing the same engine twice (another port, another minute) gives the same id and file;
    a check of that engine with other scenarios has the baseline's own fingerprint."""
    first = _captured(tmp_path, capsys)
    again = _captured(tmp_path, capsys)
    assert first == again and len(list((tmp_path / "bl").glob("*.json"))) == 1
    doc = load_json(first)
    code, r = check(tmp_path, run_id="cand", extra={"exactness": {"baseline": str(first), "contract": {"tier": "bit-exact"},
                                                                  "scenarios": {"solo": True, "concurrent": 4}}})
    assert code == 0
    assert r["fingerprint_hash"] == doc["fingerprint_hash"]  # the scenarios are not the engine
    assert r["baseline"]["sha256"] == doc["sha256"]
    # the quickstart's sim-reference baseline is written once, however often it runs
    for k in range(2):
        assert check(tmp_path, run_id=f"ref{k}")[0] == 0
    assert len(list((tmp_path / "out" / "baselines").glob("sim-reference-*.json"))) == 1


def test_a_baseline_captured_through_another_api_is_refused_before_anything_is_sent(tmp_path, capsys):
    """A completions baseline checked through a chat API sent the completion cases to the chat
    route and reported divergences at token 0, with identical fingerprints; now the API is in the
    fingerprint and the check stops in one line naming both routes."""
    base = _captured(tmp_path, capsys)
    assert load_json(base)["fingerprint"]["request"]["api"] == "openai-completions"
    p = profile(tmp_path, run_id="chat", extra={"exactness": {"baseline": str(base), "contract": {"tier": "bit-exact"},
                                                              "scenarios": {"solo": True}}})
    doc = yaml.safe_load(p.read_text())
    doc["target"]["api"] = "openai-chat"
    p.write_text(yaml.safe_dump(doc))
    code = main(["check", str(p)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "on /v1/completions" in err and "to /v1/chat/completions" in err and "target.api openai-chat" in err
    assert not (tmp_path / "out" / "chat" / "exactness.json").exists()


def test_a_gateway_path_prefix_is_the_same_route_but_another_route_is_refused():
    from types import SimpleNamespace

    from loadgate.errors import UsageError
    from loadgate.exactness.baseline import Baseline
    from loadgate.gate.engine_check import refuse_other_routes

    case = SimpleNamespace(id="c", kind="completion")
    b = Baseline(None, {"cases": {"c": {"route": "http://e:8000/v1/completions"}}, "fingerprint": {}})
    via = lambda url: SimpleNamespace(targets={"completion": SimpleNamespace(url=url)})  # noqa: E731
    refuse_other_routes(b, SimpleNamespace(cases=[case]), via("http://gw/engine-b/v1/completions"), "openai-completions")
    with pytest.raises(UsageError, match="to /v1/chat/completions"):
        refuse_other_routes(b, SimpleNamespace(cases=[case]), via("http://e:8000/v1/chat/completions"), "openai-chat")
