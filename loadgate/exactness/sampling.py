"""Sampling contracts: what can be checked when outputs are sampled, not greedy.

  seeded-replay            the same request with the same seed and sampling parameters, sent
                           again, gives the same token ids. Only where the engine takes a
                           per-request seed (vLLM `seed`, llama.cpp `seed`, the simulator); it
                           says nothing about another engine's or configuration's seeded output,
                           since random-number use and operation order differ between them.
  distribution-preserving  speculative decoding promises the target's distribution, not its
                           draws: at fixed prefixes, many seeded samples of the first tokens from
                           the candidate and from the baseline are tested for equal distributions.

The distribution test, per prefix: each sample is the pair of the first two sampled tokens (the
first comes from prefill and tests nothing about speculation; the second is the first that a
verify step can produce, and the report gives the share of samples whose request shows draft
activity). Pairs are counted on both sides; a category whose expected count is below
`MIN_EXPECTED` on either side is pooled into one "other" category (and "other" itself, if still
too small, into the largest category), and Pearson's chi-square test of homogeneity is applied
to the 2 x K table. Across prefixes the p-values are Holm-corrected at `alpha`.

Power, stated with every result: for a two-sample chi-square test with n1 and n2 samples, the
noncentrality is n_eff * sum((p1 - p2)**2 / pbar) with n_eff = n1 n2 / (n1 + n2); by
Cauchy-Schwarz that sum is at least (2 TV)**2, where TV is the total-variation distance between
the two distributions over the pooled categories. So any difference with TV >= delta over those
categories is detected with probability at least 0.8 (in the chi-square test's large-sample
approximation) when n_eff * 4 delta**2 reaches the noncentrality at which the test (df = K - 1,
level alpha / m, Holm's strictest) has power 0.8. `detectable_tv` solves for delta. A difference
inside the pooled "other" category is not seen; a prefix whose samples pool into one category
tests nothing (its power is stated as 1.0 and the contract is not established).

That bound holds for a difference of any shape, and is met with equality by one spread over all
categories in proportion to their probability. What a wrong verification rule does has a shape:
drafts propose the target's likely tokens, so accepting them too often moves mass toward each first
token's likeliest second token. For that shift, at the baseline's own category probabilities
(block B: the categories of one first token, mass P_B, its likeliest category m_B), the
noncentrality per unit of TV squared is about r = sum_B (P_B - p_m) P_B / p_m / (sum_B (P_B -
p_m))**2 (>= 4; taken at the pooled proportions, `shift_ratio`), so the TV it detects is
sqrt(lam / (n_eff r)) (`detectable_shift_tv`); both are stated. Measured with
`benchmarks/sampling_contract.py --power` on the simulator's argmax rule at 4,000 to 32,000
samples a side: the shift figure lies within 7 % of the TV caught in 80 % of 50 seeded checks, the
any-difference figure 15-27 % above it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


MIN_EXPECTED = 5.0
POWER = 0.8
OTHER = "other"


@dataclass
class PrefixTest:
    """One prefix's test: the pooled table, the statistic and what this sample size can detect."""

    case: str
    categories: list[str]
    baseline_counts: list[int]
    candidate_counts: list[int]
    statistic: float
    df: int
    p_value: float
    detectable_tv: float  # smallest TV detected with probability >= POWER (at Holm's strictest level)
    observed_tv: float
    verify_share: float | None  # candidate samples whose request showed draft activity
    detectable_shift_tv: float = 1.0  # the same for a shift toward the likeliest tokens (`shift_tv`)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def pooled_table(base: Counter[str], cand: Counter[str]) -> tuple[list[str], np.ndarray]:
    """The 2 x K table of the categories both sides can support: a category whose expected count
    (under equal distributions) is below MIN_EXPECTED joins "other"; "other" itself, if too small,
    joins the largest category."""
    import numpy as np

    n1, n2 = sum(base.values()), sum(cand.values())
    total = n1 + n2
    keep, other = [], [0, 0]
    for cat in sorted(set(base) | set(cand), key=lambda c: (-(base[c] + cand[c]), c)):
        pooled = base[cat] + cand[cat]
        if min(n1, n2) * pooled / total >= MIN_EXPECTED:
            keep.append(cat)
        else:
            other[0] += base[cat]
            other[1] += cand[cat]
    rows = [[base[c] for c in keep], [cand[c] for c in keep]]
    cats = list(keep)
    if other[0] + other[1]:
        if min(n1, n2) * (other[0] + other[1]) / total >= MIN_EXPECTED or not cats:
            cats.append(OTHER)
            rows[0].append(other[0])
            rows[1].append(other[1])
        else:  # too small to stand alone: into the largest category (which then tests less)
            rows[0][0] += other[0]
            rows[1][0] += other[1]
            cats[0] = f"{cats[0]}+{OTHER}"
    return cats, np.array(rows, dtype=np.int64)


def noncentrality(df: int, level: float, power: float = POWER) -> float:
    """The noncentrality at which a chi-square test with `df` degrees of freedom at `level` rejects
    with probability `power`."""
    from scipy import optimize, stats  # here, not at import (~0.8 s)

    crit = stats.chi2.ppf(1.0 - level, df)
    return float(optimize.brentq(lambda x: stats.ncx2.sf(crit, df, x) - power, 1e-9, 1e6))


def detectable_tv(n1: int, n2: int, df: int, level: float, power: float = POWER, r: float = 4.0) -> float:
    """The smallest total-variation distance a chi-square test of homogeneity with these sample
    sizes detects with probability >= `power` at `level`: for a difference of any shape with `r`
    4, for a shape whose noncentrality per unit of TV squared is `r` otherwise (module docstring)."""
    import numpy as np

    if df < 1 or n1 == 0 or n2 == 0:
        return 1.0
    n_eff = n1 * n2 / (n1 + n2)
    return float(min(1.0, np.sqrt(noncentrality(df, level, power) / (r * n_eff))))


def shift_ratio(categories: Sequence[str], probs: Sequence[float], tv: float = 0.0) -> float:
    """r of a shift of total-variation distance `tv` toward each first token's likeliest second
    token, at category probabilities `probs` (a category "a b" belongs to first token a's block;
    pooled ones stand alone and take no part). The test's pooled proportions lie halfway between
    the two sides, so r is taken there (`tv` 0: at `probs` themselves). 4.0 (the any-shape bound)
    where no block has two categories."""
    import numpy as np

    blocks: dict[str, list[int]] = {}
    p = np.asarray(probs, dtype=float)
    for k, cat in enumerate(categories):
        parts = cat.removesuffix("+" + OTHER).split(" ")  # the largest category keeps its place when "other" joins it
        if len(parts) == 2 and OTHER not in parts and p[k] > 0:
            blocks.setdefault(parts[0], []).append(k)
    d = np.zeros_like(p)
    for ks in blocks.values():
        top = max(ks, key=lambda k: p[k])
        d[ks] = -p[ks]
        d[top] += p[ks].sum()
    unit = 0.5 * np.abs(d).sum()  # the TV of a shift of strength 1: all of each block on its top
    if unit <= 0:
        return 4.0
    tv = min(tv, unit)
    d *= (tv or unit) / unit
    mid = p + d / 2
    used = mid > 0
    return max(4.0, float((d[used] ** 2 / mid[used]).sum() / (tv or unit) ** 2))


def detectable_shift_tv(categories: Sequence[str], probs: Sequence[float], n1: int, n2: int, df: int,
                        level: float, power: float = POWER) -> float:
    """The smallest TV of a shift toward the likeliest tokens the test detects (`shift_ratio`,
    solved with r taken at the pooled proportions of that shift: three rounds settle it)."""
    tv = detectable_tv(n1, n2, df, level, power, shift_ratio(categories, probs))
    for _ in range(3):
        tv = detectable_tv(n1, n2, df, level, power, shift_ratio(categories, probs, tv))
    if tv > shift_reach(categories, probs):  # no such shift is that large: the any-shape bound holds
        return detectable_tv(n1, n2, df, level, power)
    return tv


def shift_reach(categories: Sequence[str], probs: Sequence[float]) -> float:
    """The largest TV a shift toward the likeliest tokens can make (every block on its top)."""
    import numpy as np

    p = np.asarray(probs, dtype=float)
    blocks: dict[str, list[float]] = {}
    for k, cat in enumerate(categories):
        parts = cat.removesuffix("+" + OTHER).split(" ")
        if len(parts) == 2 and OTHER not in parts and p[k] > 0:
            blocks.setdefault(parts[0], []).append(float(p[k]))
    return float(sum(sum(ps) - max(ps) for ps in blocks.values()))


def samples_needed(tv: float, df: int, level: float, r: float = 4.0, power: float = POWER) -> int:
    """Samples a side (equal sides) for a test at `level` to detect `tv` with probability `power`
    (`r`: the difference's shape, `shift_ratio`; 4 for any shape)."""
    import numpy as np

    return int(np.ceil(2.0 * noncentrality(df, level, power) / (r * tv * tv)))


def prefix_test(case: str, base: Sequence[str], cand: Sequence[str], level: float,
                verify_share: float | None) -> PrefixTest:
    """The chi-square test of one prefix's samples (category labels), power at `level`."""
    import numpy as np

    cats, table = pooled_table(Counter(base), Counter(cand))
    n1, n2 = int(table[0].sum()), int(table[1].sum())
    if table.shape[1] < 2:  # one category on both sides: nothing differs, nothing to test
        stat, p, df = 0.0, 1.0, 0
    else:
        from scipy import stats

        res = stats.chi2_contingency(table, correction=False)
        stat, p, df = float(res.statistic), float(res.pvalue), int(res.dof)
    p1, p2 = table[0] / max(n1, 1), table[1] / max(n2, 1)
    power = detectable_tv(n1, n2, df, level) if df >= 1 else 1.0  # one category: nothing can be told apart
    shift = detectable_shift_tv(cats, p1, n1, n2, df, level) if df >= 1 else 1.0
    return PrefixTest(case, cats, table[0].tolist(), table[1].tolist(), stat, df, p, power,
                      float(0.5 * np.abs(p1 - p2).sum()), verify_share, shift)


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise level `alpha`.
    (Four lines: no library in the project's set offers it.)"""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def distribution_result(tests: list[PrefixTest], alpha: float) -> dict[str, Any]:
    """The contract's verdict over every prefix: passed when Holm rejects no prefix's equality."""
    rejected = holm([t.p_value for t in tests], alpha)
    shares = [t.verify_share for t in tests if t.verify_share is not None]
    return {"passed": not any(rejected), "alpha": alpha, "prefixes": [
        {**t.to_json(), "rejected": r} for t, r in zip(tests, rejected, strict=True)],
        "detectable_tv": max((t.detectable_tv for t in tests), default=1.0),
        "detectable_shift_tv": max((t.detectable_shift_tv for t in tests), default=1.0),
        "verify_share": min(shares) if shares else None}


def pair_label(ids: Sequence[object]) -> str:
    """A sample's category: its first two token ids ("12 345"; characters where the API gives no ids), or fewer if the output stopped."""
    return " ".join(str(i) for i in ids[:2])
