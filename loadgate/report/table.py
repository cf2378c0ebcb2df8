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


def _acceptance_lines(a: dict[str, Any]) -> list[str]:
    out = []
    pr, ct, rc = a.get("per_request"), a.get("counters"), a.get("reconciliation")
    if pr:
        out.append(f"acceptance length {fmt(pr['acceptance_length'], 3)} from per-request fields ({pr['source']}): "
                   f"{pr['formula']}; {pr['accepted']} accepted / {pr['verify_steps']} verify steps")
    if ct and ct.get("drafts"):
        rate = "" if ct["acceptance_rate"] is None else f", draft acceptance rate {ct['acceptance_rate']:.1%}"
        out.append(f"acceptance length {fmt(ct['acceptance_length'], 3)} from /metrics: {ct['formula']}{rate}")
    if rc:
        out.append(("sources agree" if rc["agree"] else "SOURCES DISAGREE")
                   + f" (relative difference {rc['relative_difference']:.2%}, tolerance {rc['tolerance']:.0%})")
    return out


def render_summary(summary: dict[str, Any]) -> str:
    out: list[str] = []
    att = summary.get("attestation")
    if att:
        out.append(f"performance of the attested configuration (fingerprint {att['fingerprint_hash'][:16]}, "
                   f"{att['contract']['tier']} against baseline {att['baseline_sha256'][:12]})")
    elif summary.get("unverified"):
        out.append("UNVERIFIED configuration: no exactness check backs these figures")
    for level, s in summary["levels"].items():
        t = s["throughput"]
        errs = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "none"
        out.append(f"\n{summary.get('load', 'concurrency')} {level}: {s['requests']} requests, {s['succeeded']} "
                   f"succeeded, {s['failed']} failed (errors: {errs})")
        out.append(level_table(s))
        out.append(f"output throughput {fmt(t['output_token_throughput'], 1)} tok/s · "
                   f"input {fmt(t['input_token_throughput'], 1)} tok/s · "
                   f"requests {fmt(t['request_throughput'], 2)} /s · window {fmt(t['window_s'], 2)} s")
        if s.get("goodput"):
            g = s["goodput"]
            out.append(f"goodput {fmt(g['goodput_rps'], 2)} req/s ({g['fraction']:.1%} of requests met "
                       + ", ".join(f"{k} <= {v:g}" for k, v in g["slo_ms"].items()) + ")")
        out += _acceptance_lines(s.get("acceptance") or {})
        cc = s.get("contamination")
        if cc:
            out.append(("contamination check passed" if cc["clean"] else "CONTAMINATION") +
                       f": server counted {fmt(cc['server_requests'], 0)} requests / "
                       f"{fmt(cc['server_generation_tokens'], 0)} generated tokens in the window, the client "
                       f"{cc['client_requests']} / {cc['client_generation_tokens']}")
        tc = s.get("token_counts")
        if tc:
            out.append(f"token counts vs plan: {tc['prompt_mismatches']} prompt and {tc['completion_mismatches']} "
                       f"completion mismatches in {tc['checked']} requests"
                       + (f" ({tc['prompt_unverified']} prompts unverified: server gave no count)"
                          if tc["prompt_unverified"] else ""))
        gauges = s.get("server_gauges") or {}
        parts = [f"KV cache {v['min']:.2%}/{v['mean']:.2%}/{v['max']:.2%}" if k == "kv_cache_usage" else
                 f"{k} {fmt(v['min'], 1)}/{fmt(v['mean'], 1)}/{fmt(v['max'], 1)}" for k, v in gauges.items() if v]
        if parts:
            out.append("server (min/mean/max): " + " · ".join(parts))
        h = s.get("client_health")
        if h and h["loop_lag_ms"]["p99"] is not None:
            cpu = h["client_cpu_fraction"]
            out.append(f"client: loop lag p99 {fmt(h['loop_lag_ms']['p99'])} ms, GC pause max "
                       f"{fmt(h['gc_pause_max_ms'])} ms, CPU {'n/a' if cpu is None else f'{cpu:.0%}'} "
                       f"of a core, {h['workers']} worker(s)")
        for msg in s.get("invalid") or []:
            out.append(f"INVALID: {msg}")
    return "\n".join(out)
