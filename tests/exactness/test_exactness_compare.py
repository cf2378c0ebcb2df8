"""First divergence, ULP distances, near-tie gaps, verdicts and contract tiers on known outputs."""

from __future__ import annotations

import numpy as np
import pytest

from loadgate.config.contract import Contract
from loadgate.exactness.compare import SeqOutput, compare, ulp_distance
from loadgate.exactness.contract import passes, verdict


def out(ids, lps=None, top=None, fr="length", ph=()):
    return SeqOutput(tuple(ids), None if lps is None else tuple(lps), top, fr, frozenset(ph))


def nudge(x, k):
    v = np.float32(x)
    for _ in range(abs(k)):
        v = np.nextafter(v, np.float32(np.inf if k > 0 else -np.inf), dtype=np.float32)
    return float(v)


def test_ulp_distance_counts_float32_steps_across_zero_and_signs():
    a = np.array([-1.5, 0.0, -0.0, 1e-45])
    b = np.array([nudge(-1.5, 3), -0.0, 1e-45, -1e-45])
    assert ulp_distance(a, b).tolist() == [3, 1, 2, 3]


def test_identical_outputs_are_identical_and_pass_bit_exact():
    lp = [-0.5, -1.25, -2.0]
    c = compare(out([1, 2, 3], lp), out([1, 2, 3], list(lp)))
    assert c.first_divergence is None and c.max_ulp == 0 and c.ids_only_positions == 0
    v = verdict(c, 0.3)
    assert v == "identical" and passes(c, v, Contract("bit-exact")) == (True, None)


def test_logprobs_off_by_ulps_are_equivalent_pass_token_exact_fail_bit_exact():
    c = compare(out([1, 2, 3], [-0.5, -1.25, -2.0]), out([1, 2, 3], [-0.5, nudge(-1.25, 4), -2.0]))
    v = verdict(c, 0.3)
    assert v == "equivalent" and c.max_ulp == 4 and c.first_ulp_position == 1
    assert not passes(c, v, Contract("bit-exact"))[0]
    assert passes(c, v, Contract("token-exact"))[0]
    assert passes(c, v, Contract("logprob-tolerance", tolerance=1e-5))[0]
    assert not passes(c, v, Contract("logprob-tolerance", tolerance=1e-9))[0]


def test_first_divergence_reports_both_tokens_and_the_baseline_gap():
    top = ((( 1, -0.1), (9, -3.0)), ((2, -0.70), (7, -0.80)), ((3, -0.2), (8, -2.0)))
    c = compare(out([1, 2, 3], [-0.1, -0.7, -0.2], top), out([1, 7, 4], [-0.1, -0.8, -0.3]))
    assert (c.first_divergence, c.base_token, c.cand_token) == (1, 2, 7)
    assert c.base_gap == pytest.approx(0.1, abs=1e-6) and c.positions_compared == 1
    v = verdict(c, 0.3)
    assert v == "near-tie divergence"
    assert passes(c, v, Contract("near-tie-tolerant", gap=0.3))[0]
    assert not passes(c, v, Contract("near-tie-tolerant", gap=0.05))[0]
    assert not passes(c, v, Contract("token-exact"))[0]


def test_a_prefix_diverges_at_the_shorter_length():
    c = compare(out([1, 2, 3]), out([1, 2]))
    assert (c.first_divergence, c.base_token, c.cand_token) == (2, 3, None)
    assert verdict(c, 0.3) == "divergence"


def test_different_finish_reason_is_not_identical():
    c = compare(out([1], [-1.0], fr="stop"), out([1], [-1.0], fr="length"))
    assert verdict(c, 0.3) == "divergence"


def test_placeholder_positions_are_compared_on_ids_only_and_block_bit_exact():
    base = out([1, 2, 3, 4], [-0.5, -0.6, -0.7, -0.8])
    cand = out([1, 2, 3, 4], [-0.5, 0.0, 0.0, -0.8], ph={1, 2})  # llama-server draft-accepted tokens
    c = compare(base, cand)
    assert (c.logprob_positions, c.ids_only_positions, c.max_ulp) == (2, 2, 0)
    v = verdict(c, 0.3)
    assert v == "identical"
    ok, why = passes(c, v, Contract("bit-exact"))
    assert not ok and "2 positions" in why
    assert passes(c, v, Contract("token-exact"))[0]
    # a tolerance on logprobs cannot be met where there is no logprob either
    ok, why = passes(c, v, Contract("logprob-tolerance", tolerance=1.0))
    assert not ok and "2 positions had no real logprob" in why


def test_null_equals_null_and_differs_from_a_value():
    assert compare(out([1, 2], [None, -1.0]), out([1, 2], [None, -1.0])).ulp_nonzero == 0
    c = compare(out([1, 2], [None, -1.0]), out([1, 2], [-5.0, -1.0]))
    assert c.ulp_nonzero == 1 and c.max_abs_logprob_diff == float("inf")


def test_contract_words_name_the_tier_and_numbers():
    assert "0 float32 ULP" in Contract("bit-exact").words()
    assert "0.25 nats" in Contract("near-tie-tolerant", gap=0.25).words()
