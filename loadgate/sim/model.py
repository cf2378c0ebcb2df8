"""The simulator's deterministic language model: a pure function from context to log-softmax.

Definition. The next-token distribution depends only on the last `WINDOW` tokens of the context
(left-padded with the non-token `vocab_size`), through the 64-bit polynomial hash
`h = sum(t_i * P**(WINDOW-1-i)) mod 2**64`, mixed with the configured seed (`x = mix64(h ^ key)`).
From `x` come, by further mixing:
  * near-tie flag: `unit(x) < near_tie_rate`;
  * the top-2 gap `g`: one of 2,048 levels uniform in (0.005, 0.25) nats for a near-tie,
    one of 2,048 levels uniform in (0.5, 3.0) otherwise;
  * a temperature level `tau` (16 levels, 1.2 .. 3.45) shaping the tail;
  * an EOS flag (probability 1/1024): `<|endoftext|>` becomes the argmax;
  * a rank order over three tiers, each in its own affine order (rank r of a tier of n tokens
    holds its token `(A*r + B) mod n`): first the word-like tokens (`vocab.word_like`: listed
    words, punctuation, whitespace runs), so greedy output reads as words; then the other
    printable tokens; then the remaining bytes and the specials. With the EOS flag, EOS and the
    rank-0 token swap places.
Logits by rank: 0 for rank 0, `-g` for rank 1, `-g - 0.2 - tau*log1p(r-2)` for rank r >= 2.
The log-softmax is `float32(logit - lse)` computed in float64, with `lse` taken from a table
built once (`log(1 + exp(-g) * (1 + S_tau))`, `S_tau` the `math.fsum` of the tail's exp terms).
So argmax, runner-up and their logprobs come from a few integer operations and table look-ups,
and the full vector (`full_logprobs`) gives bit-identical values for them.

Batch invariance: `dists` works on arrays with elementwise integer operations, table gathers and
one float64 subtraction per element; no reduction or matrix product spans rows, so a row's result
is the same bits whatever else is in the batch (tested). `ground_truth` evaluates a one-row batch.

Cost per engine decode step, measured on the 2-core development machine (Python 3.11, numpy 2.4,
vocab 4096, greedy, no logprobs): `dists` alone 4 us / 48 us / 105 us at batch 1 / 64 / 512;
the whole decode step (`dists` plus the engine's per-row Python: choose, append, close the step)
8 us / 145 us / 0.9 ms. `top_logprobs(n=2)` adds ~5 us a row; `full_logprobs` (only for sampling
and the ground truth) ~55 us a row. Inside a server under load (512 streams, the kernel's loopback
work on the same core) the same step measured 2-3 ms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgate.config.simconfig import SimConfig
from loadgate.sim.hashing import MASK64, hash_ints, mix64, mix64_np, unit, unit_np
from loadgate.sim.tokenizer import Tokenizer
from loadgate.sim.vocab import word_like

# Tokens of context the next-token function sees. 24 reaches past a chat template's closing tokens
# into the user's words, so different prompts continue differently; the hash rolls, so a wider
# window costs nothing per step.
WINDOW = 24
_P = 0x100000001B3
_P_TOP = pow(_P, WINDOW - 1, 1 << 64)
_GAP_LEVELS = 2048
_TAU_LEVELS = 16
_EOS_PER_1024 = 1
_SALT_SHAPE = 0x5851F42D4C957F2D
_SALT_ORDER = 0x14057B7EF767814F
_SALT_OTHER = 0x2545F4914F6CDD1D
_SALT_OTHER2 = 0x6A09E667F3BCC909


def roll_hash(h: int, leaving: int, entering: int) -> int:
    """The context hash after appending `entering`, where `leaving` is the token WINDOW places
    back (`ids[-WINDOW]` before the append, or the pad `vocab_size` if the context is shorter)."""
    return ((h - leaving * _P_TOP) * _P + entering) & MASK64


@dataclass(frozen=True)
class GroundTruth:
    """The model's verdict on one context: what greedy decoding picks and how close it was."""

    argmax: int
    runner_up: int
    gap: float  # float32(logprob[argmax]) - float32(logprob[runner_up]), in nats
    near_tie: bool
    logprobs: np.ndarray  # float32, shape (vocab_size,)


@dataclass
class Dists:
    """Next-token facts for a batch of contexts, one list entry per row (plain Python values)."""

    top1: list[int]
    top2: list[int]
    lp1: list[float]  # float32 values widened to float
    lp2: list[float]
    near: list[bool]
    hashes: Sequence[int]  # the context hashes the batch was computed from, for expansions


class SimModel:
    """Deterministic next-token model over the fixed tokenizer; see the module docstring."""

    def __init__(self, cfg: SimConfig, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer or Tokenizer(cfg.vocab_size)
        tk = self.tokenizer
        self.vocab_size = tk.vocab_size
        self.pad = tk.vocab_size
        self.eos_id = tk.eos_id
        self.near_tie_rate = cfg.near_tie_rate
        self._key = hash_ints(0x51AB, cfg.seed)
        plain_bytes = {9, 10, *range(32, 127)}
        first_special = self.vocab_size - len(tk.special_ids)
        plain = sorted(plain_bytes) + list(range(256, first_special))
        words = [t for t in plain if word_like(tk.token_bytes(t))]
        rest = [t for t in plain if not word_like(tk.token_bytes(t))]
        other = [b for b in range(256) if b not in plain_bytes] + sorted(tk.special_ids)
        self._tiers = [np.array(t, dtype=np.int64) for t in (words, rest, other)]
        self._units = [np.array([a for a in range(1, len(t)) if math.gcd(a, len(t)) == 1] or [1], dtype=np.uint64)
                       for t in (words, rest, other)]
        self._plain, self._n, self._units_n = self._tiers[0], len(words), self._units[0]
        half = (np.arange(_GAP_LEVELS, dtype=np.float64) + 0.5) / _GAP_LEVELS
        self._gaps = np.concatenate([0.005 + half * 0.245, 0.5 + half * 2.5])
        taus = 1.2 + 0.15 * np.arange(_TAU_LEVELS, dtype=np.float64)
        log_tail = np.array([0.0, 0.0] + [math.log1p(r) for r in range(self.vocab_size - 2)])
        self._depth = 0.2 + taus[:, None] * log_tail[None, :]  # (tau, rank); ranks 0, 1 unused
        self._depth[:, :2] = 0.0
        tails = [math.fsum(math.exp(-d) for d in row[2:].tolist()) for row in self._depth]
        exp_neg_gaps = [math.exp(-g) for g in self._gaps.tolist()]  # the same for every tau: once
        self._lse = np.array([[math.log(1.0 + e * (1.0 + s)) for e in exp_neg_gaps]
                              for s in tails])  # (tau, gap level)

    # ---- context hashing -------------------------------------------------------------------

    def context_hash(self, ids: Sequence[int]) -> int:
        """Polynomial hash of the last WINDOW tokens of `ids`, left-padded with `vocab_size`."""
        tail = list(ids[-WINDOW:])
        window = [self.pad] * (WINDOW - len(tail)) + tail
        h = 0
        for t in window:
            h = (h * _P + t) & MASK64
        return h


    # ---- batched fast path -----------------------------------------------------------------

    def _shape(self, hashes: Sequence[int]) -> tuple[np.ndarray, ...]:
        x = mix64_np(np.array(hashes, dtype=np.uint64) ^ np.uint64(self._key))
        near = unit_np(x) < self.near_tie_rate
        y = mix64_np(x ^ np.uint64(_SALT_SHAPE))
        gidx = (y & np.uint64(_GAP_LEVELS - 1)).astype(np.int64) + np.where(near, 0, _GAP_LEVELS)
        tau = ((y >> np.uint64(12)) & np.uint64(_TAU_LEVELS - 1)).astype(np.int64)
        eos = ((y >> np.uint64(16)) & np.uint64(1023)) < np.uint64(_EOS_PER_1024)
        z = mix64_np(x ^ np.uint64(_SALT_ORDER))
        b = (z % np.uint64(self._n)).astype(np.int64)
        a = self._units_n[((z >> np.uint64(32)) % np.uint64(len(self._units_n))).astype(np.int64)]
        return x, near, gidx, tau, eos, a.astype(np.int64), b

    def dists(self, hashes: Sequence[int]) -> Dists:
        """Argmax, runner-up and their float32 logprobs for each context hash (batch-invariant).

        Batches of up to 8 rows take a plain-Python path (numpy's per-call overhead dominates
        there); it performs the same integer operations and the same float64 subtraction before
        rounding to float32, so it gives the same bits (tested against the array path)."""
        if len(hashes) <= 8:
            return self._dists_small(hashes)
        x, near, gidx, tau, eos, a, b = self._shape(hashes)
        top1 = np.where(eos, self.eos_id, self._plain[b])
        top2 = self._plain[(a + b) % self._n]
        lse = self._lse[tau, gidx]
        lp1 = (0.0 - lse).astype(np.float32)
        lp2 = ((-self._gaps[gidx]) - lse).astype(np.float32)
        return Dists(top1.tolist(), top2.tolist(), lp1.astype(np.float64).tolist(),
                     lp2.astype(np.float64).tolist(), near.tolist(), hashes)

    def _dists_small(self, hashes: Sequence[int]) -> Dists:
        out = Dists([], [], [], [], [], hashes)
        plain, n = self._plain, self._n
        for h in hashes:
            x, gidx, tau, eos, a, b = self._row(h)
            lse = float(self._lse[tau, gidx])
            out.top1.append(self.eos_id if eos else int(plain[b]))
            out.top2.append(int(plain[(a + b) % n]))
            out.lp1.append(float(np.float32(0.0 - lse)))
            out.lp2.append(float(np.float32((-float(self._gaps[gidx])) - lse)))
            out.near.append(unit(x) < self.near_tie_rate)
        return out

    # ---- per-row expansions ----------------------------------------------------------------

    def _row(self, h: int) -> tuple[int, int, int, bool, int, int]:
        """`_shape` for one hash in plain integer arithmetic (same bits, no numpy call overhead)."""
        x = mix64(h ^ self._key)
        near = unit(x) < self.near_tie_rate
        y = mix64(x ^ _SALT_SHAPE)
        gidx = (y & (_GAP_LEVELS - 1)) + (0 if near else _GAP_LEVELS)
        tau = (y >> 12) & (_TAU_LEVELS - 1)
        eos = ((y >> 16) & 1023) < _EOS_PER_1024
        z = mix64(x ^ _SALT_ORDER)
        a = int(self._units_n[(z >> 32) % len(self._units_n)])
        return x, gidx, tau, eos, a, z % self._n

    def top_logprobs(self, dists: Dists, row: int, n: int) -> list[tuple[int, float]]:
        """The `n` most likely tokens of `row` with their float32 logprobs, best first."""
        _, gidx, tau, _, a, b = self._row(dists.hashes[row])
        out = [(dists.top1[row], dists.lp1[row])]
        neg_g = -float(self._gaps[gidx])
        lse = float(self._lse[tau, gidx])
        depth = self._depth[tau]
        for r in range(1, min(n, self.vocab_size)):
            tok = int(self._plain[(a * r + b) % self._n]) if r < self._n else self._other_token(r, row, dists)
            out.append((tok, float(np.float32((neg_g - float(depth[r])) - lse))))
        return out[:n]

    def _other_token(self, r: int, row: int, dists: Dists) -> int:  # pragma: no cover - n > 20
        return int(self._ranked_tokens(dists.hashes[row])[r])

    def _ranked_tokens(self, h: int) -> np.ndarray:
        """Every token id in rank order: each tier in its own affine order, tiers one after the
        other (word-like, other plain, the rest); with the EOS flag, EOS swaps with rank 0."""
        x, _, _, eos, a, b = self._row(h)
        orders = [(a, b)]
        for k, salt in ((1, _SALT_OTHER), (2, _SALT_OTHER2)):
            m = mix64(x ^ salt)
            units = self._units[k]
            orders.append((int(units[(m >> 32) % len(units)]), m % len(self._tiers[k])))
        parts = [tier[(mul * np.arange(len(tier), dtype=np.int64) + off) % len(tier)]
                 for tier, (mul, off) in zip(self._tiers, orders, strict=True)]
        ranked = np.concatenate(parts)
        if eos:
            j = int(np.flatnonzero(ranked == self.eos_id)[0])
            ranked[0], ranked[j] = ranked[j], ranked[0]
        return ranked

    def _ranked_logprobs(self, h: int) -> np.ndarray:
        _, gidx, tau, _, _, _ = self._row(h)
        logits = (-self._gaps[gidx]) - self._depth[tau]
        logits[0] = 0.0
        out: np.ndarray = (logits - self._lse[tau, gidx]).astype(np.float32)
        return out

    def full_logprobs(self, dists: Dists, row: int) -> np.ndarray:
        """The whole float32 log-softmax vector of `row`, indexed by token id."""
        h = dists.hashes[row]
        out = np.empty(self.vocab_size, dtype=np.float32)
        out[self._ranked_tokens(h)] = self._ranked_logprobs(h)
        return out

    def sample(self, dists: Dists, row: int, temperature: float, u: float) -> tuple[int, float]:
        """Sample from softmax(logits / temperature) with the uniform `u` in [0, 1) (inverse CDF
        over tokens in rank order); returns the token and its unscaled float32 logprob."""
        h = dists.hashes[row]
        ranked = self._ranked_tokens(h)
        lps = self._ranked_logprobs(h)
        scaled = lps.astype(np.float64) / temperature
        cdf = np.cumsum(np.exp(scaled - scaled[0]))
        idx = min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)
        return int(ranked[idx]), float(lps[idx])

    def probs(self, h: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
        """(token ids in rank order, softmax(logits / temperature) over them) for context hash `h`:
        the distribution `sample` draws from, in float64."""
        scaled = self._ranked_logprobs(h).astype(np.float64) / temperature
        w = np.exp(scaled - scaled[0])
        return self._ranked_tokens(h), w / w.sum()

    def logprob_of(self, h: int, token: int) -> float:
        """The float32 logprob of `token` after context hash `h` (what the engine reports for it)."""
        ranked = self._ranked_tokens(h)
        return float(self._ranked_logprobs(h)[int(np.flatnonzero(ranked == token)[0])])

    def ground_truth(self, context: Sequence[int]) -> GroundTruth:
        """Argmax, runner-up, top-2 gap, near-tie flag and full log-softmax for `context`."""
        d = self.dists([self.context_hash(context)])
        lp = self.full_logprobs(d, 0)
        gap = float(np.float32(d.lp1[0])) - float(np.float32(d.lp2[0]))
        return GroundTruth(d.top1[0], d.top2[0], gap, d.near[0], lp)
