"""Speculative decoding: how many drafts a verify step accepts, and the per-request statistics.

Definitions (the simulator's, stated once; `tests/sim/test_sim_speculative.py` checks them):
  * The prefill step produces the first output token. It is not a verify step and counts in no
    speculative statistic.
  * With speculation on, every later engine step of a sequence is a verify step. It proposes
    `k_eff = min(k, remaining - 1)` draft tokens (`remaining` = max_tokens - tokens emitted so far),
    so a step never runs past max_tokens. For a greedy request, position i (0-based) is accepted
    with probability `acceptance[min(i, len-1)]` given all earlier positions were; the first
    rejection ends the run (a sampled request's acceptance comes from its rule instead, below).
    The draws come from a hash of (seed, the sequence's context hash, its output length), so the
    same request is chunked the same way on every run.
  * The step emits the accepted tokens plus one bonus token, as one chunk. Accepted tokens are the
    target's own greedy tokens. If the sequence finishes inside the step (EOS, stop string or stop
    token) the tokens after it are dropped and the step counts `accepted = emitted - 1`.
  * Hence, per request: completion_tokens = 1 + sum over verify steps of (accepted + 1), and
      vLLM   mean_acceptance_length = 1 + accepted / num_spec_steps
                                    = (completion_tokens - 1) / num_spec_steps
             draft_acceptance_rate  = accepted / num_draft_tokens
      SGLang spec_accept_length     = completion_tokens / spec_verify_ct   (prefill token included)
    The Prometheus counters add, per verify step and sequence: drafts +1, draft_tokens +k_eff,
    accepted +accepted, accepted_per_pos[i] +1 for each accepted position i.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgate.config.simconfig import SpeculativeConfig
from loadgate.sim.hashing import hash_ints, unit


def draw_accepted(cfg: SpeculativeConfig, seed: int, context_hash: int, n_out: int, k_eff: int) -> int:
    """Number of the `k_eff` proposed drafts that the verify step accepts (see module docstring)."""
    acc = cfg.acceptance
    m = 0
    while m < k_eff:
        p = acc[min(m, len(acc) - 1)]
        if unit(hash_ints(0x5BEC, seed, context_hash, n_out, m)) >= p:
            break
        m += 1
    return m


def draft_probs(p: np.ndarray, sharpness: float) -> np.ndarray:
    """The draft distribution q of a sampled request: the target's p sharpened, q ~ p**s."""
    w = np.power(p, sharpness)
    q: np.ndarray = w / w.sum()
    return q


def draw(probs: np.ndarray, u: float) -> int:
    """Index drawn from `probs` with the uniform `u` in [0, 1) (inverse CDF)."""
    cdf = np.cumsum(probs)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)


def verify_position(p: np.ndarray, q: np.ndarray, rule: str, u_draft: float, u_accept: float,
                    u_resample: float, wrong_share: float = 1.0, u_rule: float = 0.0) -> tuple[int, bool]:
    """One draft position of a sampled verify step, over the same index space for p and q: the
    draft x ~ q, then (index emitted, whether it was the accepted draft).

    'rejection' accepts x with probability min(1, p[x] / q[x]) and otherwise draws from
    max(0, p - q) normalised, so the emitted index is distributed exactly as p (the standard
    speculative-sampling result). 'argmax' accepts x only if it is p's argmax, else draws from p:
    the emitted distribution is q[a] at the argmax a plus (1 - q[a]) p, whose total-variation
    distance from p is q[a] (1 - p[a]) (`argmax_rule_tv`). With `wrong_share` < 1 the argmax rule
    judges a position only when `u_rule` < wrong_share, the rejection rule otherwise: the emitted
    distribution is the mixture, wrong_share times as far from p."""
    x = draw(q, u_draft)
    if rule == "argmax" and u_rule < wrong_share:
        if x == int(np.argmax(p)):
            return x, True
        return draw(p, u_resample), False
    if u_accept * q[x] < p[x]:  # u < p/q without dividing (q[x] > 0: x was drawn from q)
        return x, True
    residual = np.maximum(p - q, 0.0)
    if not residual.any():  # q >= p everywhere only by rounding (then p and q are equal): p itself
        return draw(p, u_resample), False
    return draw(residual, u_resample), False


def argmax_rule_tv(p: np.ndarray, q: np.ndarray, wrong_share: float = 1.0) -> float:
    """Total-variation distance from p of what the 'argmax' rule (at `wrong_share` of positions)
    emits at one position."""
    a = int(np.argmax(p))
    return float(wrong_share * q[a] * (1.0 - p[a]))


@dataclass
class SpecProgress:
    """One request's speculative statistics, updated once per verify step."""

    k: int
    steps: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.histogram:
            self.histogram = [0] * (self.k + 1)

    def record(self, k_eff: int, accepted: int) -> None:
        """Count one verify step that proposed `k_eff` drafts and accepted `accepted` of them."""
        self.steps += 1
        self.draft_tokens += k_eff
        self.accepted += accepted
        self.histogram[accepted] += 1

    def vllm(self, non_stream: bool) -> dict[str, Any]:
        """vLLM's `metrics.speculative_decoding` object (the non-stream body adds two null fields).

        With no verify step (max_tokens 1) the two ratios are null."""
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + self.accepted / self.steps if self.steps else None,
            "draft_acceptance_rate": self.accepted / self.draft_tokens if self.draft_tokens else None,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": self.steps,
            "num_accepted_draft_tokens": self.accepted,
            "num_draft_tokens": self.draft_tokens,
            "num_spec_tokens": self.k,
        }
        if non_stream:
            out["per_step_accepted"] = None
            out["per_step_drafted"] = None
        return out

    def sglang(self, completion_tokens: int) -> dict[str, Any]:
        """SGLang's `meta_info` speculative fields (spec_accept_length null with no verify step)."""
        return {
            "spec_verify_ct": self.steps,
            "spec_accept_length": completion_tokens / self.steps if self.steps else None,
            "spec_accept_rate": self.accepted / self.draft_tokens if self.draft_tokens else None,
            "spec_num_correct_drafts": self.accepted,
            "spec_num_proposed_drafts": self.draft_tokens,
        }
