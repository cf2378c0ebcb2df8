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
from loadgate.records import STEAL_TRUSTED, Record


def schedule_lag(records: list[Record]) -> dict[str, float | None] | None:
    """Open loop only: ready - intended (how late the client noticed a request was due)."""
    lags = [(r.ready_ns - r.intended_ns) / 1e6 for r in records if r.intended_ns is not None]
    return lag_percentiles(np.asarray(lags)) if lags else None


def stamp_bound(records: list[Record], loop_lag_p99_ms: float | None) -> dict[str, Any] | None:
    """The stamp-error bound over the chunks of successful requests: p50/p99/max of the per-chunk
    bound (ms), the share of chunks that shared a read with another chunk (`shared_read_fraction`,
    from the stamps) and of those given a bound (`bounded_fraction`: a shared read that was not one
    TCP segment, or a last chunk read late with the stream's end), `stated_p99_ms` (with the loop's
    lag added where stamps are taken in user space),
    and the cause where the records say it (v4): the share of chunks bounded while the client's
    loop was busy (`busy_fraction`) and the p99 the others alone would give (`quiet_p99_ms`: those
    read in turns that woke from an idle poll, bounded by the measured wake latency). None for
    records that carry no bound (v1, v2)."""
    ok = [r for r in records if r.succeeded and r.chunk_ns]
    if not ok or not any(r.chunk_early_ns for r in ok):
        return None
    x = np.asarray([b for r in ok for b in (r.chunk_early_ns or [0] * len(r.chunk_ns))], dtype=np.float64) / 1e6
    user = sum(1 for r in ok if r.stamp != "kernel")
    p99 = float(np.percentile(x, 99))
    stated = p99 + (loop_lag_p99_ms or 0.0) if user else p99
    shared = sum(1 for r in ok for j, t in enumerate(r.chunk_ns)
                 if (j and r.chunk_ns[j - 1] == t) or (j + 1 < len(r.chunk_ns) and r.chunk_ns[j + 1] == t))
    out: dict[str, Any] = {"p50_ms": float(np.percentile(x, 50)), "p99_ms": p99, "max_ms": float(x.max()),
                           "shared_read_fraction": shared / x.size, "bounded_fraction": float((x > 0).mean()),
                           "chunks": int(x.size),
                           "user_stamped_requests": user, "stated_p99_ms": stated,
                           "busy_fraction": None, "quiet_p99_ms": None}
    if all(r.chunk_busy is not None for r in ok):
        quiet = x.copy()
        k = 0
        for r in ok:
            for j in r.chunk_busy or ():
                quiet[k + j] = 0.0
            k += len(r.chunk_ns)
        out["busy_fraction"] = float(sum(len(r.chunk_busy or ()) for r in ok) / x.size)
        out["quiet_p99_ms"] = float(np.percentile(quiet, 99))
    return out


def bound_cause(sb: dict[str, Any], budget_ms: float) -> str:
    """Why chunks carry the bounds they carry, in words: chunks read together while the loop was
    busy, a slow wake from an idle poll (the client waited for a CPU), or unknown (older records)."""
    shared = f"{sb['shared_read_fraction']:.1%} of chunks shared a read"
    if "bounded_fraction" in sb:
        shared += f" ({sb['bounded_fraction']:.1%} not as one TCP segment: those carry a bound)"
    if sb.get("busy_fraction") is None:
        return shared
    busy = f"{sb['busy_fraction']:.1%} arrived together while the client was behind (its loop busy, or its wake held up)"
    if sb["quiet_p99_ms"] <= budget_ms < sb["p99_ms"]:
        return f"{shared}; {busy}, so their bound reaches back to the loop's turn before"
    if sb["quiet_p99_ms"] > budget_ms:
        return (f"{shared}; reads that woke the client's loop from an idle poll still took "
                f"{sb['quiet_p99_ms']:.2f} ms at p99 to be read (the client waited for a CPU: other processes "
                f"share its cores); {busy}")
    return f"{shared}; {busy}"


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
        steal = health.get("host_steal_fraction")
        host = "" if steal is None or steal <= STEAL_TRUSTED else (
            f"; the host took {steal:.0%} of this machine's CPU time (steal), so a wake from an idle poll "
            "is not timed and reads of several segments keep the bound since the poll before (a machine "
            "of its own, without a hypervisor's other guests, avoids this)")
        out.append(f"TTFT and ITL stamps may be off by up to {sb['stated_p99_ms']:.2f} ms at p99{user} (budget "
                   f"{budgets.stamp_error_p99_ms:g} ms): {bound_cause(sb, budgets.stamp_error_p99_ms)}{host}; "
                   f"{cores_words(cpus, health.get('workers') or 1)}")
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
