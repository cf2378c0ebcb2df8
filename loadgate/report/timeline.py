"""The server's view over time, beside the client's throughput: from the run folder's metrics
series (`loadgate.core.series`) the engine's queue depth (waiting), running requests, KV-cache use,
preemptions and prefix-cache hits per second, and from the records the output tokens per second
the client received, on one time axis (seconds since meta.json's `t0_ns`; the series and the
records share its clock). The levels' measured windows are shaded.

`server_panels` computes the curves (pure, tested); `server_timeline` draws them into one PNG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgate.core.series import Series
from loadgate.engine.adapters import gauge_names
from loadgate.engine.adapters.base import Family, GaugeKey
from loadgate.records import Record
from loadgate.report.plots import _figure, _nothing
from loadgate.snapshot import Snapshot, first_name

TIMELINE_SIZE = (11.0, 12.0)


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    t_s: np.ndarray  # seconds since t0
    y: np.ndarray
    source: str  # the metric it was read from ("" when the server serves none)


def _gauge(scrapes: Sequence[tuple[float, Snapshot]], names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, str]:
    name = next((n for _, s in scrapes if (n := first_name(s, names)) is not None), None)
    if name is None:
        return np.array([]), np.array([]), ""
    pts = [(t, v) for t, s in scrapes if (v := s.total(name)) is not None]
    return np.array([t for t, _ in pts]), np.array([v for _, v in pts]), name


def _rate(scrapes: Sequence[tuple[float, Snapshot]], name: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """A counter's increase per second between successive scrapes, at each interval's end."""
    t, v, got = _gauge(scrapes, (name,) if name else ())
    if t.size < 2:
        return np.array([]), np.array([]), got
    dt = np.diff(t)
    keep = dt > 0
    return t[1:][keep], np.maximum(np.diff(v)[keep], 0.0) / dt[keep], got  # a restart's reset reads 0


def client_tokens_per_s(records: Sequence[Record], bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Output tokens the client received per second, in bins of `bin_s` (bin centres, rates)."""
    times = [(r.start_ns + c) / 1e9 for r in records if r.succeeded for c in r.chunk_ns]
    weights = [n for r in records if r.succeeded for n in r.chunk_tokens]
    if not times:
        return np.array([]), np.array([])
    t = np.asarray(times)
    edges = np.arange(t.min(), t.max() + bin_s, bin_s)
    if edges.size < 2:
        edges = np.array([t.min(), t.min() + bin_s])
    counts, _ = np.histogram(t, bins=edges, weights=np.asarray(weights, dtype=float))
    return (edges[:-1] + edges[1:]) / 2, counts / bin_s


def server_panels(series: Series, records: Sequence[Record], t0_ns: int, family: Family | None,
                  bin_s: float = 1.0) -> list[Panel]:
    scrapes = [((t - t0_ns) / 1e9, s) for t, s in series.of("server")]
    panels = []
    gauges: tuple[tuple[str, str, GaugeKey], ...] = (
        ("Queue depth (waiting requests)", "requests", "waiting"), ("Running requests", "requests", "running"),
        ("KV-cache use", "fraction", "kv_cache_usage"))
    for title, unit, key in gauges:
        t, y, src = _gauge(scrapes, gauge_names(key))
        panels.append(Panel(title, unit, t, y, src))
    t, y, src = _rate(scrapes, family.preemptions if family else None)
    panels.append(Panel("Preemptions", "per s", t, y, src))
    t, y, src = _rate(scrapes, family.prefix_cache[0] if family and family.prefix_cache else None)
    panels.append(Panel("Prefix-cache hits", "tokens / s", t, y, src))
    t, y = client_tokens_per_s(records, max(bin_s, float(series.header.get("interval_s") or 0)))
    panels.append(Panel("Output tokens received by the client", "tokens / s", t, y, "records"))
    return panels


def windows(series: Series, t0_ns: int) -> list[tuple[str, float, float]]:
    """(level, begin s, end s) of each measured window the series marks."""
    begins: dict[str, float] = {}
    out = []
    for t, what, level in series.marks:
        if what == "begin":
            begins[level] = (t - t0_ns) / 1e9
        elif level in begins:
            out.append((level, begins.pop(level), (t - t0_ns) / 1e9))
    return out


def server_timeline(panels: Sequence[Panel], spans: Sequence[tuple[str, float, float]], out: Path) -> Path:
    with _figure(TIMELINE_SIZE, out) as fig:
        axes = fig.subplots(len(panels), 1, sharex=True)
        for ax, p in zip(axes, panels, strict=True):
            for k, (level, a, b) in enumerate(spans):
                ax.axvspan(a, b, color="#1f77b4" if k % 2 == 0 else "#2ca02c", alpha=0.08, lw=0)
                if ax is axes[-1]:
                    ax.text((a + b) / 2, 0.96, f"level {level}", transform=ax.get_xaxis_transform(),
                            ha="center", va="top", fontsize=8, color="0.3")
            if p.t_s.size:
                ax.plot(p.t_s, p.y, lw=1.3, marker="." if p.t_s.size < 60 else None,
                        color="#d62728" if p.source == "records" else "#1f77b4")
                ax.set_ylim(bottom=0.0)
            else:
                _nothing(ax, "the server serves no such metric")
            ax.set_title(f"{p.title} ({p.source})" if p.source else p.title, fontsize=10, loc="left")
            ax.set_ylabel(p.unit)
        axes[-1].set_xlabel("seconds since the run's start")
        fig.suptitle("The server over time (its /metrics series) beside the client's throughput")
    return out
