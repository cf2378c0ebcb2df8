"""Side-by-side comparison tables: console, Markdown (fits a CI step summary), CSV, JSON."""

from __future__ import annotations

import csv
import io
from typing import Any

from tabulate import tabulate

from loadgate.analysis.abstats import FigureComparison, unit_of

COLUMNS = ["figure", "unit", "baseline", "candidate", "ratio", "interval", "p (Mann–Whitney)", "decision"]


def _unit(name: str) -> str:
    return unit_of(name)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def rows(comps: dict[str, FigureComparison]) -> list[list[Any]]:
    out = []
    for name, c in comps.items():
        a, b = _mean(c.baseline), _mean(c.candidate)
        if a is None and b is None:
            continue
        out.append([name, _unit(name), a, b, c.ratio, None if c.ci is None else f"{c.ci[0]:.3f}–{c.ci[1]:.3f}",
                    c.p_mannwhitney, c.decision])
    return out


def _fmt(v: Any, digits: int) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _pretty(rs: list[list[Any]]) -> list[list[str]]:
    return [[r[0], r[1], _fmt(r[2], 2), _fmt(r[3], 2), _fmt(r[4], 3), r[5] or "n/a", _fmt(r[6], 4), r[7]] for r in rs]


def as_table(comps: dict[str, FigureComparison], n_a: int, n_b: int) -> str:
    head = f"baseline: mean of {n_a} run(s) · candidate: mean of {n_b} run(s) · ratio = candidate / baseline"
    return head + "\n" + tabulate(_pretty(rows(comps)), headers=COLUMNS, tablefmt="simple", disable_numparse=True)


def as_markdown(comps: dict[str, FigureComparison], n_a: int, n_b: int) -> str:
    body = tabulate(_pretty(rows(comps)), headers=COLUMNS, tablefmt="github", disable_numparse=True)
    lines = [f"**Candidate vs baseline** ({n_b} vs {n_a} runs)", "", body]
    words = [c.words() for c in comps.values() if c.ratio is not None and c.decision in ("improved", "regressed")]
    if words:
        lines += [""] + [f"- {w}" for w in words]
    return "\n".join(lines)


def as_csv(comps: dict[str, FigureComparison]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["figure", "unit", "baseline_mean", "candidate_mean", "ratio", "ci_low", "ci_high", "p_mannwhitney",
                "p_welch_log", "decision", "baseline_runs", "candidate_runs"])
    for name, c in comps.items():
        w.writerow([name, _unit(name), _mean(c.baseline), _mean(c.candidate), c.ratio,
                    None if c.ci is None else c.ci[0], None if c.ci is None else c.ci[1], c.p_mannwhitney,
                    c.p_welch_log, c.decision, " ".join(f"{x:.6g}" for x in c.baseline),
                    " ".join(f"{x:.6g}" for x in c.candidate)])
    return buf.getvalue()
