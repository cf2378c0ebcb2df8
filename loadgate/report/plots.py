"""PNG plots of runs: latency CDFs, inter-token latency by output position, tokens per chunk, a
concurrency sweep, and figures by time slice. Each plot function takes already-loaded data and an
output path, writes one PNG and returns the path.

Samples always come from the metric definitions in `loadgate.core.figures` (`figure(name).samples`)
over successful records, so a plot shows exactly what the summary tables count. matplotlib is the
optional `plot` extra: it is imported lazily, and only its Agg canvas is used (no pyplot, no global
backend switch), so plotting works headless and leaves the caller's matplotlib state alone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from loadgate.analysis.metrics import stats
from loadgate.analysis.summary import LevelSummary
from loadgate.core.figures import figure
from loadgate.errors import UsageError
from loadgate.records import Record

DPI = 110
CDF_PANEL_SIZE = (5.0, 4.6)  # inches per metric panel of `latency_cdfs`, plus CDF_LEGEND_ROW per run
CDF_LEGEND_ROW = 0.2
ITL_SIZE = (9.0, 5.0)
CHUNK_SIZE = (9.0, 5.0)
SWEEP_SIZE = (15.0, 4.6)
SLICES_PANEL = (4.0, 3.6)  # inches per panel of `slices`: throughput, then one per figure the slices keep
_MISSING = "plots need matplotlib: pip install 'loadgate[plot]'"
_STYLE: dict[str, Any] = {"font.size": 10.0, "axes.titlesize": 12.0, "axes.labelsize": 10.5, "legend.fontsize": 9.0,
          "xtick.labelsize": 9.5, "ytick.labelsize": 9.5, "figure.titlesize": 12.5,
          "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6}


def cdf_size(n_metrics: int, n_runs: int) -> tuple[float, float]:
    """Figure size (inches) of `latency_cdfs`: a panel per metric, taller by a legend row per run."""
    return CDF_PANEL_SIZE[0] * n_metrics, CDF_PANEL_SIZE[1] + CDF_LEGEND_ROW * n_runs


# ---------------------------------------------------------------------------------------------
# Data behind the plots (pure numpy; testable without matplotlib)


def _samples_fn(name: str) -> Any:
    fn = figure(name).samples
    if fn is None:
        raise ValueError(f"{name} is not a distribution")
    return fn


def metric_samples(records: Sequence[Record], name: str) -> np.ndarray:
    """All samples of metric `name` over the successful records, as float64."""
    fn = _samples_fn(name)
    return np.asarray([s for r in records if r.succeeded for s in fn(r)], dtype=np.float64)


def itl_position_samples(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """(positions, ITL ms) of every inter-token latency sample over successful records.

    Values come from the `itl` metric itself; positions are the 1-based output positions of the
    tokens they belong to: chunk j >= 2 carrying n_j tokens gives n_j samples at positions
    n_1 + ... + n_{j-1} + 1 .. n_1 + ... + n_j (the first chunk's tokens have no sample)."""
    fn = _samples_fn("itl")
    pos: list[int] = []
    val: list[float] = []
    for r in records:
        if not r.succeeded:
            continue
        n = r.chunk_tokens
        done = n[0] if n else 0
        here: list[int] = []
        for k in n[1:]:
            if k > 0:
                here.extend(range(done + 1, done + k + 1))
            done += max(k, 0)
        vals = fn(r)
        if len(vals) != len(here):  # the metric changed its definition: refuse to mislabel it
            raise ValueError(f"record {r.i}: {len(vals)} ITL samples but {len(here)} token positions")
        pos += here
        val += vals
    return np.asarray(pos, dtype=np.int64), np.asarray(val, dtype=np.float64)


def bucket_width(pos: np.ndarray, *, max_buckets: int = 40, min_per_bucket: int = 100) -> int:
    """Positions per bucket: wide enough for about `min_per_bucket` samples per bucket on average
    (so median and p90 are steady) and for at most `max_buckets` buckets."""
    if pos.size == 0:
        return 1
    top = int(pos.max())
    return max(1, math.ceil(top / max_buckets), math.ceil(min_per_bucket * top / pos.size))


def bucket_stats(pos: np.ndarray, val: np.ndarray, width: int | None = None, *,
                 min_samples: int = 10) -> dict[str, np.ndarray]:
    """Median and p90 of `val` per bucket of `width` consecutive positions (1..w, w+1..2w, ...;
    default `bucket_width(pos)`); buckets with fewer than `min_samples` samples are dropped.
    Keys: center (mid position of the bucket), p50, p90, count."""
    width = width or bucket_width(pos)
    centers, p50, p90, count = [], [], [], []
    idx = (pos - 1) // width
    for b in np.unique(idx):
        v = val[idx == b]
        if v.size < min_samples:
            continue
        q50, q90 = np.percentile(v, [50, 90])
        centers.append(b * width + (width + 1) / 2)
        p50.append(q50)
        p90.append(q90)
        count.append(v.size)
    return {"center": np.asarray(centers, dtype=np.float64), "p50": np.asarray(p50, dtype=np.float64),
            "p90": np.asarray(p90, dtype=np.float64), "count": np.asarray(count, dtype=np.int64)}


def chunk_token_fractions(records: Sequence[Record]) -> dict[int, float]:
    """Fraction of content chunks carrying each token count, over successful records (sums to 1;
    empty when there are no chunks)."""
    counts = Counter(int(x) for x in metric_samples(records, "tokens_per_chunk"))
    total = sum(counts.values())
    return {k: counts[k] / total for k in sorted(counts)} if total else {}


# ---------------------------------------------------------------------------------------------
# matplotlib plumbing


@contextmanager
def _figure(size: tuple[float, float], out: Path) -> Iterator[Any]:
    """A constrained-layout Figure on an Agg canvas, with loadgate's style; saved to `out` on exit."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise UsageError(_MISSING) from e
    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]  # keys are valid rcParams
        fig = Figure(figsize=size, dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        yield fig
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=DPI, format="png")


def _colors(n: int) -> list[str]:
    base = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
            "#7f7f7f", "#bcbd22"]
    return [base[i % len(base)] for i in range(n)]


def _wide_range(x: np.ndarray) -> bool:
    """True when the positive values span more than two decades (worth a log axis)."""
    pos = x[x > 0]
    return pos.size > 1 and float(pos.max()) / float(pos.min()) > 100.0


def _nothing(ax: Any, text: str = "no samples") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _legend_below(ax: Any, **kw: Any) -> None:
    """A legend under the axes (never over the data), as many entries a row (at most 4) as fit
    the figure's width."""
    labels = [h.get_label() for h in kw["handles"]] if "handles" in kw else ax.get_legend_handles_labels()[1]
    if not labels:
        return
    width_px = ax.figure.get_figwidth() * DPI
    per_entry_px = 50 + 6.5 * max(len(str(t)) for t in labels)  # handle + text at 9 pt, roughly
    ncols = max(1, min(len(labels), 4, int(width_px * 0.95 // per_entry_px)))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=ncols, framealpha=0.9, **kw)


def _plain_log_ticks(axis: Any) -> None:
    """Log-axis tick labels as plain numbers (0.1, 1, 10) rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _unit(name: str) -> str:
    return figure(name).unit


# ---------------------------------------------------------------------------------------------
# Plots


def latency_cdfs(runs: Mapping[str, Sequence[Record]], out: Path,
                 metrics: Sequence[str] = ("ttft", "e2e", "itl")) -> Path:
    """One panel per metric: the empirical CDF of each labelled run's samples over its successful
    records, p50 (circle) and p99 (triangle) marked with thin vertical lines; x in the metric's
    unit, log scale when the samples span more than two decades."""
    colors = _colors(len(runs))
    size = cdf_size(len(metrics), len(runs))
    with _figure(size, out) as fig:
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
        for ax, name in zip(axes, metrics, strict=True):
            unit = _unit(name)
            samples = {label: np.sort(metric_samples(recs, name)) for label, recs in runs.items()}
            every = np.concatenate([x for x in samples.values()]) if samples else np.zeros(0)
            log = every.size > 0 and _wide_range(every)
            for (label, x), color in zip(samples.items(), colors, strict=True):
                if x.size == 0:
                    continue
                y = np.arange(1, x.size + 1) / x.size
                s = stats(x)
                ax.step(np.concatenate([[x[0]], x]), np.concatenate([[0.0], y]), where="post", color=color,
                        lw=1.6, label=f"{label}: p50 {s['p50']:.3g}, p99 {s['p99']:.3g} {unit}")
                for q, yq, marker, ls in ((s["p50"], 0.5, "o", ":"), (s["p99"], 0.99, "^", "--")):
                    if q is None or (log and q <= 0):  # e.g. ITL p50 0 (tokens read together): no place on a log axis
                        continue
                    ax.axvline(q, color=color, lw=0.8, ls=ls, alpha=0.7)
                    ax.plot([q], [yq], marker=marker, color=color, ms=6, mec="white", mew=0.8, clip_on=False,
                            zorder=5)
            ax.set_title(figure(name).title or name)
            ax.set_xlabel(f"{name} ({unit})")
            ax.set_ylabel("fraction of samples ≤ x")
            ax.set_ylim(0.0, 1.02)
            ax.set_yticks(np.linspace(0.0, 1.0, 6))
            if every.size == 0:
                _nothing(ax)
                continue
            if log:
                ax.set_xscale("log")
                _plain_log_ticks(ax.xaxis)
                pos = every[every > 0]
                ax.set_xlim(float(pos.min()) / 1.15, float(pos.max()) * 1.15)
            # below the axes: a CDF fills its panel, so any legend inside would cover some of it
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), framealpha=0.9)
        fig.suptitle("Empirical CDF over successful requests  (● p50, ▲ p99)")
    return out


def itl_by_position(runs: Mapping[str, Sequence[Record]], out: Path) -> Path:
    """Inter-token latency against output token position: median (solid) and p90 (dashed) per
    bucket of positions (one bucket width for all runs), one line pair per labelled run."""
    from matplotlib.lines import Line2D

    colors = _colors(len(runs))
    samples = {label: itl_position_samples(recs) for label, recs in runs.items()}
    width = max((bucket_width(pos) for pos, _ in samples.values() if pos.size), default=1)
    with _figure(ITL_SIZE, out) as fig:
        ax = fig.subplots()
        handles, every = [], []
        for ((label, (pos, val)), color) in zip(samples.items(), colors, strict=True):
            b = bucket_stats(pos, val, width)
            if b["center"].size == 0:
                continue
            every += [b["p50"], b["p90"]]
            ax.plot(b["center"], b["p50"], color=color, lw=1.8, marker="o", ms=3)
            ax.plot(b["center"], b["p90"], color=color, lw=1.3, ls="--")
            handles.append(Line2D([], [], color=color, lw=2.5, label=label))
        ax.set_title("Inter-token latency by output position")
        ax.set_xlabel(f"output token position (buckets of {width} position{'s' if width > 1 else ''})")
        ax.set_ylabel(f"inter-token latency ({_unit('itl')})")
        if not every:
            _nothing(ax)
            return out
        allv = np.concatenate(every)
        if _wide_range(allv):
            ax.set_yscale("log")
            _plain_log_ticks(ax.yaxis)
        else:
            ax.set_ylim(bottom=0.0, top=float(allv.max()) * 1.08)
        ax.set_xlim(left=0.0)
        handles += [Line2D([], [], color="0.3", lw=1.8, marker="o", ms=3, label="median"),
                    Line2D([], [], color="0.3", lw=1.3, ls="--", label="p90")]
        _legend_below(ax, handles=handles)
    return out


def tokens_per_chunk(runs: Mapping[str, Sequence[Record]], out: Path) -> Path:
    """Histogram of tokens per content chunk, as fractions of each run's chunks, bars of the runs
    side by side at each integer count."""
    colors = _colors(len(runs))
    fracs = {label: chunk_token_fractions(recs) for label, recs in runs.items()}
    keys = sorted({k for f in fracs.values() for k in f})
    with _figure(CHUNK_SIZE, out) as fig:
        ax = fig.subplots()
        n = max(len(runs), 1)
        width = 0.8 / n
        for i, ((label, f), color) in enumerate(zip(fracs.items(), colors, strict=True)):
            if not f:
                continue
            xs = np.asarray(list(f), dtype=np.float64) + (i - (n - 1) / 2) * width
            mean = sum(k * v for k, v in f.items())
            ax.bar(xs, list(f.values()), width=width * 0.95, color=color, label=f"{label} (mean {mean:.2f})")
        ax.set_title(figure("tokens_per_chunk").title)
        ax.set_xlabel("tokens in one chunk")
        ax.set_ylabel("fraction of chunks")
        if not keys:
            _nothing(ax, "no chunks")
        else:
            ax.set_xticks(keys)
            ax.set_xlim(min(keys) - 0.6, max(keys) + 0.6)
            ax.set_ylim(0.0, max(v for f in fracs.values() for v in f.values()) * 1.08)
            ax.grid(axis="x", visible=False)
            _legend_below(ax)
    return out


def _none_nan(v: Any) -> float:
    """A figure to draw: NaN (a gap) for a missing or infinite one."""
    return float("nan") if v is None or (isinstance(v, float) and math.isinf(v)) else float(v)


def _p(s: LevelSummary, metric: str, q: str) -> float:
    return _none_nan((s.metrics.get(metric) or {}).get(q))


def sweep(levels: Sequence[tuple[float, LevelSummary]] | Mapping[str, Sequence[tuple[float, LevelSummary]]],
          out: Path, slo: Mapping[str, float | None] | None = None, *, x_label: str = "concurrency") -> Path:
    """A load sweep from (level, level_summary) pairs: output token throughput, TTFT p99, and
    per-token latency p99 (ITL solid, TPOT dashed) against the level, one panel each; SLO
    `ttft_ms` / `tpot_ms` drawn as horizontal lines. Give a mapping label -> pairs to overlay
    several runs. Non-finite or missing figures leave a gap."""
    series = dict(levels) if isinstance(levels, Mapping) else {"": levels}
    colors = _colors(len(series))
    slo = slo or {}
    with _figure(SWEEP_SIZE, out) as fig:
        ax_tp, ax_ttft, ax_tok = fig.subplots(1, 3)
        xs_all: set[float] = set()
        for (label, pairs), color in zip(series.items(), colors, strict=True):
            pairs = sorted(((float(lv), s) for lv, s in pairs), key=lambda p: p[0])
            x = [lv for lv, _ in pairs]
            xs_all.update(x)
            tag = f"{label} " if label else ""
            tp = [float("nan") if (v := s.throughput.output_token_throughput) is None
                  else float(v) for _, s in pairs]
            ax_tp.plot(x, tp, color=color, marker="o", lw=1.8, label=label or None)
            ax_ttft.plot(x, [_p(s, "ttft", "p99") for _, s in pairs], color=color, marker="o", lw=1.8,
                         label=f"{tag}TTFT p99")
            ax_tok.plot(x, [_p(s, "itl", "p99") for _, s in pairs], color=color, marker="o", lw=1.8,
                        label=f"{tag}ITL p99")
            ax_tok.plot(x, [_p(s, "tpot", "p99") for _, s in pairs], color=color, marker="s", ms=4, lw=1.2,
                        ls="--", label=f"{tag}TPOT p99")
        for ax, key, name in ((ax_ttft, "ttft_ms", "TTFT"), (ax_tok, "tpot_ms", "TPOT")):
            limit = slo.get(key)
            if limit is not None:
                ax.axhline(float(limit), color="0.25", lw=1.2, ls="-.", label=f"{name} SLO {float(limit):g} ms")
        ax_tp.set_title(figure("output_throughput").title)
        ax_tp.set_ylabel("output tokens / s")
        ax_ttft.set_title(figure("ttft").title + ", p99")
        ax_ttft.set_ylabel("TTFT p99 (ms)")
        ax_tok.set_title("Per-token latency, p99")
        ax_tok.set_ylabel("p99 (ms)")
        ticks = sorted(xs_all)
        for ax in (ax_tp, ax_ttft, ax_tok):
            ax.set_xlabel(x_label)
            if ticks and ticks[0] > 0 and ticks[-1] / ticks[0] >= 8:
                ax.set_xscale("log", base=2)
            if ticks:
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
                ax.minorticks_off()
            ax.set_ylim(bottom=0.0)
            handles, _ = ax.get_legend_handles_labels()
            if handles:
                ax.legend(loc="best", framealpha=0.9)
        fig.suptitle(f"Load sweep: figures against {x_label}")
    return out


def slices(levels: Mapping[str, Mapping[str, Any]], out: Path) -> Path:
    """Figures by time slice (`LevelSummary.slices`, one labelled series per level): output tokens per
    second, then p50 (solid) and p99 (dashed) of each figure the slices keep, against the slice's middle
    in seconds into its level's window; a partial last slice drawn hollow. A slice without samples leaves
    a gap."""
    from matplotlib.lines import Line2D

    names = next((list(sl["slices"][0]["metrics"]) for sl in levels.values() if sl["slices"]), [])
    colors = _colors(len(levels))
    with _figure((SLICES_PANEL[0] * (1 + len(names)), SLICES_PANEL[1]), out) as fig:
        axes = fig.subplots(1, 1 + len(names), squeeze=False)[0]
        for sl, color in zip(levels.values(), colors, strict=True):
            xs = [(x["start_s"] + x["end_s"]) / 2 for x in sl["slices"]]
            hollow = ["white" if x["partial"] else color for x in sl["slices"]]
            ys = [_none_nan(x["output_throughput"]) for x in sl["slices"]]
            axes[0].plot(xs, ys, color=color, lw=1.6)
            axes[0].scatter(xs, ys, color=hollow, edgecolors=color, s=16, zorder=3)
            for ax, name in zip(axes[1:], names, strict=True):
                for q, ls in (("p50", "-"), ("p99", "--")):
                    ax.plot(xs, [_none_nan(x["metrics"][name][q]) for x in sl["slices"]], color=color, lw=1.5, ls=ls,
                            marker="o", ms=3)
        axes[0].set_title("Output tokens / s (by arrival)")
        axes[0].set_ylabel("tok/s")
        for ax, name in zip(axes[1:], names, strict=True):
            ax.set_title(figure(name).title or name)
            ax.set_ylabel(f"{name} ({_unit(name)})")
        step = next((sl["slice_s"] for sl in levels.values()), 0)
        for ax in axes:
            ax.set_xlabel(f"seconds into the level (slices of {step:g} s)")
            ax.set_ylim(bottom=0.0)
        handles = [Line2D([], [], color=c, lw=2.5, label=label) for label, c in zip(levels, colors, strict=True)]
        handles += [Line2D([], [], color="0.3", lw=1.5, label="p50"), Line2D([], [], color="0.3", lw=1.5, ls="--",
                                                                         label="p99")]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), framealpha=0.9)
        fig.suptitle("Figures by time slice: requests by start, tokens by arrival")
    return out
