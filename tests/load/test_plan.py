"""The plan is pure and reproducible: same profile, seed and pool give the same requests."""

from __future__ import annotations

import re

import numpy as np
import pytest

from loadgate.config.profile import Distribution, Load, MixtureComponent, Profile, SharedPrefix, Workload
from loadgate.load.plan import arrival_offsets_ns, build_plan
from loadgate.load.workload.lengths import draw_lengths

POOL = list(range(300, 1300))


def prof(seed=1, warm=0, **w):
    return Profile(seed=seed, workload=Workload(**({"requests": 50} | w)), load=Load(concurrency=4, warmup_requests=warm))


def test_same_seed_same_bytes_and_other_seed_differs():
    a, b, c = list(build_plan(prof(), POOL)), list(build_plan(prof(), POOL)), list(build_plan(prof(seed=2), POOL))
    assert a == b and a != c


def test_warmup_count_never_changes_the_measured_requests():
    m0 = [r for r in build_plan(prof(warm=0), POOL) if not r.warmup]
    m5 = [r for r in build_plan(prof(warm=5), POOL) if not r.warmup]
    assert [(r.prompt_ids, r.output_len) for r in m0] == [(r.prompt_ids, r.output_len) for r in m5]
    assert [r.i for r in build_plan(prof(warm=5), POOL)][:6] == [0, 1, 2, 3, 4, 5]


def test_prompt_lengths_are_exact_and_ids_come_from_the_pool():
    p = build_plan(prof(input_len=Distribution(dist="uniform", min=5, max=9)), POOL)
    assert all(5 <= len(r.prompt_ids) <= 9 for r in p)
    assert set().union(*(r.prompt_ids for r in p)) <= set(POOL)


def test_shared_prefix_groups():
    p = build_plan(prof(shared_prefix=SharedPrefix(groups=2, prefix_len=8),
                        input_len=Distribution(dist="fixed", value=20)), POOL)
    assert p[0].prompt_ids[:8] == p[2].prompt_ids[:8] != p[1].prompt_ids[:8]


@pytest.mark.parametrize("d,check", [
    (Distribution(dist="normal", mean=200, std=20, min=150, max=260), lambda x: 150 <= x.min() and x.max() <= 260 and abs(x.mean() - 200) < 3),
    (Distribution(dist="lognormal", mean=300, std=150), lambda x: abs(x.mean() - 300) < 15 and abs(x.std() - 150) < 20),
    (Distribution(dist="mixture", components=(MixtureComponent(3, Distribution(dist="fixed", value=10)),
                                              MixtureComponent(1, Distribution(dist="fixed", value=1000)))),
     lambda x: set(np.unique(x)) == {10, 1000} and abs((x == 10).mean() - 0.75) < 0.03),
])
def test_length_distributions(d, check, tmp_path):
    x = draw_lengths(d, 4000, np.random.default_rng(0), tmp_path)
    assert x.dtype == np.int64 and (x >= 1).all() and check(x)


def test_empirical_histogram_and_cdf_files(tmp_path):
    (tmp_path / "h.csv").write_text("length,weight\n10,1\n20,3\n")
    (tmp_path / "c.csv").write_text("length,cdf\n10,0.25\n20,1.0\n")
    for name in ("h.csv", "c.csv"):
        x = draw_lengths(Distribution(dist="empirical", file=name), 4000, np.random.default_rng(0), tmp_path)
        assert set(np.unique(x)) == {10, 20} and abs((x == 20).mean() - 0.75) < 0.03


def test_poisson_and_gamma_arrivals_have_the_stated_mean_rate():
    for arrival, b in (("poisson", 1.0), ("gamma", 0.5), ("constant", 1.0)):
        off = arrival_offsets_ns(Load(rate=20.0, arrival=arrival, burstiness=b), 4001, np.random.default_rng(3))
        assert off[0] == 0 and off == sorted(off)
        assert abs(4000 / (off[-1] / 1e9) - 20.0) < 1.5


@pytest.mark.parametrize("line, words", [
    ('{"prompt_ids": "abc", "output_len": 4}', "trace.jsonl:3: prompt_ids: expected a non-empty list"),
    ('{"input_len": -3, "output_len": 4}', "trace.jsonl:3: input_len: expected an integer >= 1, got -3"),
    ('{"messages": "hi", "output_len": 4}', "trace.jsonl:3: messages: expected a list"),
    ('{"input_len": 4}', "trace.jsonl:3: needs output_len"),
    ('[1, 2]', "trace.jsonl:3: expected a JSON object"),
])
def test_every_trace_line_is_checked_before_anything_is_sent(tmp_path, line, words):
    """Line numbers count blank lines; the bad line is found when the plan is built, not mid-run."""
    from loadgate.errors import UsageError

    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"input_len": 8, "output_len": 4}\n\n' + line + "\n")
    with pytest.raises(UsageError, match=re.escape(words)):
        build_plan(prof(requests=2, trace=str(trace)), POOL)


def test_a_text_trace_has_no_planned_prompt_count_and_is_not_a_mismatch():
    from loadgate.analysis.summary import token_check
    from tests.recs import make_record

    fields = {"prompt_tokens": 5, "completion_tokens": 4, "output_tokens_planned": 4, "chunk_tokens": [4],
              "chunk_ns": [1_000]}
    tc = token_check([make_record(**fields)], 0.0)
    assert tc.ok and tc.prompt_mismatches == 0 and tc.prompt_unverified == 1
    assert not token_check([make_record(**fields, prompt_tokens_planned=6)], 0.0).ok


def test_each_round_has_its_own_prompts_with_the_same_lengths_and_shared_prefixes():
    """`workload.cache: fresh` (the default): a sweep level or an A/B pair is a round with other
    token ids, so no round replays prompts an earlier one left in the engine's prefix cache;
    lengths, arrivals and the declared shared prefixes stay; round 0 is the plan without rounds."""
    shared = SharedPrefix(groups=2, prefix_len=8)
    p = prof(warm=3, input_len=Distribution(dist="uniform", min=20, max=40), shared_prefix=shared)
    r0, r0b, r1, r2 = (list(build_plan(p, POOL, k)) for k in (0, 0, 1, 2))
    assert r0 == r0b == list(build_plan(p, POOL))
    for other in (r1, r2):
        assert [len(a.prompt_ids) for a in other] == [len(a.prompt_ids) for a in r0]
        assert [a.output_len for a in other] == [a.output_len for a in r0]
        assert [a.prompt_ids[:8] for a in other] == [a.prompt_ids[:8] for a in r0]  # the declared prefixes
        assert sum(a.prompt_ids[8:] == b.prompt_ids[8:] for a, b in zip(other, r0, strict=True)) == 0
    assert all(a.prompt_ids[8:] != b.prompt_ids[8:] for a, b in zip(r1, r2, strict=True))
    # warm: the same prompts in every round, on purpose
    warm = prof(warm=3, cache="warm")
    assert list(build_plan(warm, POOL, 5)) == list(build_plan(warm, POOL, 0))


def test_a_length_only_trace_draws_fresh_ids_per_round_and_a_text_trace_stays(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text('{"input_len": 12, "output_len": 4}\n{"prompt": "hello there", "output_len": 4}\n')
    p = Profile(seed=1, workload=Workload(requests=2, trace=str(t)), load=Load(concurrency=1))
    a, b = build_plan(p, POOL, 0), build_plan(p, POOL, 1)
    assert len(a[0].prompt_ids) == len(b[0].prompt_ids) == 12 and a[0].prompt_ids != b[0].prompt_ids
    assert a[1].prompt_text == b[1].prompt_text == "hello there"


def test_the_window_sends_built_bodies_without_drawing_their_prompts_again(monkeypatch):
    """Once a request's body is built before the phase, the window takes `Plan.light`: what the record
    needs (lengths, offsets, warmup) without the numpy draw of its ids; a request without a built body
    is the whole `plan[k]`, and no body can be built from a light one."""
    from loadgate.load import plan as plan_mod
    from loadgate.load.target import LiveTarget, TargetSpec, body_for
    from loadgate.load.workers import prebuild, sendable

    p = build_plan(Profile(seed=3, workload=Workload(requests=12, shared_prefix=SharedPrefix(groups=2, prefix_len=4),
                                                     input_len=Distribution(dist="uniform", min=2, max=30)),
                           load=Load(rate=5.0, warmup_requests=3)), POOL)
    t = LiveTarget(TargetSpec("http://127.0.0.1:1", "openai-completions", "m", 1.0), session=None)  # type: ignore[arg-type]
    t.bodies = prebuild(t, p, [k for k in range(len(p)) if k != 7])
    draws = []
    real = plan_mod._Requests.prompt
    monkeypatch.setattr(plan_mod._Requests, "prompt", lambda self, k: draws.append(k) or real(self, k))
    sent = [sendable(t, p, k) for k in range(len(p))]
    assert draws == [7 - 3]  # only the request whose body was not built (measured request 4)
    full = [p[k] for k in range(len(p))]
    for s, f in zip(sent, full, strict=True):
        assert (s.i, s.warmup, s.prompt_len, s.output_len, s.intended_offset_ns, s.counted_len) == \
               (f.i, f.warmup, f.prompt_len, f.output_len, f.intended_offset_ns, f.counted_len)
    assert sent[7] == full[7] and sent[7].prompt_ids is not None and sent[0].prompt_ids is None
    assert body_for(t, sent[7]) == body_for(t, full[7])
    with pytest.raises(ValueError, match="without its prompt"):
        body_for(t, sent[0])


def test_a_trace_request_with_a_built_body_is_sent_without_drawing_its_tail(tmp_path, monkeypatch):
    """A trace line that gives a length (and hash blocks) is drawn only for its body: `Plan.light` keeps
    its count, category and offset; lines with their own ids or text come as they are."""
    import numpy as np

    from loadgate.load.target import LiveTarget, TargetSpec
    from loadgate.load.workers import prebuild, sendable

    t = tmp_path / "t.jsonl"
    t.write_text('{"input_len": 12, "output_len": 4, "category": "a", "hash_ids": [1]}\n'
                 '{"prompt_ids": [5, 6, 7], "output_len": 3}\n{"prompt": "hello there", "output_len": 4}\n')
    p = build_plan(Profile(seed=1, workload=Workload(requests=3, trace=str(t)), load=Load(rate=2.0)), POOL)
    target = LiveTarget(TargetSpec("http://127.0.0.1:1", "openai-completions", "m", 1.0), session=None)  # type: ignore[arg-type]
    target.bodies = prebuild(target, p, range(len(p)))
    draws = []
    real = np.random.default_rng
    monkeypatch.setattr(np.random, "default_rng", lambda *a, **k: draws.append(a) or real(*a, **k))
    sent = [sendable(target, p, k) for k in range(len(p))]
    assert draws == []
    assert [(s.prompt_len, s.output_len, s.category, s.intended_offset_ns) for s in sent] == \
           [(f.prompt_len, f.output_len, f.category, f.intended_offset_ns) for f in (p[k] for k in range(len(p)))]
    assert sent[0].prompt_ids is None and sent[1].prompt_ids == (5, 6, 7) and sent[2].prompt_text == "hello there"
