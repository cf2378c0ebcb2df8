"""The exactness contract: what the check requires (the profile's `exactness.contract`), and the
names of the verdicts one sequence can get. Judging a sequence under it is
`loadgate.exactness.contract`.

Contracts:
  bit-exact            every sequence identical, and every position compared on a real logprob
                       value (a position compared on ids only cannot support a bit-exact claim)
  token-exact          every sequence identical or equivalent (same ids and finish reasons)
  logprob-tolerance X  same ids and finish reasons, and every logprob within X nats
  near-tie-tolerant G  token-exact except at first divergences where the baseline's top-2 gap
                       was <= G nats; every such divergence is still listed
  stable: true         on top of any tier: within each scenario, every output of a prompt equals
                       every other (run-to-run stability; `drift`), whatever the baseline says
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadgate.config.knob import knob

Tier = Literal["bit-exact", "token-exact", "logprob-tolerance", "near-tie-tolerant"]
Verdict = Literal["identical", "equivalent", "near-tie divergence", "divergence"]
DEFAULT_NEAR_TIE_NATS = 0.3


@dataclass(frozen=True)
class Contract:
    """What the exactness check requires (the profile's `exactness.contract`)."""

    tier: Tier = knob("bit-exact", "the contract tier")
    tolerance: float | None = knob(None, "logprob-tolerance: largest logprob difference, nats", min=0.0)
    gap: float | None = knob(None, "near-tie-tolerant: largest baseline top-2 gap at a divergence, nats", min=0.0)
    stable: bool = knob(False, "also require run-to-run stability: within each scenario, every output of a prompt "
                        "has the same token ids and finish reason as every other (bit-exact: and logprob bits), "
                        "whatever the baseline says; judged where a scenario sends a prompt more than once (repeat)")

    def check(self) -> list[tuple[str, str]]:
        """The tier's own setting is given, and no other tier's."""
        if self.tier == "logprob-tolerance" and self.tolerance is None:
            return [("tolerance", "required when tier is 'logprob-tolerance'")]
        if self.tier == "near-tie-tolerant" and self.gap is None:
            return [("gap", "required when tier is 'near-tie-tolerant'")]
        if self.tolerance is not None and self.tier != "logprob-tolerance":
            return [("tolerance", f"only read when tier is 'logprob-tolerance', not {self.tier!r}")]
        if self.gap is not None and self.tier != "near-tie-tolerant":
            return [("gap", f"only read when tier is 'near-tie-tolerant', not {self.tier!r}")]
        return []

    def words(self) -> str:
        """The contract in plain words, printed verbatim in every report."""
        if not self.stable:
            return self._tier_words()
        same = "token ids, logprob bits and finish reason" if self.tier == "bit-exact" else "token ids and finish reason"
        return (self._tier_words() + f"; and stable: within each scenario, every output of a prompt has the same "
                f"{same} as every other")

    def _tier_words(self) -> str:
        if self.tier == "bit-exact":
            return ("bit-exact: every token id, every logprob to 0 float32 ULP, and every finish reason "
                    "equal to the baseline's; positions without a real logprob value cannot pass")
        if self.tier == "token-exact":
            return "token-exact: every token id and every finish reason equal to the baseline's; logprobs may differ"
        if self.tier == "logprob-tolerance":
            return (f"logprob-tolerance {self.tolerance:g}: every token id and finish reason equal to the "
                    f"baseline's, and every logprob within {self.tolerance:g} nats of it")
        return (f"near-tie-tolerant (gap <= {self.gap:g} nats): token ids equal to the baseline's, except that a "
                f"sequence may diverge at a position where the baseline's top-2 logprob gap was <= {self.gap:g} "
                "nats; every divergence is listed")

    @property
    def near_tie_threshold(self) -> float:
        return self.gap if self.tier == "near-tie-tolerant" and self.gap is not None else DEFAULT_NEAR_TIE_NATS
