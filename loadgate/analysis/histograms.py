"""Server-side latency: percentiles of an engine's own latency histograms over a level's window.

A Prometheus histogram is cumulative counters `NAME_bucket{le=EDGE}` (observations ≤ EDGE since the
server started). The window's observations per bucket are the deltas of those counters between
the snapshots at the window's edges (server.json's `before` and `after`), summed over every other
label. The q-quantile is found as Prometheus's `histogram_quantile` finds it: its rank `q × n`
(n: the +Inf bucket's delta) falls in the first bucket whose cumulative delta reaches it, and
inside that bucket (lo, hi] the value is interpolated linearly: lo + (hi - lo) × (rank - below) /
(in bucket). The first bucket's lo is 0 (latencies are not negative); a rank in the +Inf bucket
reads as the highest finite edge. So a figure is known only to its bucket: each percentile
carries its bucket's [lo, hi], and a true value anywhere in it gives the same counts.
Which histograms to read is each engine family's (`Family.latency_histograms`).
"""

from __future__ import annotations

import math
from typing import Any

from loadgate.engine.adapters.base import LATENCY_KEYS, Family
from loadgate.snapshot import Snapshot

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def bucket_deltas(before: Snapshot, after: Snapshot, name: str) -> list[tuple[float, float]] | None:
    """(edge, observations ≤ edge in the window) of histogram `name`, edges ascending, +Inf last;
    None when `after` does not serve it."""
    def cumulative(s: Snapshot) -> dict[float, float]:
        out: dict[float, float] = {}
        for (n, labels), v in s.values.items():
            if n == name + "_bucket":
                le = float(dict(labels)["le"])
                out[le] = out.get(le, 0.0) + v
        return out

    a, b = cumulative(after), cumulative(before)
    if not a:
        return None
    return [(le, a[le] - b.get(le, 0.0)) for le in sorted(a)]


def quantile(buckets: list[tuple[float, float]], q: float) -> tuple[float, float, float] | None:
    """(value, lo, hi) of the q-quantile of cumulative `buckets` (see the module docstring); None
    when the window holds no observation."""
    n = buckets[-1][1] if buckets else 0.0
    if n <= 0:
        return None
    rank = q * n
    lo, below = 0.0, 0.0
    for hi, cum in buckets:
        if cum >= rank and cum > below:
            if math.isinf(hi):
                return lo, lo, hi
            return lo + (hi - lo) * (rank - below) / (cum - below), lo, hi
        lo, below = hi, cum
    return lo, lo, math.inf


def server_latency(before: Snapshot, after: Snapshot, family: Family | None) -> dict[str, Any] | None:
    """Per figure of `LATENCY_KEYS` the family's histogram serves: its name, the window's
    observations, p50/p90/p99 in ms each with its bucket [lo, hi] (ms; hi null for +Inf), and the
    bucket edges (s). None without a family or without any such histogram."""
    if family is None:
        return None
    out: dict[str, Any] = {}
    for key in LATENCY_KEYS:
        for name in family.latency_histograms.get(key, ()):
            buckets = bucket_deltas(before, after, name)
            if buckets is None:
                continue
            entry: dict[str, Any] = {"histogram": name, "count": buckets[-1][1],
                                     "edges_s": [le for le, _ in buckets if not math.isinf(le)]}
            for label, q in QUANTILES:
                got = quantile(buckets, q)
                entry[label] = None if got is None else {
                    "ms": got[0] * 1e3, "lo_ms": got[1] * 1e3, "hi_ms": None if math.isinf(got[2]) else got[2] * 1e3}
            out[key] = entry
            break
    return out or None
