"""Speculative decoding: how many drafts a verify step accepts, and the per-request statistics.

Definitions (the simulator's, stated once; `tests/test_sim_speculative.py` checks them):
  * The prefill step produces the first output token. It is not a verify step and counts in no
    speculative statistic.
  * With speculation on, every later engine step of a sequence is a verify step. It proposes
    `k_eff = min(k, remaining - 1)` draft tokens (`remaining` = max_tokens - tokens emitted so far),
    so a step never runs past max_tokens. Position i (0-based) is accepted with probability
    `acceptance[min(i, len-1)]` given all earlier positions were; the first rejection ends the run.
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


@dataclass
class SpecStats:
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

    def vllm(self, non_stream: bool) -> dict:
        """vLLM's `metrics.speculative_decoding` object (the non-stream body adds two null fields).

        With no verify step (max_tokens 1) the two ratios are null."""
        out: dict = {
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

    def sglang(self, completion_tokens: int) -> dict:
        """SGLang's `meta_info` speculative fields (spec_accept_length null with no verify step)."""
        return {
            "spec_verify_ct": self.steps,
            "spec_accept_length": completion_tokens / self.steps if self.steps else None,
            "spec_accept_rate": self.accepted / self.draft_tokens if self.draft_tokens else None,
            "spec_num_correct_drafts": self.accepted,
            "spec_num_proposed_drafts": self.draft_tokens,
        }
