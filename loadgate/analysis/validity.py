"""Is the run valid: how far can the client's own stamps be off, and (open loop) how late did it
start its requests. Pure functions of saved figures and records.

The verdict is judged on the error the client's state causes, not on the state itself:
- **stamp error**: per chunk, the records keep how much earlier than its stamp it may truly have
  arrived (`Record.chunk_early_ns`: non-zero only where one read carried several chunks). Where
  reads are stamped in user space (TLS, `transport: aiohttp`), a stamp is also late by the loop's
  wake-up lag, so its p99 is added. The p99 of that bound is the stated error of every TTFT and
  ITL figure ("stamps are within X ms at p99"), and over `health.stamp_error_p99_ms` the run is
  invalid (exit 30);
- **schedule lag** (open loop): how late requests were noticed as due, over
  `health.schedule_lag_p99_ms`.
Loop lag, GC pauses and the client's CPU are reported and warned about against their budgets;
alone they do not invalidate a run whose stamps stay within the bound.
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


def stamp_bound(records: list[Record], loop_lag_p99_ms: float | None) -> dict[str, Any] | None:
    """The stamp-error bound over the chunks of successful requests: p50/p99/max of the per-chunk
    bound (ms), the share of chunks that shared a read, and `stated_p99_ms` (with the loop's lag
    added where stamps are taken in user space). None for records that carry no bound (v1)."""
    ok = [r for r in records if r.succeeded and r.chunk_ns]
    if not ok or not any(r.chunk_early_ns for r in ok):
        return None
    x = np.asarray([b for r in ok for b in (r.chunk_early_ns or [0] * len(r.chunk_ns))], dtype=np.float64) / 1e6
    user = sum(1 for r in ok if r.stamp != "kernel")
    p99 = float(np.percentile(x, 99))
    stated = p99 + (loop_lag_p99_ms or 0.0) if user else p99
    return {"p50_ms": float(np.percentile(x, 50)), "p99_ms": p99, "max_ms": float(x.max()),
            "shared_read_fraction": float((x > 0).mean()), "chunks": int(x.size),
            "user_stamped_requests": user, "stated_p99_ms": stated}


def cores_words(cpus: dict[str, Any] | None, workers: int) -> str:
    """What would help, given the cores loadgate may run on (its affinity mask) and its workers."""
    if not cpus or not cpus.get("affinity"):
        return "lower the concurrency, or use more load.workers where there are free cores"
    free = cpus["affinity"] - workers
    if free >= 1:
        return (f"use load.workers: {min(cpus['affinity'], workers * 2)} ({cpus['affinity']} cores are open to "
                f"loadgate here), or lower the concurrency")
    return (f"lower the concurrency: loadgate may use {cpus['affinity']} core(s) here and runs {workers} worker(s), "
            "so more workers would only share them (give it more cores, e.g. taskset, or move the engine)")


def verdict(health: dict[str, Any], budgets: Any, cpus: dict[str, Any] | None = None,
            unbounded: bool = False) -> list[str]:
    """Messages for every exceeded validity budget, each saying what to change; empty when valid.
    `unbounded`: streamed records without per-chunk bounds (written before record v3): those are
    judged by the loop's lag, as the version that wrote them judged them."""
    out = []
    sb = health.get("stamp_bound")
    lag = (health.get("loop_lag_ms") or {}).get("p99")
    if unbounded and lag is not None and lag > budgets.loop_lag_p99_ms:
        out.append(f"client event-loop lag p99 {lag:.1f} ms (budget {budgets.loop_lag_p99_ms:g} ms), and these records "
                   "carry no per-chunk stamp bound (written by an older loadgate): judged by the loop's lag, as then")
    if sb and sb["stated_p99_ms"] > budgets.stamp_error_p99_ms:
        user = " (user-space stamps: the loop's lag included)" if sb["user_stamped_requests"] else ""
        out.append(f"TTFT and ITL stamps may be off by up to {sb['stated_p99_ms']:.2f} ms at p99{user} (budget "
                   f"{budgets.stamp_error_p99_ms:g} ms): the client read several chunks at once "
                   f"({sb['shared_read_fraction']:.1%} of chunks); {cores_words(cpus, health.get('workers') or 1)}")
    sl = health.get("schedule_lag_ms")
    if sl and sl["p99"] is not None and sl["p99"] > budgets.schedule_lag_p99_ms:
        out.append(f"open-loop schedule lag p99 was {sl['p99']:.1f} ms (budget {budgets.schedule_lag_p99_ms:g} ms): "
                   f"the client started requests late; {cores_words(cpus, health.get('workers') or 1)}")
    return out


def warnings(health: dict[str, Any], budgets: Any) -> list[str]:
    """The client's state over its budgets: reported, not a reason for invalidity by itself."""
    out = []
    lag = health["loop_lag_ms"]["p99"]
    if lag is not None and lag > budgets.loop_lag_p99_ms:
        out.append(f"client event-loop lag p99 {lag:.1f} ms (budget {budgets.loop_lag_p99_ms:g} ms)")
    if (health.get("gc_pause_max_ms") or 0) > budgets.gc_pause_max_ms:
        out.append(f"a client GC pause of {health['gc_pause_max_ms']:.1f} ms (budget {budgets.gc_pause_max_ms:g} ms)")
    cpu = health.get("client_cpu_fraction")
    if cpu is not None and cpu > budgets.cpu_max:
        out.append(f"the client used {cpu:.0%} of a core (budget {budgets.cpu_max:.0%})")
    return out
