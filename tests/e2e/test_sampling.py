"""Sampling contracts (`exactness.sampling`) against the simulator, whose sampler is known.

With speculation on, the simulator samples for real: each draft is drawn from q (the target's
p sharpened) and judged by `speculative.sampling_rule`. The standard rejection rule emits exactly
p, so the distribution-preserving contract must pass; the argmax rule (keep a draft only if it is
p's argmax) is biased by a computable total-variation distance, so it must fail. A seeded request
is deterministic on the simulator unless `faults.ignore_seed` breaks it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from loadgate.cli import main
from loadgate.exactness.sampling import detectable_tv, holm, pooled_table
from loadgate.jsonutil import load_json
from tests.profiles import LAX_HEALTH

SIM = {"decode_step_us": 100, "decode_us_per_seq": 5, "prefill_us_per_token": 0.2}


def _check(tmp: Path, name: str, *, spec: dict[str, Any] | None = None, faults: dict[str, Any] | None = None,
           sampling: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], str]:
    sim: dict[str, Any] = {**SIM, "faults": faults or {}}
    if spec is not None:
        sim["speculative"] = {"method": "draft_model", "k": 4, **spec}
    doc = {"name": name, "target": {"endpoint": "embedded", "sim": sim},
           "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "load": {"concurrency": 1},
           "exactness": {"baseline": "sim-reference", "scenarios": {"solo": True},
                         "sampling": sampling if sampling is not None else
                         {"distribution_preserving": True, "samples": 300, "concurrency": 16}},
           "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": name}}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    code = main(["check", str(p)])
    return code, load_json(tmp / "out" / name / "exactness.json"), str(p)


def test_speculative_sampling_by_the_rejection_rule_preserves_the_distribution(tmp_path, capsys):
    code, ex, _ = _check(tmp_path, "ok", spec={"sampling_rule": "rejection"})
    assert code == 0 and ex["passed"], ex["reasons"]
    dp = ex["sampling"]["distribution_preserving"]
    assert dp["passed"] and len(dp["prefixes"]) == 2 and dp["verify_share"] == 1.0  # every 2nd token from a verify step
    assert 0.0 < dp["detectable_tv"] < 0.3
    sr = ex["sampling"]["seeded_replay"]
    assert sr["passed"] and sr["cases"] == 8 and "simulator takes a per-request seed" in sr["engine_seeds"]
    out = capsys.readouterr().out
    assert "seeded-replay at temperature 0.8: passed: 8 of 8 cases gave the same ids in all 2 sends" in out
    assert "300 samples a side per prefix detect, with probability >= 0.8, a shift toward the likeliest tokens" in out
    assert 0.0 < dp["detectable_shift_tv"] <= dp["detectable_tv"]
    att = load_json(tmp_path / "out" / "ok" / "attestation.json")
    assert att["sampling"]["distribution_preserving"]["passed"] is True


def test_the_argmax_rule_is_caught_as_another_distribution(tmp_path):
    code, ex, _ = _check(tmp_path, "bad", spec={"sampling_rule": "argmax"})
    assert code == 10
    dp = ex["sampling"]["distribution_preserving"]
    assert not dp["passed"] and any(p["rejected"] for p in dp["prefixes"])
    assert any(r.startswith("distribution-preserving: ") for r in ex["reasons"])
    assert not (tmp_path / "out" / "bad" / "attestation.json").exists()


def test_an_engine_that_ignores_seeds_fails_seeded_replay(tmp_path):
    code, ex, _ = _check(tmp_path, "noseed", faults={"ignore_seed": True}, sampling={"replay_cases": 4})
    assert code == 10
    sr = ex["sampling"]["seeded_replay"]
    assert not sr["passed"] and len(sr["differ"]) >= 3, sr  # 4 cases of up to 48 tokens at T 0.8
    assert any(r.startswith("seeded-replay: ") for r in ex["reasons"])


def test_a_baseline_without_samples_leaves_the_distribution_not_established(tmp_path, capsys):
    code, ex, path = _check(tmp_path, "plain", sampling={"seeded_replay": False})  # a baseline file, no samples
    assert code == 0
    baseline = next((tmp_path / "out" / "baselines").glob("*.json"))
    doc = yaml.safe_load(Path(path).read_text())
    doc["exactness"].update(baseline=str(baseline), sampling={"seeded_replay": False, "distribution_preserving": True})
    doc["output"]["run_id"] = "nosamples"
    doc["target"]["endpoint"] = "embedded"
    Path(path).write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    # the sim-reference baseline of the first check was captured without samples
    code = main(["check", path])
    out = capsys.readouterr().out
    assert code == 11 and "distribution-preserving: NOT ESTABLISHED: the baseline holds no samples" in out


def test_pooling_keeps_expected_counts_of_five_and_holm_steps_down():
    base, cand = Counter({"a": 60, "b": 30, "c": 4, "d": 3}), Counter({"a": 55, "b": 35, "c": 5, "e": 2})
    cats, table = pooled_table(base, cand)
    assert cats == ["a", "b", "other"] and table.tolist() == [[60, 30, 7], [55, 35, 7]]
    assert holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]
    assert holm([0.001, 0.03, 0.04], 0.05) == [True, False, False]  # 0.03 > 0.05 / 2 stops the descent


def test_the_stated_power_holds_for_a_difference_of_that_size():
    """Two distributions `detectable_tv` apart, sampled 400 times each, are told apart in at least
    80 % of 300 seeded trials (the bound is conservative: usually many more)."""
    n, level, df = 400, 0.01, 3
    delta = detectable_tv(n, n, df, level)
    p1 = np.array([0.4, 0.3, 0.2, 0.1])
    p2 = p1 + np.array([delta, -delta, 0.0, 0.0])
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(300):
        t = np.array([rng.multinomial(n, p1), rng.multinomial(n, p2)])
        hits += stats.chi2_contingency(t, correction=False).pvalue < level
    assert hits >= 0.8 * 300, (hits, delta)


def test_the_stated_shift_power_holds_for_a_shift_toward_the_likeliest_tokens_and_is_tighter():
    """Two first tokens, each with a spread of second tokens; the candidate moves a share of each
    block's mass to its likeliest second token, sized to the TV the shift figure states: caught in
    80 % of 300 seeded trials (as stated: not more, not less), though that TV is well below the
    any-shape figure. And `samples_needed` inverts it."""
    from loadgate.exactness.sampling import detectable_shift_tv, samples_needed, shift_ratio

    cats = [f"{a} {b}" for a in (1, 2) for b in range(5)]
    cond = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    p1 = np.concatenate([0.6 * cond, 0.4 * cond])
    n, level, df = 8000, 0.01, len(cats) - 1
    delta = detectable_shift_tv(cats, p1, n, n, df, level)
    r = shift_ratio(cats, p1, delta)
    assert r > 4.0 and delta < 0.95 * detectable_tv(n, n, df, level)
    s = delta / (1.0 - 0.3)  # the share of each block moved to its top: TV = s * sum_B (P_B - p_top)
    shift = np.concatenate([0.6 * (cond * (1 - s) + s * np.eye(5)[0]), 0.4 * (cond * (1 - s) + s * np.eye(5)[0])])
    assert abs(0.5 * np.abs(shift - p1).sum() - delta) < 1e-12
    rng = np.random.default_rng(11)
    hits = sum(stats.chi2_contingency(np.array([rng.multinomial(n, p1), rng.multinomial(n, shift)]),
                                      correction=False).pvalue < level for _ in range(300))
    assert 0.72 * 300 <= hits <= 0.88 * 300, (hits, delta)  # 80 %, within 3.5 standard errors
    need = samples_needed(delta, df, level, r)
    assert abs(need - n) <= 1 and detectable_tv(need, need, df, level, r=r) <= delta * (1 + 1e-9)


@pytest.mark.parametrize("rule", ["rejection", "argmax"])
def test_the_simulators_verify_step_emits_p_or_the_stated_bias(rule):
    """`verify_position` over 20,000 draws at one context: the rejection rule's emitted frequencies
    match p (chi-square), the argmax rule's match q[a] at the argmax plus (1 - q[a]) p."""
    from loadgate.config.simconfig import SimConfig
    from loadgate.sim.model import SimModel
    from loadgate.sim.speculative import argmax_rule_tv, draft_probs, verify_position

    model = SimModel(SimConfig())
    _, p = model.probs(model.context_hash([5, 6, 7, 8]), 0.8)
    p = p[:6] / p[:6].sum()  # the head of the distribution, so that counts are large
    q = draft_probs(p, 1.5)
    rng = np.random.default_rng(3)
    u = rng.random((20_000, 4))
    counts = np.bincount([verify_position(p, q, rule, *row[:3]) [0] for row in u], minlength=len(p))
    want = p if rule == "rejection" else q[0] * np.eye(len(p))[0] + (1 - q[0]) * p
    assert stats.chisquare(counts, want * counts.sum()).pvalue > 1e-3
    if rule == "argmax":
        assert abs(0.5 * np.abs(want - p).sum() - argmax_rule_tv(p, q)) < 1e-12


def test_samples_that_pool_into_one_category_tell_nothing_apart_and_are_not_established(tmp_path):
    """At temperature 0.02 the sampler is all but greedy: every sample is the same pair of tokens,
    one category after pooling, so no difference could be seen: not established (11), power 1.0."""
    code, ex, _ = _check(tmp_path, "flat", spec={"sampling_rule": "argmax"},
                         sampling={"temperature": 0.02, "seeded_replay": False, "distribution_preserving": True,
                                   "samples": 40, "prefixes": 1})
    dp = ex["sampling"]["distribution_preserving"]
    assert code == 11 and not dp["established"] and dp["prefixes"][0]["df"] == 0, dp
    assert dp["detectable_tv"] == 1.0 and "fewer than 2 categories" in dp["reason"]


def test_seeded_replay_without_a_short_case_is_not_established(tmp_path):
    corpus = tmp_path / "long.jsonl"
    corpus.write_text('{"id": "l", "kind": "completion", "prompt": "a b c", "max_tokens": 8, "tags": ["long"]}\n'
                      '{"id": "s", "kind": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,'
                      ' "tags": ["long"]}\n')
    doc_path = tmp_path / "p.yaml"
    doc = {"name": "p", "target": {"endpoint": "embedded", "sim": SIM},
           "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "load": {"concurrency": 1},
           "exactness": {"baseline": "sim-reference", "corpus": str(corpus), "scenarios": {"solo": False, "long": True},
                         "sampling": {"seeded_replay": True}},
           "health": LAX_HEALTH, "output": {"dir": str(tmp_path / "out"), "run_id": "p"}}
    doc_path.write_text(yaml.safe_dump(doc))
    assert main(["check", str(doc_path)]) == 11
    ex = load_json(tmp_path / "out" / "p" / "exactness.json")
    assert "sampling/seeded-replay: the corpus has no short case to replay" in ex["not_established"]


def test_validate_prints_what_the_samples_detect_and_the_samples_each_target_tv_needs(tmp_path, capsys):
    """Without baseline samples: the any-shape figure at an assumed 11 categories, and how to get
    better; with a baseline file holding samples: per prefix, at its own categories, both figures
    and the samples a side a shift of each target TV needs (those samples detect it as stated)."""
    from loadgate.exactness import baseline as bl
    from loadgate.exactness.sampling import detectable_shift_tv, pooled_table

    doc = {"name": "v", "target": {"endpoint": "embedded"},
           "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "exactness": {"baseline": "sim-reference", "sampling": {"distribution_preserving": True, "samples": 4000}}}
    p = tmp_path / "v.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "4000 samples a side detect any difference of TV >= 0.055 with probability >= 0.8, at an assumed 11 " in out
    rng = np.random.default_rng(3)
    labels = [f"{a} {b}" for a, b in zip(rng.choice(3, 3000, p=[0.5, 0.3, 0.2]),
                                          rng.choice(6, 3000, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05]), strict=True)]
    b = bl.Baseline(None, {"format": bl.FORMAT, "name": "v", "cases": {},
                           "sampling": {"prefixes": {"case-a": {"labels": labels}}}})
    b.doc["sha256"] = bl._content_hash(b.doc)
    doc["exactness"]["baseline"] = str(bl.save(b, tmp_path / "baselines"))
    p.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "  case-a: the baseline holds 3000 samples, not exactness.sampling.samples (4000): the check draws 3000" in out
    line = next(x for x in out.splitlines() if x.startswith("  case-a (the baseline's 18 categories, 3000 samples a side)"))
    need = int(re.search(r"TV 0.02: ([\d,]+)", line).group(1).replace(",", ""))
    counts = Counter(labels)
    cats, table = pooled_table(counts, counts)
    assert detectable_shift_tv(cats, table[0] / 3000, need, need, 17, 0.01 / 2) <= 0.02 * (1 + 1e-6)
    assert "detect a shift toward the likeliest tokens of TV >= " in line and "any difference of TV >= " in line


def test_the_shift_keeps_a_block_whose_top_absorbed_the_pooled_rest_and_stops_at_its_reach():
    """`pooled_table` names the largest category "a b+other" when the pool is too small to stand
    alone: it is still block a's top. A TV beyond what any such shift can make falls back to the
    any-shape bound."""
    from loadgate.exactness.sampling import detectable_shift_tv, shift_ratio, shift_reach

    probs = [0.9, 0.06, 0.03, 0.01]
    plain = shift_ratio(["1 1", "1 2", "1 3", "1 4"], probs, 0.01)
    assert shift_ratio(["1 1+other", "1 2", "1 3", "1 4"], probs, 0.01) == plain
    cats = ["1 1", "1 2", "2 1", "2 2"]
    peaked = [0.485, 0.015, 0.485, 0.015]
    assert shift_reach(cats, peaked) == pytest.approx(0.03)
    assert detectable_shift_tv(cats, peaked, 50, 50, 3, 0.01) == detectable_tv(50, 50, 3, 0.01)  # beyond 0.03
