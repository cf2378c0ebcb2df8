"""Timed replays: a trace's or dataset's timestamps (ms) made into a window of requests in time
order and their offsets from the window's start (`load.schedule: trace`; see
`loadgate.load.workload.trace`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgate.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

_EDGE_MS = 1e-6  # window edges: a timestamp this close to one is on it


@dataclass(frozen=True)
class Window:
    """The part of a timed trace a run replays, in trace time (s from the earliest timestamp)."""

    start_s: float = 0.0
    length_s: float | None = None
    speed: float = 1.0
    cap: int | None = None  # at most this many requests (the first in time)


def timed_order(stamps_ms: np.ndarray, window: Window, path: Path) -> tuple[np.ndarray, list[int], int]:
    """The window's requests in time order (indexes into `stamps_ms`), their offsets from the window's
    start at its speed (ns), and how many stamps came before an earlier line's (out of order). The
    window is cut in trace milliseconds (in float seconds its edges would be missed)."""
    import numpy as np

    stamps = stamps_ms
    out_of_order = int(np.sum(stamps[1:] < np.maximum.accumulate(stamps)[:-1])) if stamps.size > 1 else 0
    order = np.argsort(stamps, kind="stable")
    rel = stamps[order] - stamps[order[0]]  # trace time, ms
    lo = window.start_s * 1e3
    keep = rel >= lo - _EDGE_MS
    if window.length_s is not None:
        keep &= rel < lo + window.length_s * 1e3 - _EDGE_MS
    order, rel = order[keep], rel[keep]
    if window.cap is not None:
        order, rel = order[:window.cap], rel[:window.cap]
    if not order.size:
        end = "" if window.length_s is None else f" to {window.start_s + window.length_s:g} s"
        raise UsageError(f"{path}: no request in the window from {window.start_s:g} s{end} of trace time "
                         f"(the trace spans {float((np.nanmax(stamps) - np.nanmin(stamps)) / 1e3):g} s): see "
                         "load.trace_start_s and load.trace_length_s")
    # from the window's start: a first line 0.3 s into the window is sent 0.3 s into the phase
    offsets = [int(x) for x in np.rint(np.maximum(rel - lo, 0.0) / window.speed * 1e6)]
    return order, offsets, out_of_order


def replay_info(offsets_ns: list[int] | tuple[int, ...], out_of_order: int, lines: int, window: Window,
                sharing: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a timed replay sends (meta.json's and the summary's `trace`): its requests, their span at
    its speed, the mean rate, the lines out of time order, the source's lines, the window, and the
    trace's own prefix sharing (None without hash ids)."""
    n = len(offsets_ns)
    span = (offsets_ns[-1] - offsets_ns[0]) / 1e9 if offsets_ns else 0.0
    return {"requests": n, "span_s": span, "mean_rate": (n - 1) / span if span > 0 else None,
            "out_of_order": out_of_order, "lines": lines, "speed": window.speed,
            "window_s": [window.start_s, window.length_s], "sharing": sharing}


def stamp_of(obj: Any) -> float | None:
    """A line's or row's `timestamp` (ms) when it is a usable one: a finite number >= 0."""
    ts: Any = obj.get("timestamp") if isinstance(obj, dict) else None
    return float(ts) if number(ts) and ts >= 0 else None


def number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


