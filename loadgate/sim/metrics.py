"""The engine's Prometheus counters and their exposition text under vLLM's metric names.

The text is written directly (no prometheus_client registry, so no global state) in the format
prometheus_client itself emits, and parses with `prometheus_client.parser`:
  counters  vllm:request_success_total{finished_reason}, vllm:prompt_tokens_total,
            vllm:generation_tokens_total, and with speculation on vllm:spec_decode_num_drafts_total,
            vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total,
            vllm:spec_decode_num_accepted_tokens_per_pos_total{position}, and with the prefix cache
            on vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (tokens)
  gauges    vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
  histograms (seconds, vLLM's bucket edges) vllm:time_to_first_token_seconds (arrival to the first
            output's publication), vllm:inter_token_latency_seconds (between a request's successive
            outputs: one observation per engine step, as vLLM observes them), and at a request's
            finish (not an abort) vllm:e2e_request_latency_seconds (arrival to the last output) and
            vllm:request_queue_time_seconds (arrival to admission into the batch)
Every sample carries `engine="0"` and `model_name`. Counters also get their `_created` gauge.

Counting rules: prompt tokens when a sequence is prefilled; generation tokens when a step's
tokens are handed to the handlers (so, for a request that completed, exactly the tokens it was
sent); a request counts in request_success_total when it finishes, with finished_reason stop,
length or abort (client gone, injected disconnect, shutdown). The speculative counters follow
`loadgate.sim.speculative`.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM's bucket edges (seconds), as its /metrics serves them (tests/data/shared-fixtures/vllm-cpu)
TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
              40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0)
REQUEST_EDGES = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0)


@dataclass
class Histogram:
    """A Prometheus histogram: observations per bucket (not cumulative), their sum."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.edges, v)] += 1  # le: an observation on an edge is in that bucket
        self.total += v


@dataclass
class EngineCounters:
    """Monotonic counters since the server started."""

    spec_k: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0))
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    prefix_cache: bool = False
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of those, found there (not prefilled again)
    created: float = field(default_factory=time.time)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_EDGES))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_EDGES))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_EDGES))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_EDGES))

    def __post_init__(self) -> None:
        if not self.spec_accepted_per_pos:
            self.spec_accepted_per_pos = [0] * self.spec_k

    def record_verify(self, k_eff: int, accepted: int) -> None:
        """One verify step of one sequence (see loadgate.sim.speculative)."""
        self.spec_drafts += 1
        self.spec_draft_tokens += k_eff
        self.spec_accepted += accepted
        for i in range(accepted):
            self.spec_accepted_per_pos[i] += 1


@dataclass(frozen=True)
class Gauges:
    running: int
    waiting: int
    kv_cache_usage: float


def _fmt(v: float) -> str:
    return repr(float(v))


def render_metrics(c: EngineCounters, g: Gauges, model_name: str) -> str:
    """Prometheus text exposition (format 0.0.4) of the counters and gauges."""
    model = _escape(model_name)
    lines: list[str] = []

    def labels(extra: dict[str, str]) -> str:
        all_labels = {"engine": "0", "model_name": model, **extra}
        return ",".join(f'{k}="{all_labels[k]}"' for k in sorted(all_labels))

    def family(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
        full = f"vllm:{name}_total" if kind == "counter" else f"vllm:{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} {kind}")
        for extra, value in samples:
            lines.append(f"{full}{{{labels(extra)}}} {_fmt(value)}")
        if kind == "counter":
            created = f"vllm:{name}_created"
            lines.append(f"# HELP {created} {help_text}")
            lines.append(f"# TYPE {created} gauge")
            for extra, _ in samples:
                lines.append(f"{created}{{{labels(extra)}}} {_fmt(c.created)}")

    family("num_requests_running", "gauge", "Number of requests in model execution batches.",
           [({}, g.running)])
    family("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [({}, g.waiting)])
    family("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [({}, g.kv_cache_usage)])
    family("prompt_tokens", "counter", "Number of prefill tokens processed.", [({}, c.prompt_tokens)])
    family("generation_tokens", "counter", "Number of generation tokens processed.",
           [({}, c.generation_tokens)])
    family("request_success", "counter", "Count of successfully processed requests.",
           [({"finished_reason": r}, c.success[r]) for r in FINISHED_REASONS])
    if c.prefix_cache:
        family("prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens.",
               [({}, c.prefix_cache_queries)])
        family("prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.",
               [({}, c.prefix_cache_hits)])
    for name, help_text, h in (("time_to_first_token_seconds", "Histogram of time to first token in seconds.", c.ttft),
                               ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", c.itl),
                               ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", c.e2e),
                               ("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                                c.queue)):
        full = f"vllm:{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} histogram")
        cum = 0
        for edge, n in zip((*h.edges, float("inf")), h.counts, strict=True):
            cum += n
            lines.append(f"{full}_bucket{{{labels({'le': '+Inf' if edge == float('inf') else _fmt(edge)})}}} "
                         f"{_fmt(cum)}")
        lines.append(f"{full}_count{{{labels({})}}} {_fmt(cum)}")
        lines.append(f"{full}_sum{{{labels({})}}} {_fmt(h.total)}")
    if c.spec_k:
        family("spec_decode_num_drafts", "counter", "Number of spec decoding drafts.",
               [({}, c.spec_drafts)])
        family("spec_decode_num_draft_tokens", "counter", "Number of draft tokens.",
               [({}, c.spec_draft_tokens)])
        family("spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
               [({}, c.spec_accepted)])
        family("spec_decode_num_accepted_tokens_per_pos", "counter",
               "Accepted tokens per draft position.",
               [({"position": str(i)}, v) for i, v in enumerate(c.spec_accepted_per_pos)])
    return "\n".join(lines) + "\n"


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
