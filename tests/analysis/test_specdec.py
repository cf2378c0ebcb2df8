"""Acceptance length from real vLLM counters and from per-request fields, one definition."""

from __future__ import annotations

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
