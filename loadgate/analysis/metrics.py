"""Statistics of the registry's figures (`loadgate.core.figures`), computed from records only.

Percentiles use linear interpolation between order statistics (numpy's default). Error-adjusted
percentiles keep failed requests in the population with the value +inf, so a p99 over a run
with more than 1 % failures is +inf instead of a flattering number. A metric with no samples
is reported as None ("n/a"), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from loadgate.core.figures import ADJUSTED, PERCENTILES, distributions, figure
from loadgate.records import Record

if TYPE_CHECKING:
    import numpy as np

_BIG = 1e300  # stands for +inf inside interpolation; mapped back to inf afterwards


def stats(samples: Iterable[float] | np.ndarray) -> dict[str, float | int | None]:
    """count, p50 … p99.9, mean, std, min, max; None for each figure when there are no samples.
    +inf samples (failed requests) are allowed: percentiles above their rank come out +inf."""
    import numpy as np

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


def summarize(records: list[Record]) -> dict[str, Any]:
    """Every distribution's statistics over successful requests, the error-adjusted variants,
    throughput over the measured window, and errors by kind."""
    ok = [r for r in records if r.succeeded]
    failed = len(records) - len(ok)
    metrics: dict[str, Any] = {}
    for m in distributions():
        samples = samples_of(ok, m.name)
        metrics[m.name] = {"unit": m.unit, "per": m.per, **stats(samples)}
        if m.error_adjusted:
            adj = samples + [float("inf")] * failed
            metrics[m.name + ADJUSTED] = {"unit": m.unit, "per": m.per, **stats(adj)}
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            k = r.error.kind
            if k == "http_status" and r.status:
                k = f"http_{r.status}"
            errors[k] = errors.get(k, 0) + 1
    return {"requests": len(records), "succeeded": len(ok), "failed": failed, "errors": errors,
            "metrics": metrics, "throughput": throughput(records)}


def samples_of(records: list[Record], name: str) -> list[float]:
    """The samples of distribution `name` (`ttft`, or its variant `ttft_error_adjusted`) over
    `records`: the figure's samples of the successful ones, and for the variant +inf per failed one."""
    f = figure(name.removesuffix(ADJUSTED))
    assert f.samples is not None, name
    out = [s for r in records if r.succeeded for s in f.samples(r)]
    if name.endswith(ADJUSTED):
        out += [float("inf")] * sum(1 for r in records if not r.succeeded)
    return out


def throughput(records: list[Record], window_s: float | None = None) -> dict[str, float | None]:
    """Over the measured window W = [min origin, max end] of the measured requests (`window_s`: a
    window given, the level's for a group of its requests):
    request_throughput = successful requests / W; output_token_throughput = output tokens received
    by successful requests / W; input_token_throughput = planned prompt tokens of successful
    requests / W (seconds)."""
    if not records:
        return {"window_s": None, "request_throughput": None, "output_token_throughput": None,
                "input_token_throughput": None}
    w = window_s if window_s is not None else (max(r.end_ns for r in records) - min(r.origin_ns for r in records)) / 1e9
    ok = [r for r in records if r.succeeded]
    out_tok = sum(sum(r.chunk_tokens) for r in ok)
    in_tok = sum(r.prompt_tokens if r.prompt_tokens is not None else (r.prompt_tokens_planned or 0) for r in ok)
    if w <= 0:
        return {"window_s": w, "request_throughput": None, "output_token_throughput": None,
                "input_token_throughput": None}
    return {"window_s": w, "request_throughput": len(ok) / w, "output_token_throughput": out_tok / w,
            "input_token_throughput": in_tok / w}


def lag_percentiles(x: np.ndarray) -> dict[str, float | None]:
    """p50, p99, max and the sample count of a lag series (milliseconds); None without samples."""
    import numpy as np

    if x.size == 0:
        return {"p50": None, "p99": None, "max": None, "samples": 0}
    p50, p99 = np.percentile(x, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "max": float(x.max()), "samples": int(x.size)}
