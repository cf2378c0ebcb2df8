"""Console tables of a run summary (tabulate). Pure: summary dict in, text out."""

from __future__ import annotations

import math
from typing import Any

from tabulate import tabulate

from loadgate.metrics import METRIC_BY_NAME

TABLE_METRICS = ("ttft", "ttft_error_adjusted", "itl", "inter_chunk", "tpot", "e2e", "e2e_error_adjusted",
                 "tokens_per_chunk", "client_queue", "request_output_rate")
COLUMNS = ("p50", "p90", "p99")


def fmt(v: Any, digits: int = 2) -> str:
    """A figure for people: None is "n/a", infinity "+inf"."""
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    if isinstance(v, int):
        return str(v)
    return f"{v:,.{digits}f}"


def level_table(s: dict[str, Any]) -> str:
    rows = []
    for name in TABLE_METRICS:
        m = s["metrics"].get(name)
        if m is None:
            continue
        base = name.removesuffix("_error_adjusted")
        label = base + (" (errors as +inf)" if name.endswith("_error_adjusted") else "")
        rows.append([label, METRIC_BY_NAME[base].unit, m["count"], *(fmt(m[c]) for c in COLUMNS), fmt(m["mean"])])
    return tabulate(rows, headers=["metric", "unit", "n", *COLUMNS, "mean"], tablefmt="simple",
                    disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right", "right"))


def render_summary(summary: dict[str, Any], profile: Any | None = None) -> str:
    out: list[str] = []
    for level, s in summary["levels"].items():
        kind = "rate" if profile is not None and profile.load.rate is not None else "concurrency"
        t = s["throughput"]
        errs = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "none"
        out.append(f"\n{kind} {level}: {s['requests']} requests, {s['succeeded']} succeeded, "
                   f"{s['failed']} failed (errors: {errs})")
        out.append(level_table(s))
        out.append(f"output throughput {fmt(t['output_token_throughput'], 1)} tok/s · "
                   f"input {fmt(t['input_token_throughput'], 1)} tok/s · "
                   f"requests {fmt(t['request_throughput'], 2)} /s · window {fmt(t['window_s'], 2)} s")
    return "\n".join(out)
