"""The figure registry: every figure loadgate reports, declared once with its formula.

Metrics (`loadgate.analysis.metrics`), thresholds (`loadgate.core.thresholds`), A/B statistics
(`loadgate.analysis.abstats`), the console, markdown, CSV and HTML tables and the profile's
`ab.decide_on` all derive their lists from `FIGURES`. Adding a figure is one entry here.

A figure is a *distribution* (samples per request, chunk or token of successful requests; the
summary keeps count, percentiles, mean, min, max under `metrics.<name>`) or a *scalar* (one value
per load level, found in the level summary at `path`).

Notation for one request r: `origin(r)` is its intended start in an open loop (so a slow server
cannot hide queueing) and its actual start (`start_ns`) in a closed loop; `t_j` is the arrival
time of its j-th content-bearing chunk (j = 1..m) and `n_j` the tokens that chunk carried;
`end(r)` is when its last byte arrived. A request *succeeded* when it has no error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from loadgate.records import Record

Unit = Literal["ms", "tokens", "tok/s", "req/s", "ratio"]
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
"""The percentiles every distribution's summary holds (and thresholds may name)."""


@dataclass(frozen=True)
class Figure:
    """One figure. Distributions have `samples`; scalars a `path` into the level summary.

    error_adjusted        the distribution also has `<name>_error_adjusted`: failed requests kept
                          in the population as +inf (a latency of a request that never finished)
    title                 its name for people (plot titles)
    table                 a row in the per-level tables; `table_error_adjusted` the variant's row too
    reasoning             a figure of a reasoning phase: the summary keeps it only for a level in which a
                          request streamed reasoning (`analysis.summary.REASONING_FIGURES`), and so do the
                          tables; `same_as` names the figure it equals without one (ttfa is then ttft), which
                          a threshold on it reads
    ab                    what A/B compares, run against run: a distribution's statistics (figure
                          `<name>.<stat>`), or ("value",) for a scalar; () for nothing
    """

    name: str
    unit: Unit
    kind: Literal["distribution", "scalar"]
    better: Literal["lower", "higher"]
    doc: str
    per: Literal["request", "chunk", "token", "level"] = "request"
    samples: Callable[[Record], list[float]] | None = None
    path: tuple[str, ...] = ()
    error_adjusted: bool = False
    table: bool = False
    table_error_adjusted: bool = False
    ab: tuple[str, ...] = ()
    title: str = ""
    reasoning: bool = False  # about a reasoning phase: in the tables only of levels whose requests streamed one
    same_as: str = ""  # reasoning figures: without a reasoning phase this figure is that one (ttfa: ttft)
    streamed: bool = False  # timed from a stream's chunks: an unstreamed run (load.stream: false) has none


def _ttft(r: Record) -> list[float]:
    if not r.chunk_ns:
        return []
    return [(r.start_ns + r.chunk_ns[0] - r.origin_ns) / 1e6]


def _ttfa(r: Record) -> list[float]:
    a = r.first_answer
    if a is None:  # reasoned to its end and never answered: an answer that never came, not a missing sample
        return [float("inf")] if r.reasoning_tokens else []
    return [(r.start_ns + r.chunk_ns[a] - r.origin_ns) / 1e6]


def _reasoning_tokens(r: Record) -> list[float]:
    return [float(r.reasoning_tokens)] if r.reasoning_tokens else []


def _answer_tokens(r: Record) -> list[float]:
    if not r.reasoning_tokens:
        return []
    return [float(sum(r.chunk_tokens) - r.reasoning_tokens)]


def _itl_answer(r: Record) -> list[float]:
    """ITL's samples from the first answer chunk on (a reasoning phase comes first)."""
    a = r.first_answer
    if a is None:
        return []
    c, n = r.chunk_ns, r.chunk_tokens
    out: list[float] = []
    for j in range(a + 1, len(c)):
        if n[j] > 0:
            out.extend([(c[j] - c[j - 1]) / 1e6 / n[j]] * n[j])
    return out


def _e2e(r: Record) -> list[float]:
    return [(r.end_ns - r.origin_ns) / 1e6]


def _inter_chunk(r: Record) -> list[float]:
    c = r.chunk_ns
    return [(c[j] - c[j - 1]) / 1e6 for j in range(1, len(c))]


def _itl(r: Record) -> list[float]:
    c, n = r.chunk_ns, r.chunk_tokens
    out: list[float] = []
    for j in range(1, len(c)):
        if n[j] > 0:
            out.extend([(c[j] - c[j - 1]) / 1e6 / n[j]] * n[j])
    return out


def _tpot(r: Record) -> list[float]:
    c, n = r.chunk_ns, r.chunk_tokens
    total = sum(n)
    if len(c) < 2 or total < 2:
        return []
    return [(c[-1] - c[0]) / 1e6 / (total - 1)]


def _tokens_per_chunk(r: Record) -> list[float]:
    return [float(x) for x in r.chunk_tokens]


def _queue(r: Record) -> list[float]:
    return [(r.start_ns - (r.intended_ns if r.intended_ns is not None else r.ready_ns)) / 1e6]


def _request_rate(r: Record) -> list[float]:
    total = sum(r.chunk_tokens)
    dt = (r.end_ns - r.origin_ns) / 1e9
    return [total / dt] if dt > 0 and total else []


FIGURES: tuple[Figure, ...] = (
    Figure("output_throughput", "tok/s", "scalar", "higher", "output tokens received by successful requests / W",
           per="level", path=("throughput", "output_token_throughput"), ab=("value",), title="Output token throughput"),
    Figure("request_throughput", "req/s", "scalar", "higher", "successful requests / W", per="level",
           path=("throughput", "request_throughput"), ab=("value",), title="Request throughput"),
    Figure("input_throughput", "tok/s", "scalar", "higher", "prompt tokens of successful requests / W",
           per="level", path=("throughput", "input_token_throughput"), title="Input token throughput"),
    Figure("ttft", "ms", "distribution", "lower",
           "time to first token: t_1 - origin(r), the first chunk carrying tokens of any kind (reasoning "
           "included since summary v7)", samples=_ttft,
           error_adjusted=True, table=True, table_error_adjusted=True, ab=("p50", "p99"), title="Time to first token", streamed=True),
    Figure("ttfa", "ms", "distribution", "lower",
           "time to first answer token: t_a - origin(r), a = the first chunk carrying answer tokens, not "
           "reasoning (equal to ttft when the model streams no reasoning); +inf for a request that reasoned and "
           "never answered", samples=_ttfa, table=True,
           title="Time to first answer token", reasoning=True, same_as="ttft", streamed=True),
    Figure("reasoning_tokens", "tokens", "distribution", "lower",
           "tokens a request's response streamed as reasoning (reasoning_content / reasoning), requests with any",
           samples=_reasoning_tokens, table=True, title="Reasoning tokens per request", reasoning=True),
    Figure("answer_tokens", "tokens", "distribution", "higher",
           "sum_j n_j less the reasoning tokens (a parser's marker tokens count here), requests that streamed "
           "reasoning", samples=_answer_tokens,
           table=True, title="Answer tokens per request", reasoning=True),
    Figure("itl", "ms", "distribution", "lower",
           "inter-token latency: for each chunk j >= 2, n_j samples of (t_j - t_{j-1}) / n_j; a "
           "chunk carrying several tokens spreads its gap over them (tokens in the first chunk "
           "beyond the first have no gap and give no sample)", per="token", samples=_itl, table=True,
           ab=("p50", "p99"), title="Inter-token latency", streamed=True),
    Figure("itl_answer", "ms", "distribution", "lower",
           "inter-token latency over answer tokens: itl's samples for the chunks after the first answer chunk a",
           per="token", samples=_itl_answer, table=True, title="Inter-token latency, answer tokens", reasoning=True,
           same_as="itl", streamed=True),
    Figure("inter_chunk", "ms", "distribution", "lower",
           "inter-chunk latency: t_j - t_{j-1} for j >= 2, whatever the chunk carried", per="chunk",
           samples=_inter_chunk, table=True, title="Inter-chunk latency", streamed=True),
    Figure("tpot", "ms", "distribution", "lower",
           "time per output token after the first: (t_m - t_1) / (sum_j n_j - 1), requests with >= 2 tokens",
           samples=_tpot, error_adjusted=True, table=True, ab=("p50",), title="Time per output token", streamed=True),
    Figure("e2e", "ms", "distribution", "lower", "end-to-end latency: end(r) - origin(r)", samples=_e2e,
           error_adjusted=True, table=True, table_error_adjusted=True, ab=("p50", "p99"), title="End-to-end latency"),
    Figure("tokens_per_chunk", "tokens", "distribution", "higher", "n_j for every content-bearing chunk",
           per="chunk", samples=_tokens_per_chunk, table=True, title="Tokens per content chunk", streamed=True),
    Figure("client_queue", "ms", "distribution", "lower",
           "client-side wait before sending: start - ready (closed loop: the worker was free) or "
           "start - intended start (open loop: schedule lag plus max_in_flight wait)", samples=_queue, table=True, title="Client queue wait"),
    Figure("request_output_rate", "tok/s", "distribution", "higher",
           "one request's output tokens / (end(r) - origin(r))", samples=_request_rate, table=True, title="Output rate per request"),
    Figure("acceptance_length", "tokens", "scalar", "higher",
           "speculative decoding: 1 + accepted draft tokens / verify steps, from per-request fields",
           per="level", path=("acceptance", "per_request", "acceptance_length"), ab=("value",), title="Acceptance length"),
    Figure("goodput", "ratio", "scalar", "higher", "fraction of requests that succeeded and met every SLO",
           per="level", path=("goodput", "fraction"), title="Goodput"),
    Figure("token_goodput", "tok/s", "scalar", "higher",
           "output tokens received by the requests that succeeded and met every SLO / W", per="level",
           path=("goodput", "token_goodput"), title="Token goodput"),
    Figure("errors", "ratio", "scalar", "lower", "failed requests: rate (fraction) or count", per="level",
           path=("failed",), title="Errors"),
)
ADJUSTED = "_error_adjusted"


# Every list below is derived from FIGURES when asked (so a figure added to it is everywhere).

def figure(name: str) -> Figure:
    """The figure called `name` (KeyError for none)."""
    for f in FIGURES:
        if f.name == name:
            return f
    raise KeyError(name)


def distributions() -> tuple[Figure, ...]:
    return tuple(f for f in FIGURES if f.kind == "distribution")


def metric_names() -> tuple[str, ...]:
    """Every distribution's name in the summary's `metrics`, each followed by its error-adjusted
    variant where it has one."""
    return tuple(n for f in distributions() for n in ((f.name, f.name + ADJUSTED) if f.error_adjusted else (f.name,)))


def table_rows(metrics: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The metrics of the per-level tables, in order; the reasoning figures only when `metrics` (a
    level summary's) counts a request that streamed reasoning."""
    reasoning = bool(metrics and (metrics.get("reasoning_tokens") or {}).get("count"))
    return tuple(n for f in distributions() if f.table and (reasoning or not f.reasoning)
                 for n in ((f.name, f.name + ADJUSTED) if f.table_error_adjusted else (f.name,)))


def ab_figures() -> dict[str, Figure]:
    """A/B figure name (`ttft.p50`, `output_throughput`, …) -> the figure it reads."""
    out: dict[str, Figure] = {}
    for f in FIGURES:
        for stat in f.ab:
            out[f.name if stat == "value" else f"{f.name}.{stat}"] = f
    return out


def ab_path(name: str) -> tuple[str, ...]:
    """Where an A/B figure's value is in a level summary."""
    f = ab_figures()[name]
    return f.path if f.kind == "scalar" else ("metrics", f.name, name.split(".", 1)[1])


def read_path(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in a level summary (mappings or attributes); None where absent."""
    x = obj
    for k in path:
        if x is None:
            return None
        x = x.get(k) if isinstance(x, dict) else getattr(x, k, None)
    return x
