"""The capacity search's plot (docs/capacity.md): one panel per threshold, its figure on every probe
against the probe's load, the 95 % confidence interval as an error bar (an end the samples cannot
bound is left off), the threshold's limit as a horizontal line, passing probes (green circles) told
apart from failing ones (red crosses), each numbered in the order it ran, and the answer marked by a
vertical line. Data from the summary's `search` section only."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from loadgate.analysis.capacity import STOPPED, SearchSection, ThresholdEvidence
from loadgate.report import plots
from loadgate.report.capacity import heads

PANEL = (5.0, 4.2)  # inches per panel
PER_ROW = 3
PASS, FAIL = "#1b7a2f", "#b00020"


def _scale(e: ThresholdEvidence) -> float:
    """Ratios are drawn in percent."""
    return 100.0 if e.unit is None and e.statistic != "count" else 1.0


def _finite(v: float | None) -> bool:
    return v is not None and not math.isinf(v) and not math.isnan(v)


def tick_labels(xs: list[float], log: bool, gap: float = 0.1) -> list[str]:
    """Labels for the probes' loads (sorted): a load closer than `gap` of the axis's span to the last
    labelled one keeps its tick but no label, so that bisection's close loads do not overprint."""
    pos = [math.log2(x) for x in xs] if log else list(xs)
    span = (pos[-1] - pos[0]) or 1.0
    out, last = [], None
    for x, p in zip(xs, pos, strict=True):
        if last is None or (p - last) / span >= gap:
            out.append(f"{x:g}")
            last = p
        else:
            out.append("")
    return out


def search_plot(section: SearchSection, out: Path) -> Path:
    """Write the plot of `section` to `out` (PNG) and return its path."""
    titles = heads(section)
    n = max(len(titles), 1)
    cols = min(n, PER_ROW)
    rows = math.ceil(n / cols)
    probes = list(enumerate(section.probes, 1))
    xs = sorted({p.load for p in section.probes})
    with plots._figure((PANEL[0] * cols, PANEL[1] * rows), out) as fig:
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax in axes[n:]:
            ax.set_visible(False)
        for i, title in enumerate(titles):
            ax = axes[i]
            first = section.probes[0].thresholds[i]
            k = _scale(first)
            drawn = False
            for num, p in probes:
                e = p.thresholds[i]
                if not _finite(e.observed):
                    continue
                assert e.observed is not None
                y = e.observed * k
                low = e.ci.low * k if _finite(e.ci.low) and e.ci.low is not None else y
                high = e.ci.high * k if _finite(e.ci.high) and e.ci.high is not None else y
                color = PASS if p.passed else FAIL
                ax.errorbar([p.load], [y], yerr=[[y - low], [high - y]], fmt="o" if p.passed else "X", color=color,
                            ms=7, capsize=4, lw=1.3, zorder=3)
                ax.annotate(str(num), (p.load, y), textcoords="offset points", xytext=(6, 5), fontsize=8,
                            color="0.3")
                drawn = True
            if first.limit is not None and _finite(first.limit):
                ax.axhline(first.limit * k, color="0.25", lw=1.2, ls="--", label="limit")
            if section.answer is not None:
                what = "highest passing so far" if section.ended == STOPPED else "answer"
                ax.axvline(section.answer, color="#1f77b4", lw=1.2, ls=":", label=f"{what} {section.answer:g}")
            unit = "%" if k == 100.0 else (first.unit or "")
            ax.set_title(title)
            ax.set_ylabel(f"{first.metric} {first.statistic or ''}".strip() + (f" ({unit})" if unit else ""))
            ax.set_xlabel("request rate (req/s)" if section.over == "rate" else "concurrency")
            log = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] >= 8
            if log:
                ax.set_xscale("log", base=2)
            if xs:
                ax.set_xticks(xs, tick_labels(xs, log))
                ax.minorticks_off()
            if not drawn:
                plots._nothing(ax, "no finite values")
            ax.legend(loc="best", framealpha=0.9)
        words = (f"Capacity search over {section.over}: each threshold's figure per probe, 95 % intervals "
                 "(● pass, ✕ fail; numbers: the order the probes ran)")
        fig.suptitle(textwrap.fill(words, width=38 * cols), fontsize=10)
    return out
