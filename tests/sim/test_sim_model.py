"""The simulated model and tokenizer: fixed, reversible, reproducible, batch-invariant, with
near-ties exactly where and as often as configured."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.sim.divergence import jitter_ulps
from loadgate.sim.model import WINDOW, SimModel, roll_hash
from loadgate.sim.tokenizer import Tokenizer
from loadgate.sim.vocab import build_vocab
from tests.sim.helpers import fast_cfg, ulp

TK = Tokenizer(4096)
MODEL = SimModel(fast_cfg(), TK)


def _contexts(n: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4096) for _ in range(rng.randrange(1, 20))] for _ in range(n)]


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_decode_of_encode_is_identity_for_any_text(text: str) -> None:
    assert TK.decode(TK.encode(text)) == text
    assert TK.decode(TK.encode(text, parse_special=False)) == text


def test_vocabulary_is_fixed_and_has_bytes_merges_and_specials() -> None:
    v = build_vocab(4096)
    assert len(v) == 4096 and v == build_vocab(4096) and len(set(v)) == 4096
    assert v[:256] == [bytes([b]) for b in range(256)]
    assert v[-3:] == [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"]
    assert build_vocab(65536)[:4093] == v[:4093]  # a larger vocabulary extends the smaller one
    assert TK.encode("<|im_start|>user") == [TK.im_start_id, *TK.encode("user")]
    assert len(TK.encode("the quick function")) < len("the quick function") / 2


def test_same_context_gives_the_same_bits_and_another_seed_does_not() -> None:
    other = SimModel(fast_cfg(seed=1), TK)
    again = SimModel(fast_cfg(), Tokenizer(4096))
    differ = 0
    for ctx in _contexts(50):
        a, b = MODEL.ground_truth(ctx), again.ground_truth(ctx)
        assert a.argmax == b.argmax and a.logprobs.tobytes() == b.logprobs.tobytes()
        differ += other.ground_truth(ctx).argmax != a.argmax
    assert differ > 40


def test_logits_of_a_row_do_not_depend_on_the_rest_of_the_batch() -> None:
    ctxs = _contexts(600, seed=2)
    hashes = [MODEL.context_hash(c) for c in ctxs]
    full = MODEL.dists(hashes)
    for batch in (1, 2, 7, 8, 9, 33, 64, 512):  # up to 8 rows take the plain-Python path
        part = MODEL.dists(hashes[:batch])
        assert part.top1 == full.top1[:batch] and part.top2 == full.top2[:batch]
        assert np.array_equal(np.array(part.lp1, np.float32).view(np.uint32),
                              np.array(full.lp1[:batch], np.float32).view(np.uint32))
        assert part.lp2 == full.lp2[:batch] and part.near == full.near[:batch]
    for row in (0, 5, 300):
        alone = MODEL.dists([hashes[row]])
        assert MODEL.full_logprobs(alone, 0).tobytes() == MODEL.full_logprobs(full, row).tobytes()
        assert MODEL.top_logprobs(alone, 0, 5) == MODEL.top_logprobs(full, row, 5)


def test_fast_path_argmax_runner_up_and_logprobs_equal_the_full_vector() -> None:
    ctxs = _contexts(300, seed=3)
    d = MODEL.dists([MODEL.context_hash(c) for c in ctxs])
    for r in range(len(ctxs)):
        lp = MODEL.full_logprobs(d, r)
        order = np.argsort(-lp, kind="stable")
        assert (order[0], order[1]) == (d.top1[r], d.top2[r])
        assert lp[d.top1[r]] == np.float32(d.lp1[r]) and lp[d.top2[r]] == np.float32(d.lp2[r])
        assert abs(np.exp(lp.astype(np.float64)).sum() - 1.0) < 1e-4
        assert [t for t, _ in MODEL.top_logprobs(d, r, 6)] == list(order[:6])


def test_near_ties_occur_at_the_configured_rate_with_gaps_below_and_above_the_bounds() -> None:
    for rate in (0.05, 0.3):
        model = SimModel(fast_cfg(near_tie_rate=rate), TK)
        gaps = [(g.near_tie, g.gap) for g in (model.ground_truth(c) for c in _contexts(4000, seed=4))]
        near = [g for n, g in gaps if n]
        far = [g for n, g in gaps if not n]
        assert abs(len(near) / len(gaps) - rate) < 0.025
        assert max(near) < 0.3 and min(near) > 0.0
        assert min(far) >= 0.5


def test_eos_is_the_argmax_rarely() -> None:
    tops = MODEL.dists([MODEL.context_hash(c) for c in _contexts(20000, seed=5)]).top1
    share = tops.count(TK.eos_id) / len(tops)
    assert 0.0002 < share < 0.003


def test_rolling_hash_equals_the_hash_of_the_window() -> None:
    ids = list(range(3, 40))
    h = MODEL.context_hash(ids[:2])
    for k in range(2, len(ids)):
        leaving = ids[k - WINDOW] if k >= WINDOW else MODEL.pad
        h = roll_hash(h, leaving, ids[k])
        assert h == MODEL.context_hash(ids[:k + 1])


def test_sampling_is_reproducible_and_follows_the_distribution() -> None:
    d = MODEL.dists([MODEL.context_hash([1, 2, 3])])
    draws = [MODEL.sample(d, 0, 1.0, u / 2000) for u in range(2000)]
    assert draws == [MODEL.sample(d, 0, 1.0, u / 2000) for u in range(2000)]
    p_top = sum(t == d.top1[0] for t, _ in draws) / len(draws)
    assert abs(p_top - np.exp(d.lp1[0])) < 0.02
    lp = MODEL.full_logprobs(d, 0)
    assert all(lp[t] == np.float32(v) for t, v in draws)


@given(st.floats(min_value=-50.0, max_value=0.0, width=32), st.integers(min_value=0, max_value=2000))
@settings(max_examples=200, deadline=None)
def test_logprob_jitter_moves_by_exactly_n_float32_ulps(x: float, n: int) -> None:
    y = jitter_ulps(x, n)
    # loadgate's comparison counts -0.0 as one float32 step below +0.0; jitter from 0.0 skips it
    assert ulp(x, y) == n + (str(x) == "0.0" and n > 0) and y <= x
    if n <= 5:
        v = np.float32(x)
        for _ in range(n):
            v = np.nextafter(v, np.float32(-np.inf))
        assert np.float32(y) == v or (x == 0.0 and n == 0)
