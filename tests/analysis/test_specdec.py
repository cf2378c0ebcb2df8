"""Acceptance length from real vLLM counters and from per-request fields, one definition."""

from __future__ import annotations

from typing import Any

import pytest

from loadgate.analysis.specdec import contamination, from_counters, from_records, per_request_steps, reconcile
from loadgate.engine.adapters import family_for
from loadgate.snapshot import parse_metrics
from tests.fixtures_path import fixture_file
from tests.recs import make_record


def snaps():
    return (parse_metrics(fixture_file("vllm-cpu", "metrics_before.txt").read_text()),
            parse_metrics(fixture_file("vllm-cpu", "metrics_after.txt").read_text()))


def test_counter_deltas_from_real_vllm_metrics():
    before, after = snaps()
    family = family_for("openai-completions", after)  # the OpenAI routes: the metrics say which engine
    assert family is not None and family.name == "vllm"
    c = from_counters(before, after, family)
    assert (c["drafts"], c["accepted"], c["draft_tokens"]) == (31, 28, 108)
    assert c["acceptance_length"] == pytest.approx(1 + 28 / 31)
    assert c["acceptance_rate"] == pytest.approx(28 / 108)
    assert c["per_position_acceptance"] == pytest.approx({"0": 16 / 31, "1": 6 / 31, "2": 4 / 31, "3": 2 / 31})


def test_contamination_check_compares_server_and_client_totals():
    before, after = snaps()
    # the real server finished 5 requests (finish reason length) generating 92 tokens
    vllm = family_for(None, after)
    clean = contamination(before, after, [make_record(completion_tokens=92 - 4 * 17)]
                          + [make_record(completion_tokens=17)] * 4, vllm)
    assert clean["clean"] and clean["server_requests"] == 5
    dirty = contamination(before, after, [make_record(completion_tokens=17)] * 4, vllm)
    assert not dirty["clean"] and len(dirty["problems"]) == 2


def test_vllm_per_request_metrics_use_spec_steps():
    r = make_record(completion_tokens=24, chunk_tokens=[24],
                    spec={"source": "vllm", "verify_steps": 11, "draft_tokens": 43, "accepted": 10})
    assert per_request_steps(r) == (11, 10)
    agg = from_records([r])
    assert agg["acceptance_length"] == pytest.approx(1 + 10 / 11)  # vLLM reported 1.909…
    assert agg["acceptance_rate"] == pytest.approx(10 / 43)


def test_llama_cpp_steps_are_derived_from_predicted_minus_accepted():
    # real llama-server fixture: predicted_n 24, draft_n 35, draft_n_accepted 13
    r = make_record(completion_tokens=24, chunk_tokens=[1] * 24,
                    spec={"source": "llama.cpp timings", "verify_steps": None, "draft_tokens": 35, "accepted": 13})
    assert per_request_steps(r) == (10, 13)
    assert from_records([r])["acceptance_length"] == pytest.approx(2.3)


def test_sglang_accepted_is_derived_from_completion_tokens_when_only_verify_count_is_given():
    r = make_record(completion_tokens=21, chunk_tokens=[21],
                    spec={"source": "sglang", "verify_steps": 5, "draft_tokens": None, "accepted": None})
    assert per_request_steps(r) == (5, 15)


def test_failed_requests_are_not_pooled_and_reconcile_flags_disagreement():
    spec = {"source": "sim", "verify_steps": 4, "draft_tokens": 16, "accepted": 4}
    good = make_record(completion_tokens=9, chunk_tokens=[9], spec=spec)
    bad = make_record(completion_tokens=9, chunk_tokens=[9], spec=spec, error={"kind": "disconnect", "detail": ""})
    agg = from_records([good, bad])
    assert agg["requests"] == 1 and agg["acceptance_length"] == 2.0
    assert reconcile(agg, {"acceptance_length": 2.0})["agree"]
    assert not reconcile(agg, {"acceptance_length": 2.5})["agree"]


def test_requests_without_a_category_are_a_group_so_the_groups_add_up_to_the_counters():
    """Of three speculative requests only two name a category: the third is group "(none)", and the
    groups' accepted tokens and verify steps then sum to the level's counter deltas."""
    from loadgate.analysis.summary import NO_GROUP, group_figures
    from tests.recs import make_record

    def rec(i: int, cat: str | None, steps: int, acc: int) -> Any:
        return make_record(i=i, end_ns=10_000_000, chunk_tokens=[1 + acc // steps] * steps, category=cat,
                           spec={"source": "vllm", "verify_steps": steps, "accepted": acc})

    recs = [rec(0, "code", 4, 6), rec(1, "prose", 5, 2), rec(2, None, 3, 3)]
    counters = {"engine": "vllm", "drafts": 12.0, "accepted": 11.0, "draft_tokens": None}
    g = group_figures(recs, 0.01, counters)
    assert g is not None
    by = g["category"]["by"]
    assert sorted(by) == sorted(["code", "prose", NO_GROUP]) and by[NO_GROUP]["requests"] == 1
    au = g["category"]["acceptance_adds_up"]
    assert au["agree"] and au["values"]["accepted"] == [11, 11.0] and au["values"]["verify_steps"] == [12, 12.0]
    assert group_figures([rec(0, None, 2, 2)], 0.01, counters) is None  # no category at all: no groups


def test_the_groups_alpha_says_when_no_group_could_be_called_regressed_and_how_many_pairs_can():
    from loadgate.analysis.ab import group_power

    comps: dict[str, Any] = {"4": {}, "4 · category a": {}, "4 · category b": {}}
    five = {"alpha": 0.05, "decide_on": ["output_throughput", "ttft.p50", "itl.p50", "e2e.p50", "e2e.p99"]}
    line = group_power(comps, five, 5, 5)
    assert line is not None and "alpha 0.005 (0.05 over 5 deciding figures and 2 groups)" in line
    assert "smallest p-value of these runs is 0.0079" in line and line.endswith("ab.pairs: 6 can")
    assert group_power(comps, {"alpha": 0.05, "decide_on": ["ttft.p50"]}, 5, 5) is None  # 0.0079 < 0.025
    assert group_power({"4": {}}, five, 5, 5) is None  # no groups
