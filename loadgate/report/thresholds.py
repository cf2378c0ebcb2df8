"""Thresholds for people: each outcome's measured figure and limit with units, in a table, per
level (the grammar and the judging are `loadgate.core.thresholds`')."""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgate.core.thresholds import DISPLAY_UNIT, LevelJudgement, Outcome


def format_figure(v: float | None, dimension: str, digits: int = 6, *, unit: bool = True) -> str:
    """A figure with its unit (unless `unit` is false) for people, to `digits` significant digits
    (ratios in percent, to 4): None is "n/a", infinity "+inf"."""
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    if dimension == "ratio":
        return f"{v * 100:.4g}%"
    text = f"{v:.0f}" if abs(v) >= 10 ** (digits - 1) else f"{v:.{digits}g}"
    shown = DISPLAY_UNIT[dimension]
    return f"{text} {shown}" if shown and unit else text


def render(outcomes: Sequence[Outcome]) -> str:
    """A table of outcomes (threshold, measured, limit, result) and a closing count line."""
    rows = []
    for o in outcomes:
        t = o.threshold
        result = "pass" if o.passed else "FAIL"
        rows.append([f"{t.metric} {t.text.strip()}", format_figure(o.measured, t.dimension),
                     format_figure(o.limit, t.dimension),
                     f"{result} ({o.reason})" if o.reason else result])
    if not rows:
        return "thresholds: none"
    passed = sum(o.passed for o in outcomes)
    from tabulate import tabulate

    table = tabulate(rows, headers=["threshold", "measured", "limit", "result"], tablefmt="simple",
                     disable_numparse=True, colalign=("left", "right", "right", "left"))
    return f"{table}\nthresholds: {passed} passed, {len(outcomes) - passed} failed"


def render_judged(judged: Sequence[LevelJudgement]) -> str:
    """Each level's table under its heading, as `loadgate run` prints it."""
    return "\n".join(f"\nthresholds ({j.where}):\n" + render(j.outcomes) for j in judged)
