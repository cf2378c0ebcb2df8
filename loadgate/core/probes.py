"""How many successful requests a capacity-search probe needs, and the finest resolution they resolve.

Quantile rule: a probe judged on `p(q)` needs at least 10 / (1 - q/100) successful requests, so that
ten or more samples lie above the quantile (p50: 20, p90: 100, p95: 200, p99: 1,000, p99.9: 10,000).
A threshold without a quantile (mean, rate, a throughput) counts as p50.

Resolution rule: a probe of n requests measures its figures with a counting noise near 1 / sqrt(n)
(relative); bisecting two loads closer than that compares noise, so `load.search.resolution` must
be at least 1 / sqrt(n) (100 requests: 10 %; 400 requests: 5 %).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from loadgate.core.thresholds import Threshold


def quantile_of(t: Threshold) -> float:
    """The percentile a threshold reads (50 for a figure without one)."""
    a = t.aggregation
    return float(a[2:-1]) if a is not None and a.startswith("p(") else 50.0


def requests_needed(q: float) -> int:
    """Successful requests a probe needs for the `q`-th percentile: ceil(10 / (1 - q/100))."""
    return math.ceil(round(10 / (1 - q / 100), 6))  # rounded first: 10 / (1 - 0.999) is 10000.000000001


def strictest(ts: Iterable[Threshold]) -> Threshold | None:
    """The threshold whose quantile needs the most requests."""
    return max(ts, key=quantile_of, default=None)


def finest_resolution(n: int) -> float:
    """The finest relative resolution `n` requests a probe resolve: 1 / sqrt(n)."""
    return 1 / math.sqrt(n)
