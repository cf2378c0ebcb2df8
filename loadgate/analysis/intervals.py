"""95 % confidence intervals for the figure a threshold reads from one level (docs/capacity.md), from
that level's samples alone:

- a quantile p(q) of n samples: the order-statistic interval [x_(l), x_(u)] (1-based ranks, samples
  sorted), l = the 2.5 % point of Binomial(n, q/100) and u = its 97.5 % point + 1, so that the
  quantile lies in it with probability F(u - 1) - F(l - 1) >= 95 % whatever the distribution
  (stated as `coverage`); an end whose rank falls outside 1..n is unbounded (None);
- a mean: the t-interval mean ± t(0.975, n - 1) · s / √n;
- a proportion (`errors rate`, `goodput`): the Clopper-Pearson (exact binomial) interval;
- anything else (a throughput over the level's window, min, max, a count, acceptance length): no
  sampling interval, None with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A confidence interval, or why there is none (`low` and `high` both None then). One end is
    None when the samples cannot bound it (too few beyond a quantile); `coverage` is the interval's
    own probability of holding the figure (at least `CONFIDENCE`), `method` how it was made."""

    low: float | None
    high: float | None
    method: str | None
    coverage: float | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, float | str | None]:
        return {"low": self.low, "high": self.high, "method": self.method, "coverage": self.coverage,
                "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict[str, float | str | None]) -> Interval:
        def num(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        method, reason = d.get("method"), d.get("reason")
        return cls(num("low"), num("high"), None if method is None else str(method), num("coverage"),
                   None if reason is None else str(reason))


def none(reason: str) -> Interval:
    """No interval, and why."""
    return Interval(None, None, None, reason=reason)


def quantile(samples: Sequence[float], q: float) -> Interval:
    """The distribution-free interval of the `q`-th percentile (0 < q < 100) from order statistics."""
    from scipy import stats  # here, not at import (~0.8 s)

    n = len(samples)
    if n == 0:
        return none("no samples")
    x = sorted(samples)
    p, tail = q / 100, (1 - CONFIDENCE) / 2
    lo_rank = int(stats.binom.ppf(tail, n, p))  # F(lo_rank - 1) < 2.5 %
    hi_rank = int(stats.binom.ppf(1 - tail, n, p)) + 1  # F(hi_rank - 1) >= 97.5 %
    coverage = float(stats.binom.cdf(hi_rank - 1, n, p) - (stats.binom.cdf(lo_rank - 1, n, p) if lo_rank >= 1 else 0.0))
    low = x[lo_rank - 1] if lo_rank >= 1 else None
    high = x[hi_rank - 1] if hi_rank <= n else None
    reason = None
    if low is None or high is None:
        reason = (f"{n} samples cannot bound p({q:g}) " + ("below" if low is None else "above")
                  + f" at {CONFIDENCE:.0%}")
    return Interval(low, high, "order statistics (binomial)", min(coverage, 1.0), reason)


def mean(samples: Sequence[float]) -> Interval:
    """The t-interval of the mean."""
    from scipy import stats

    n = len(samples)
    if n < 2:
        return none("fewer than 2 samples")
    if any(math.isinf(v) for v in samples):
        return none("infinite samples (failed requests count as +inf): the mean is +inf")
    m = math.fsum(samples) / n
    s = math.sqrt(math.fsum((v - m) ** 2 for v in samples) / (n - 1))
    half = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1)) * s / math.sqrt(n)
    return Interval(m - half, m + half, "t-interval", CONFIDENCE)


def proportion(k: int, n: int) -> Interval:
    """The Clopper-Pearson interval of k successes in n trials."""
    from scipy import stats

    if n == 0:
        return none("no requests")
    ci = stats.binomtest(k, n).proportion_ci(CONFIDENCE, method="exact")
    return Interval(float(ci.low), float(ci.high), "Clopper-Pearson", CONFIDENCE)
