"""Is the run valid: was the client the bottleneck (its health against the profile's budgets), and
how late did an open loop start its requests. Pure functions of saved figures and records.

A run over a budget is invalid (exit code 30): its figures describe the client, not the engine.
`verdict` says which budgets were exceeded and what to change.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgate.analysis.metrics import lag_percentiles
from loadgate.records import Record


def schedule_lag(records: list[Record]) -> dict[str, float | None] | None:
    """Open loop only: ready - intended (how late the client noticed a request was due)."""
    lags = [(r.ready_ns - r.intended_ns) / 1e6 for r in records if r.intended_ns is not None]
    return lag_percentiles(np.asarray(lags)) if lags else None


def verdict(health: dict[str, Any], budgets: Any) -> list[str]:
    """Messages for every exceeded budget, each saying what to change; empty when healthy."""
    out = []
    lag = health["loop_lag_ms"]["p99"]
    if lag is not None and lag > budgets.loop_lag_p99_ms:
        out.append(f"client event-loop lag p99 was {lag:.1f} ms (budget {budgets.loop_lag_p99_ms:g} ms): "
                   "use `load.workers: 2` or more, or lower the concurrency")
    if health["gc_pause_max_ms"] > budgets.gc_pause_max_ms:
        out.append(f"a client GC pause lasted {health['gc_pause_max_ms']:.1f} ms (budget "
                   f"{budgets.gc_pause_max_ms:g} ms): use more workers or fewer requests per worker")
    cpu = health.get("client_cpu_fraction")
    if cpu is not None and cpu > budgets.cpu_max:
        out.append(f"the client used {cpu:.0%} of a core (budget {budgets.cpu_max:.0%}): use more workers")
    sl = health.get("schedule_lag_ms")
    if sl and sl["p99"] is not None and sl["p99"] > budgets.schedule_lag_p99_ms:
        out.append(f"open-loop schedule lag p99 was {sl['p99']:.1f} ms (budget {budgets.schedule_lag_p99_ms:g} ms): "
                   "the client started requests late; use more workers or a lower rate")
    return out
