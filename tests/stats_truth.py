"""Ground truth for confidence-interval tests, from the binomial distribution written out with
`math.comb` (no scipy): the ranks of a quantile's order-statistic interval and its coverage, and the
binomial tails that define a Clopper-Pearson interval."""

from __future__ import annotations

import itertools
import math


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return math.fsum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(0, k + 1)) if k >= 0 else 0.0


def quantile_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int, float]:
    """(l, u, coverage) of the 1-based order statistics x_(l), x_(u) that hold the q-th percentile
    with probability >= `confidence`: l the smallest k with F(k) >= tail, u - 1 the smallest k with
    F(k) >= 1 - tail (F the Binomial(n, q/100) cdf); coverage F(u - 1) - F(l - 1)."""
    p, tail = q / 100, (1 - confidence) / 2
    cdf = list(itertools.accumulate(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)))
    lo = next(k for k in range(n + 1) if cdf[k] >= tail)
    hi = next(k for k in range(n + 1) if cdf[k] >= 1 - tail) + 1
    return lo, hi, cdf[hi - 1] - (cdf[lo - 1] if lo >= 1 else 0.0)
