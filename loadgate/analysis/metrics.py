"""Declared metrics, computed from records only. Each is defined once, here, with its formula.

Notation for one request r: `origin(r)` is its intended start in an open loop (so a slow server
cannot hide queueing) and its actual start (`start_ns`) in a closed loop; `t_j` is the arrival
time of its j-th content-bearing chunk (j = 1..m) and `n_j` the tokens that chunk carried;
`end(r)` is when its last byte arrived. A request *succeeded* when it has no error.

Percentiles use linear interpolation between order statistics (numpy's default). Error-adjusted
percentiles keep failed requests in the population with the value +inf, so a p99 over a run
with more than 1 % failures is +inf instead of a flattering number. A metric with no samples
is reported as None ("n/a"), never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
_BIG = 1e300  # stands for +inf inside interpolation; mapped back to inf afterwards


@dataclass(frozen=True)
class MetricDef:
    name: str
    unit: str
    per: str  # "request", "chunk" or "token": what one sample is
    doc: str
    fn: Callable[[dict[str, Any]], list[float]]  # samples of one successful record


def _origin(r: dict[str, Any]) -> int:
    return r["intended_ns"] if r.get("intended_ns") is not None else r["start_ns"]


def _ttft(r: dict[str, Any]) -> list[float]:
    if not r["chunk_ns"]:
        return []
    return [(r["start_ns"] + r["chunk_ns"][0] - _origin(r)) / 1e6]


def _e2e(r: dict[str, Any]) -> list[float]:
    return [(r["end_ns"] - _origin(r)) / 1e6]


def _inter_chunk(r: dict[str, Any]) -> list[float]:
    c = r["chunk_ns"]
    return [(c[j] - c[j - 1]) / 1e6 for j in range(1, len(c))]


def _itl(r: dict[str, Any]) -> list[float]:
    c, n = r["chunk_ns"], r["chunk_tokens"]
    out: list[float] = []
    for j in range(1, len(c)):
        if n[j] > 0:
            out.extend([(c[j] - c[j - 1]) / 1e6 / n[j]] * n[j])
    return out


def _tpot(r: dict[str, Any]) -> list[float]:
    c, n = r["chunk_ns"], r["chunk_tokens"]
    total = sum(n)
    if len(c) < 2 or total < 2:
        return []
    return [(c[-1] - c[0]) / 1e6 / (total - 1)]


def _tokens_per_chunk(r: dict[str, Any]) -> list[float]:
    return [float(x) for x in r["chunk_tokens"]]


def _queue(r: dict[str, Any]) -> list[float]:
    return [(r["start_ns"] - (r["intended_ns"] if r.get("intended_ns") is not None else r["ready_ns"])) / 1e6]


def _request_rate(r: dict[str, Any]) -> list[float]:
    total = sum(r["chunk_tokens"])
    dt = (r["end_ns"] - _origin(r)) / 1e9
    return [total / dt] if dt > 0 and total else []


METRICS: tuple[MetricDef, ...] = (
    MetricDef("ttft", "ms", "request",
              "time to first token: t_1 - origin(r), the first content-bearing chunk", _ttft),
    MetricDef("itl", "ms", "token",
              "inter-token latency: for each chunk j >= 2, n_j samples of (t_j - t_{j-1}) / n_j; a "
              "chunk carrying several tokens spreads its gap over them (tokens in the first chunk "
              "beyond the first have no gap and give no sample)", _itl),
    MetricDef("inter_chunk", "ms", "chunk",
              "inter-chunk latency: t_j - t_{j-1} for j >= 2, whatever the chunk carried", _inter_chunk),
    MetricDef("tpot", "ms", "request",
              "time per output token after the first: (t_m - t_1) / (sum_j n_j - 1), requests with "
              ">= 2 tokens", _tpot),
    MetricDef("e2e", "ms", "request", "end-to-end latency: end(r) - origin(r)", _e2e),
    MetricDef("tokens_per_chunk", "tokens", "chunk", "n_j for every content-bearing chunk", _tokens_per_chunk),
    MetricDef("client_queue", "ms", "request",
              "client-side wait before sending: start - ready (closed loop: the worker was free) or "
              "start - intended start (open loop: schedule lag plus max_in_flight wait)", _queue),
    MetricDef("request_output_rate", "tok/s", "request",
              "one request's output tokens / (end(r) - origin(r))", _request_rate),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}
# Metrics whose error-adjusted variant is meaningful (a failure is +inf latency).
LATENCY_METRICS = ("ttft", "tpot", "e2e")


def stats(samples: Iterable[float] | np.ndarray) -> dict[str, float | int | None]:
    """count, p50 … p99.9, mean, std, min, max; None for each figure when there are no samples.
    +inf samples (failed requests) are allowed: percentiles above their rank come out +inf."""
    x = np.asarray(samples if isinstance(samples, np.ndarray) else list(samples), dtype=np.float64)
    out: dict[str, float | int | None] = {"count": int(x.size)}
    if x.size == 0:
        out.update({f"p{q:g}": None for q in PERCENTILES} | dict.fromkeys(("mean", "std", "min", "max")))
        return out
    inf = np.isinf(x)
    xs = np.where(inf, _BIG, x)
    for q, v in zip(PERCENTILES, np.percentile(xs, PERCENTILES), strict=True):
        out[f"p{q:g}"] = float("inf") if v >= _BIG / 1e10 else float(v)
    out["mean"] = float("inf") if inf.any() else float(x.mean())
    out["std"] = float("inf") if inf.any() else float(x.std(ddof=1)) if x.size > 1 else 0.0
    out["min"], out["max"] = float(x.min()), float(x.max())
    return out


def is_success(r: dict[str, Any]) -> bool:
    return r.get("error") is None


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every metric's statistics over successful requests, the error-adjusted variants of the
    latency metrics, throughput over the measured window, and errors by kind."""
    ok = [r for r in records if is_success(r)]
    failed = len(records) - len(ok)
    metrics: dict[str, Any] = {}
    for m in METRICS:
        samples = [s for r in ok for s in m.fn(r)]
        metrics[m.name] = {"unit": m.unit, "per": m.per, **stats(samples)}
        if m.name in LATENCY_METRICS:
            adj = samples + [float("inf")] * failed
            metrics[m.name + "_error_adjusted"] = {"unit": m.unit, "per": m.per, **stats(adj)}
    errors: dict[str, int] = {}
    for r in records:
        if r.get("error"):
            k = r["error"]["kind"]
            if k == "http_status" and r.get("status"):
                k = f"http_{r['status']}"
            errors[k] = errors.get(k, 0) + 1
    return {"requests": len(records), "succeeded": len(ok), "failed": failed, "errors": errors,
            "metrics": metrics, "throughput": throughput(records)}


def throughput(records: list[dict[str, Any]]) -> dict[str, float | None]:
    """Over the measured window W = [min origin, max end] of the measured requests:
    request_throughput = successful requests / W; output_token_throughput = output tokens received
    by successful requests / W; input_token_throughput = planned prompt tokens of successful
    requests / W (seconds)."""
    if not records:
        return {"window_s": None, "request_throughput": None, "output_token_throughput": None,
                "input_token_throughput": None}
    w = (max(r["end_ns"] for r in records) - min(_origin(r) for r in records)) / 1e9
    ok = [r for r in records if is_success(r)]
    out_tok = sum(sum(r["chunk_tokens"]) for r in ok)
    in_tok = sum(r["prompt_tokens"] if r.get("prompt_tokens") is not None else r["prompt_tokens_planned"] for r in ok)
    if w <= 0:
        return {"window_s": w, "request_throughput": None, "output_token_throughput": None,
                "input_token_throughput": None}
    return {"window_s": w, "request_throughput": len(ok) / w, "output_token_throughput": out_tok / w,
            "input_token_throughput": in_tok / w}
