"""Time slices of a load level (`report.slice_s`): the level's figures by time, so a server that
drifts during a level shows it.

The level's window W = [first origin, last end] (as its throughput's) is cut into consecutive
slices of S seconds from its start: slice k is [k S, (k + 1) S) seconds into W, the last one ending
at W's end, and shorter than S (`partial`) unless S divides W. Two rules place what happened:
- a request belongs to the slice in which its origin lies (its intended start in an open loop, else
  its actual start: where its latency counts from), and its figures (`analysis.metrics.summarize`,
  as the level's and each group's) count there, however long it ran;
- output tokens count in the slice in which the chunk carrying them arrived (successful requests,
  as the level's throughput), so a slice's `output_throughput` is the tokens that arrived in it /
  its own length; the slices' tokens add up to the level's.
A slice no request started in has no latency samples (n/a) but may still have tokens arriving. A
window that would need more than `MAX_SLICES` slices (a length the profile could not check
beforehand) keeps none: `too_many` says how many it would have taken.
"""

from __future__ import annotations

from typing import Any

from loadgate.analysis.metrics import summarize
from loadgate.config.profile import MAX_SLICES
from loadgate.records import Record

SLICE_FIGURES = ("ttft", "itl", "e2e")
"""The distributions each slice keeps (p50 and p99), those of them the level keeps."""


def slice_index(t_ns: Any, start_ns: int, slice_ns: int, n: int) -> Any:
    """The slice of each time in `t_ns` (a numpy array of ns): floor((t - start) / S), the last
    slice also holding the window's end (clipped to 0 .. n - 1)."""
    import numpy as np

    return np.clip((np.asarray(t_ns, dtype=np.int64) - start_ns) // slice_ns, 0, n - 1)


def time_slices(records: list[Record], slice_s: float | None, drop: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The level's slices of `slice_s` seconds (see the module docstring); None when `slice_s` is
    None (off); no slices, and `too_many` their number, past `MAX_SLICES`. Each slice: start_s and
    end_s (seconds into the window), partial, requests, succeeded, failed, output_tokens,
    output_throughput (tok/s) and, per figure of `SLICE_FIGURES` not in `drop`, its unit, count, p50
    and p99 (None without samples)."""
    if slice_s is None:
        return None
    import numpy as np

    out: dict[str, Any] = {"slice_s": slice_s, "requests_by": "origin", "tokens_by": "arrival", "window_s": None,
                           "too_many": None, "slices": []}
    if not records:
        return out
    start = min(r.origin_ns for r in records)
    span_ns = max(r.end_ns for r in records) - start
    slice_ns = max(1, round(slice_s * 1e9))
    n = max(1, -(-span_ns // slice_ns))
    out["window_s"] = span_ns / 1e9
    if n > MAX_SLICES:
        out["too_many"] = n
        return out
    which = slice_index([r.origin_ns for r in records], start, slice_ns, n)
    ok = [r for r in records if r.succeeded]
    arrivals = np.asarray([r.start_ns + c for r in ok for c in r.chunk_ns], dtype=np.int64)
    tokens = np.asarray([k for r in ok for k in r.chunk_tokens], dtype=np.float64)
    per_slice = np.bincount(slice_index(arrivals, start, slice_ns, n), weights=tokens, minlength=n) \
        if arrivals.size else np.zeros(n)
    parts: list[list[Record]] = [[] for _ in range(n)]
    for r, k in zip(records, which.tolist(), strict=True):
        parts[k].append(r)
    for k, sub in enumerate(parts):
        lo, hi = k * slice_ns, min((k + 1) * slice_ns, span_ns)
        s = summarize(sub)
        length_s = (hi - lo) / 1e9
        out["slices"].append({
            "start_s": lo / 1e9, "end_s": hi / 1e9, "partial": hi - lo < slice_ns,
            "requests": s["requests"], "succeeded": s["succeeded"], "failed": s["failed"],
            "output_tokens": int(per_slice[k]),
            "output_throughput": float(per_slice[k]) / length_s if length_s > 0 else None,
            "metrics": {name: {key: s["metrics"][name][key] for key in ("unit", "count", "p50", "p99")}
                        for name in SLICE_FIGURES if name not in drop}})
    return out
