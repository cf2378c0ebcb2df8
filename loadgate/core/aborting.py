"""Which thresholds may abort a measured level as it runs (`abort_on_fail`, docs/capacity.md), and on
how many samples one is first judged.

A threshold judged before its level ends reads the requests finished so far, so it may abort only
where that partial figure estimates the level's own: a distribution of per-request, per-chunk or
per-token samples, and `errors` (failures count as they finish). A scalar of the whole level (a
throughput over the level's window, the acceptance length of its counters, goodput) and a threshold
against `baseline` (the baseline's figure exists only after its run) cannot abort.

Sample rule: a distribution is judged once it holds 10 / (1 - q/100) samples for its `p(q)`
(`loadgate.core.probes`: p50 20, p90 100, p99 1,000; a mean, min or max counts as p50), failed
requests included for an `_error_adjusted` figure; `errors rate < r` (or `<= r`) once 10 / r requests
finished, at least 20 (the same rule: r is the p(100 - r) of the failure indicator, so the limit
allows 10 failures and one early failure of a healthy server does not abort it: 1 of 20 reads 5 %),
at once for r = 0 (`rate == 0` too: a failure fails it whatever follows), another rate comparison from 20; `errors
count` from the first (a count only grows).
"""

from __future__ import annotations

import math

from loadgate.core import probes
from loadgate.core.thresholds import Threshold, metric_is_distribution


def refusal(t: Threshold) -> str | None:
    """Why `t` cannot carry `abort_on_fail`, or None when it can."""
    if t.baseline:
        return ("a threshold against baseline cannot abort a level: the baseline's figure is known only "
                "after its own run (remove abort_on_fail)")
    if t.metric != "errors" and not metric_is_distribution(t.metric):
        return (f"{t.metric} is a figure of the whole level, not of the requests finished so far: it cannot "
                "abort a level (remove abort_on_fail; it is judged at the level's end)")
    return None


def samples_needed(t: Threshold) -> int:
    """Samples (requests for `errors`) a level holds before `t` is judged on it as it runs."""
    if t.metric == "errors":
        if t.aggregation == "count":
            return 1
        least = probes.requests_needed(50.0)
        if t.value is not None and t.value <= 0 and t.comparator in ("<", "<=", "=="):
            return 1
        if t.value is not None and t.comparator in ("<", "<="):
            return max(least, math.ceil(round(10 / t.value, 6)))
        return least
    return probes.requests_needed(probes.quantile_of(t))
