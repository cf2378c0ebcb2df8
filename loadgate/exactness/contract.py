"""Verdicts: what one sequence did, and whether that passes the contract
(`loadgate.config.contract`, which states the contracts).

Verdicts, per sequence:
  identical            same ids, same finish reason, every logprob compared at 0 float32 ULP
  equivalent           same ids and finish reason; some logprobs differ
  near-tie divergence  ids differ, and at the first divergence the baseline's top-2 gap was at
                       most the near-tie threshold (the baseline itself almost chose otherwise)
  divergence           anything else
"""

from __future__ import annotations

from loadgate.config.contract import Contract, Verdict
from loadgate.exactness.compare import Comparison


def verdict(c: Comparison, near_tie: float) -> Verdict:
    if c.first_divergence is None and c.finish_equal:
        return "identical" if c.ulp_nonzero == 0 else "equivalent"
    if c.first_divergence is not None and c.base_gap is not None and c.base_gap <= near_tie:
        return "near-tie divergence"
    return "divergence"


def passes(c: Comparison, v: Verdict, contract: Contract) -> tuple[bool, str | None]:
    """(passes, why not) for one sequence under the contract."""
    if contract.tier == "bit-exact":
        if v != "identical":
            return False, f"{v}"
        if c.ids_only_positions:
            return False, f"{c.ids_only_positions} positions had no real logprob value (compared on ids only)"
        return True, None
    if contract.tier == "token-exact":
        return (v in ("identical", "equivalent")), (None if v in ("identical", "equivalent") else v)
    if contract.tier == "logprob-tolerance":
        if v not in ("identical", "equivalent"):
            return False, v
        if c.ids_only_positions:
            return False, f"{c.ids_only_positions} positions had no real logprob value (compared on ids only)"
        if c.max_abs_logprob_diff is not None and c.max_abs_logprob_diff > (contract.tolerance or 0.0):
            return False, f"a logprob differed by {c.max_abs_logprob_diff:.3g} nats"
        return True, None
    ok = v in ("identical", "equivalent") or (
        c.first_divergence is not None and c.base_gap is not None and c.base_gap <= (contract.gap or 0.0))
    return ok, None if ok else (f"diverged where the baseline top-2 gap was {c.base_gap:.3g} nats"
                                if c.base_gap is not None else "diverged where the baseline top-2 gap is unknown")
