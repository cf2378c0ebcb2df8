"""Build a run's summary from its files alone: records.jsonl, meta.json, server.json, health.json.

`loadgate run` writes those files and then calls `build_summary`; `loadgate report` calls it on
an old run with the engine long gone. Nothing here reads live state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from loadgate.analysis.capacity import SearchSection, search_section
from loadgate.analysis.conversations import cached_tokens, conversation_counts
from loadgate.analysis.gpu import dcgm_from_series, level_gpu, read_gpu_file
from loadgate.analysis.histograms import server_latency
from loadgate.analysis.metrics import summarize
from loadgate.analysis.metrics import throughput as throughput_over
from loadgate.analysis.slices import time_slices
from loadgate.analysis.specdec import (
    contamination,
    from_counters,
    from_records,
    groups_add_up,
    prefix_cache,
    reconcile,
)
from loadgate.analysis.validity import schedule_lag, stamp_bound, verdict, warnings
from loadgate.config.profile import HealthBudgets, RequestSettings
from loadgate.core.figures import ADJUSTED, FIGURES, figure
from loadgate.documents import ABSENT, DocumentError, HealthPhase, ServerLevel
from loadgate.engine.adapters import family_for
from loadgate.jsonutil import load_json
from loadgate.records import Damage, Record, read_records
from loadgate.snapshot import snapshot_from_json

T = TypeVar("T")


@dataclass(frozen=True)
class TokenCounts:
    """The server's prompt and completion counts against the plan, over successful requests."""

    checked: int
    prompt_mismatches: int
    completion_mismatches: int
    prompt_unverified: int  # prompts whose count could not be checked (the next two together)
    prompt_no_server_count: int
    prompt_not_planned: int  # the plan had no token count (text prompts without a tokenizer, chat without a template)
    completion_counts_from: dict[str, int]
    # requests whose server sent a count no server can mean (v5), and of those the completions left
    # without a count (no ids to count them from)
    impossible_counts: int = dataclasses.field(default=0, kw_only=True)
    completion_unverified: int = dataclasses.field(default=0, kw_only=True)
    # v7: the outputs' lengths were the model's to choose (load.request: ignore_eos false, or stop
    # strings): completions are checked only not to exceed the plan, and their lengths as received
    # (min, p50, p90, max, mean, distinct) and finish reasons are reported instead
    natural_lengths: bool = dataclasses.field(default=False, kw_only=True)
    output_lengths: dict[str, float] | None = dataclasses.field(default=None, kw_only=True)
    finish_reasons: dict[str, int] | None = dataclasses.field(default=None, kw_only=True)
    mismatch_fraction: float
    limit: float
    examples: list[int]
    ok: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenCounts:
        """Also from a version 1 summary (no reasons kept apart, no completion sources)."""
        return cls(d["checked"], d["prompt_mismatches"], d["completion_mismatches"], d["prompt_unverified"],
                   d.get("prompt_no_server_count", d["prompt_unverified"]), d.get("prompt_not_planned", 0),
                   d.get("completion_counts_from") or {}, d["mismatch_fraction"], d["limit"], list(d["examples"]),
                   bool(d["ok"]), impossible_counts=int(d.get("impossible_counts", 0)),
                   completion_unverified=int(d.get("completion_unverified", 0)),
                   natural_lengths=bool(d.get("natural_lengths", False)), output_lengths=d.get("output_lengths"),
                   finish_reasons=d.get("finish_reasons"))


def token_check(records: list[Record], limit: float, natural_lengths: bool = False) -> TokenCounts:
    """Per request, the server's prompt and completion counts against the plan. With
    `natural_lengths` (the model may end an output early: EOS honoured, or stop strings), a
    completion is off the plan only when it is longer than planned (max_tokens) or ended for length
    short of it, and the lengths received are reported."""
    checked = [r for r in records if r.succeeded]
    prompt_bad = [r.i for r in checked if r.prompt_tokens is not None
                  and r.prompt_tokens_planned is not None and r.prompt_tokens != r.prompt_tokens_planned]
    impossible = [r for r in checked if r.counts_received]

    def off(r: Record) -> bool:
        n, planned = r.output_tokens, r.output_tokens_planned
        if natural_lengths:  # longer than max_tokens, or cut for length before reaching it
            return n > planned or (r.finish_reason == "length" and n < planned)
        return n != planned

    out_bad = [r.i for r in checked if off(r)
               and not (r.completion_tokens is None and "completion_tokens" in (r.counts_received or {}))]
    no_count = sum(1 for r in checked if r.prompt_tokens is None)
    unplanned = sum(1 for r in checked if r.prompt_tokens is not None and r.prompt_tokens_planned is None)
    bad = set(prompt_bad) | set(out_bad)
    frac = len(bad) / len(checked) if checked else 0.0
    completion_from: dict[str, int] = {}
    for r in checked:
        k = "server usage" if r.completion_tokens is not None else f"chunks ({r.token_source})"
        completion_from[k] = completion_from.get(k, 0) + 1
    completion_unverified = sum(1 for r in impossible if r.completion_tokens is None
                                and "completion_tokens" in (r.counts_received or {}))
    lengths: dict[str, float] | None = None
    reasons: dict[str, int] | None = None
    if natural_lengths and checked:
        import numpy as np  # analysis imports numpy when it computes (the command line's start stays light)

        got = np.array([r.output_tokens for r in checked], dtype=np.float64)
        lengths = {"min": float(got.min()), "p50": float(np.percentile(got, 50)), "p90": float(np.percentile(got, 90)),
                   "max": float(got.max()), "mean": float(got.mean()), "distinct": float(len(np.unique(got)))}
        seen: dict[str, int] = {}
        for r in checked:
            seen[r.finish_reason or "(none)"] = seen.get(r.finish_reason or "(none)", 0) + 1
        reasons = dict(sorted(seen.items()))
    return TokenCounts(len(checked), len(prompt_bad), len(out_bad), no_count + unplanned, no_count, unplanned,
                       completion_from, frac, limit, sorted(bad)[:10], frac <= limit,
                       impossible_counts=len(impossible), completion_unverified=completion_unverified,
                       natural_lengths=natural_lengths, output_lengths=lengths, finish_reasons=reasons)


def request_settings(profile: dict[str, Any]) -> dict[str, Any]:
    """`load.request` as the run's profile (meta.json) states it, the defaults for a profile written
    before it existed (greedy, ignore_eos, no stops, no seed)."""
    got = (profile.get("load") or {}).get("request") or {}
    return {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "seed": "none", "ignore_eos": True,
            "stop": [], **got}


def natural(settings: dict[str, Any]) -> bool:
    """Whether output lengths were the model's to choose (`RequestSettings.natural_lengths`)."""
    return RequestSettings(ignore_eos=bool(settings.get("ignore_eos", True)),
                           stop=tuple(settings.get("stop") or ())).natural_lengths


@dataclass(frozen=True)
class Goodput:
    """The requests that succeeded and met every SLO: how many, their share of the level's requests,
    per second of the level's window, and their output tokens per second of it (`token_goodput`, v9)."""

    slo_ms: dict[str, float]
    good_requests: int
    fraction: float
    # (before goodput_rps, which version 8 wrote last)
    token_goodput: float | None = dataclasses.field(default=None, kw_only=True)
    good_output_tokens: int | None = dataclasses.field(default=None, kw_only=True)
    goodput_rps: float | None


def goodput(records: list[Record], slo: dict[str, float | None], window_s: float | None) -> Goodput | None:
    """Requests that succeeded and met every SLO given (a request's own TTFT, TPOT and E2E); their
    count over the window, and their output tokens (those the throughput counts) over it."""
    active = {k: v for k, v in slo.items() if v is not None}
    if not active or not records:
        return None
    good = tokens = 0
    for r in records:
        if not r.succeeded:
            continue
        okay = True
        for name, limit in active.items():
            fn = figure(name.removesuffix("_ms")).samples
            assert fn is not None
            vals = fn(r)
            if vals and vals[0] > limit:
                okay = False
        good += okay
        tokens += sum(r.chunk_tokens) if okay else 0
    return Goodput(active, good, good / len(records), good / window_s if window_s else None,
                   token_goodput=tokens / window_s if window_s else None, good_output_tokens=tokens)


@dataclass(frozen=True)
class Throughput:
    """Over the measured window W = [first origin, last end] (see `analysis.metrics.throughput`)."""

    window_s: float | None
    request_throughput: float | None
    output_token_throughput: float | None
    input_token_throughput: float | None


@dataclass(frozen=True)
class Acceptance:
    """Acceptance length from per-request fields, from counter deltas, and their reconciliation
    (`loadgate.analysis.specdec`); the last two only when the server's metrics were scraped."""

    per_request: dict[str, Any] | None
    counters: dict[str, Any] | None = None
    reconciliation: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClientHealth:
    """The client's own health over the window, the worst over worker processes."""

    loop_lag_ms: dict[str, float | int | None]
    gc_pauses: int
    gc_pause_max_ms: float | None
    gc_pause_total_ms: float
    client_cpu_fraction: float | None
    workers: int
    stamp_bound: dict[str, Any] | None = None  # `analysis.validity.stamp_bound`: the stated stamp error
    warnings: list[str] = dataclasses.field(default_factory=list)  # budgets exceeded, not invalidating
    cpu_s: float | None = None  # CPU seconds of the client's processes over the window, together
    decode_cpu_s: float | None = None  # and to decode the window's responses, after it
    host_steal_fraction: float | None = None  # the share of the machine's CPU a hypervisor took (worst phase)
    schedule_lag_ms: dict[str, float | None] | None = None


Stats = dict[str, Any]  # one metric's statistics: unit, per, count, p50 … p99.9, mean, std, min, max


@dataclass(frozen=True)
class LevelSummary:
    """Every figure of one load level, judged valid or not (`invalid` lists why not)."""

    requests: int
    succeeded: int
    failed: int
    errors: dict[str, int]
    metrics: dict[str, Stats]
    throughput: Throughput
    token_counts: TokenCounts
    goodput: Goodput | None
    acceptance: Acceptance
    new_connections: int  # requests that had to open their connection (their TTFT includes it)
    contamination: dict[str, Any] | None
    server_gauges: dict[str, Any] | None
    client_health: ClientHealth
    invalid: list[str]
    prefix_cache: dict[str, Any] | None = None  # `analysis.specdec.prefix_cache`: the server's cache hits in the window
    groups: dict[str, Any] | None = None  # figures by a record field (`group_figures`), e.g. {"category": ...}
    conversations: dict[str, Any] | None = None  # `conversation_counts` (v8)
    cached_tokens: dict[str, Any] | None = None  # `cached_tokens` of the level's requests (v8)
    gpu: dict[str, Any] | None = None  # `analysis.gpu.level_gpu`: the GPUs over the window (v9)
    ramp_requests: int | None = None  # requests the level's ramp sent, outside every figure (v9; null: no ramp)
    slices: dict[str, Any] | None = None  # `analysis.slices.time_slices`: figures by time (v9; None when off)
    server_latency: dict[str, Any] | None = None  # `analysis.histograms.server_latency` (v9)
    server_scrape: dict[str, Any] | None = None  # the scraper process's report of the window (v9)

    def to_json(self) -> dict[str, Any]:
        """The fields in order, `invalid` last (the order version 2 wrote)."""
        d = asdict(self)
        invalid = d.pop("invalid")
        return {**d, "invalid": invalid}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LevelSummary:
        acc = d.get("acceptance") or {}
        return cls(d["requests"], d["succeeded"], d["failed"], d["errors"], d["metrics"],
                   Throughput(**d["throughput"]), TokenCounts.from_json(d["token_counts"]),
                   None if d.get("goodput") is None else Goodput(**d["goodput"]),
                   Acceptance(acc.get("per_request"), acc.get("counters"), acc.get("reconciliation")),
                   d.get("new_connections", 0), d.get("contamination"), d.get("server_gauges"),
                   ClientHealth(**d["client_health"]), list(d["invalid"]), d.get("prefix_cache"), d.get("groups"),
                   d.get("conversations"), d.get("cached_tokens"), gpu=d.get("gpu"),
                   ramp_requests=d.get("ramp_requests"), slices=d.get("slices"),
                   server_latency=d.get("server_latency"), server_scrape=d.get("server_scrape"))


GROUP_FIELDS = ("category", "turn", "endpoint")
NO_GROUP = "(none)"  # the group of the records that have no value for the field
"""Record fields the figures are broken down by (`endpoint`: the replica, `target.endpoints`)."""


def group_value(r: Record, field: str) -> str | None:
    """The group of `r` by `field`: its category, or its conversation turn ("1", "2", …)."""
    v = getattr(r, field)
    return None if v is None else str(v)


def _group_order(field: str) -> Callable[[str], tuple[int, int, str]]:
    """Groups in order: turns and endpoints by number ("10" after "9"), the rest by name."""
    return lambda v: (0, int(v), "") if field in ("turn", "endpoint") and v.isdigit() else (1, 0, v)


def group_figures(records: list[Record], window_s: float | None, counters: dict[str, Any] | None,
                  drop: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """Per value of each of `GROUP_FIELDS` the records have: its requests' figures (every
    distribution but those in `drop`, as the level leaves them out; its output tokens per second of
    the level's window, acceptance from per-request fields), and whether the groups' acceptance adds
    up to the level's counter deltas. None when no record has a value for any of them."""
    out: dict[str, Any] = {}
    for name in GROUP_FIELDS:
        parts: dict[str, list[Record]] = {}
        for r in records:  # records without a value: their own group, so the groups cover the level
            parts.setdefault(group_value(r, name) or NO_GROUP, []).append(r)
        if set(parts) <= {NO_GROUP}:
            continue
        by: dict[str, Any] = {}
        for v in sorted(parts, key=_group_order(name)):
            sub = parts[v]
            s = summarize(sub)
            by[v] = {"requests": s["requests"], "succeeded": s["succeeded"], "failed": s["failed"],
                     "errors": s["errors"], "metrics": {k: m for k, m in s["metrics"].items() if k not in drop}, "throughput": throughput_over(sub, window_s),
                     "acceptance": {"per_request": from_records(sub)}, "cached_tokens": cached_tokens(sub)}
        out[name] = {"by": by, "acceptance_adds_up": groups_add_up(by, counters)}
    return out or None


# Figures of a reasoning phase: in a level's metrics only when one of its requests streamed one
# (without, ttfa and itl_answer equal ttft and itl, and a threshold on them reads those)
REASONING_FIGURES = tuple(f.name for f in FIGURES if f.reasoning)
# Distributions of a stream's chunks: a response that arrives whole (`load.stream: false`) has none
STREAM_ONLY = tuple(n for f in FIGURES if f.streamed
                    for n in ((f.name, f.name + ADJUSTED) if f.error_adjusted else (f.name,)))


def level_summary(records: list[Record], server: ServerLevel | None, health: list[HealthPhase],
                  profile: dict[str, Any], cpus: dict[str, Any] | None = None,
                  ramp_requests: int | None = None) -> LevelSummary:
    s = summarize(records)
    drop: tuple[str, ...] = ()
    if not (profile.get("load") or {}).get("stream", True):  # one "chunk" per response: its whole body
        drop += STREAM_ONLY
    if not any(r.reasoning_tokens for r in records if r.succeeded):  # no reasoning phase to count
        drop += REASONING_FIGURES
    s["metrics"] = {k: v for k, v in s["metrics"].items() if k not in drop}
    tc = token_check(records, profile["workload"]["token_mismatch_limit"], natural(request_settings(profile)))
    per_request = from_records(records)
    acceptance = Acceptance(per_request)
    contaminated = gauges = cached = latency = None
    invalid: list[str] = []
    if server is not None and server.before is not None and server.after is not None:
        before, after = snapshot_from_json(server.before), snapshot_from_json(server.after)
        family = family_for((profile.get("target") or {}).get("api"), after)
        counters = from_counters(before, after, family)
        acceptance = Acceptance(per_request, counters, reconcile(per_request, counters))
        contaminated = contamination(before, after, records, family)
        cached = prefix_cache(before, after, family)
        latency = server_latency(before, after, family)
        gauges = None if server.gauges is None else {
            k: None if g is None else g.to_json() for k, g in server.gauges.items()}
        if contaminated and not contaminated["clean"]:
            invalid += ["contamination: " + p + " (other traffic reached the server, or it counts differently)"
                        for p in contaminated["problems"]]
    if not tc.ok:
        invalid.append(f"{tc.mismatch_fraction:.1%} of requests had token counts off the plan "
                       f"(limit {tc.limit:.1%}): check the tokenizer and " + (
                           "that max_tokens is honoured (an output longer than it, or ended for length short of it)"
                           if tc.natural_lengths else "that ignore_eos is honoured"))
    h = merge_health(health, schedule_lag(records))
    lag = h.loop_lag_ms.get("p99")
    h = dataclasses.replace(h, stamp_bound=stamp_bound(records, None if lag is None else float(lag)))
    budgets = profile.get("health")
    if budgets:
        b = HealthBudgets(**budgets)
        unbounded = h.stamp_bound is None and any(r.succeeded and r.chunk_ns for r in records)
        said = verdict(dataclasses.asdict(h), b, cpus, unbounded)
        if (profile.get("load") or {}).get("schedule") == "trace":  # a trace has no concurrency to lower
            said = [m.replace("lower the concurrency", "lower load.trace_speed (or cap load.max_in_flight)")
                    for m in said]
        invalid += said
        h = dataclasses.replace(h, warnings=warnings(dataclasses.asdict(h), b))
    throughput = Throughput(**s["throughput"])
    groups = group_figures(records, throughput.window_s, acceptance.counters, drop)
    return LevelSummary(s["requests"], s["succeeded"], s["failed"], s["errors"], s["metrics"], throughput, tc,
                        goodput(records, profile.get("slo") or {}, throughput.window_s), acceptance,
                        sum(1 for r in records if r.new_connection), contaminated, gauges, h, invalid, cached, groups,
                        conversation_counts(records), cached_tokens(records), ramp_requests=ramp_requests,
                        slices=time_slices(records, (profile.get("report") or {}).get("slice_s"), drop),
                        server_latency=latency,
                        server_scrape=server.scrape if server is not None and isinstance(server.scrape, dict) else None)


def merge_health(parts: list[HealthPhase], schedule: dict[str, float | None] | None = None) -> ClientHealth:
    """Worst case over worker processes (each measured its own loop); a worker that had no share
    of the phase (an empty entry) is left out."""
    parts = [p for p in parts if p.to_json()]
    if not parts:
        return ClientHealth({"p50": None, "p99": None, "max": None, "samples": 0}, 0, 0.0, 0.0, None, 0, schedule_lag_ms=schedule)

    def values(get: Callable[[HealthPhase], Any]) -> list[Any]:
        return [v for p in parts if (v := get(p)) is not None and v is not ABSENT]

    def worst(get: Callable[[HealthPhase], Any]) -> Any:
        vals = values(get)
        return max(vals) if vals else None

    def total(get: Callable[[HealthPhase], Any]) -> Any:
        vals = values(get)
        return sum(vals) if vals else None

    lags = [p.loop_lag_ms if isinstance(p.loop_lag_ms, dict) else {} for p in parts]
    return ClientHealth(_worst_lags(lags) | {"samples": sum(int(lag.get("samples") or 0) for lag in lags)},
                        sum(values(lambda p: p.gc_pauses)), worst(lambda p: p.gc_pause_max_ms),
                        sum(values(lambda p: p.gc_pause_total_ms)), worst(lambda p: p.client_cpu_fraction),
                        len(parts), cpu_s=total(lambda p: p.cpu_s), decode_cpu_s=total(lambda p: p.decode_cpu_s),
                        schedule_lag_ms=schedule, host_steal_fraction=worst(lambda p: p.host_steal_fraction))


def _worst_lags(lags: list[dict[str, float | None]]) -> dict[str, float | None]:
    """The worst p50, p99 and max loop lag over the workers' (None where none measured one)."""
    out: dict[str, float | None] = {}
    for k in ("p50", "p99", "max"):
        vals = [v for lag in lags if (v := lag.get(k)) is not None]
        out[k] = max(vals) if vals else None
    return out


SUMMARY_VERSION = 9
"""9: capacity planning (issue 30). Each level's `gpu` (NVML readings of this host's GPUs, `target.gpu`, or a DCGM exporter's
among `target.extra_metrics_urls`, over the level's window: source, absent, capped, reader_cpu_s,
interval_s, urls (DCGM) and `window`: per
GPU utilisation and power mean/max, memory in use, each process's memory, energy and its source,
and the energy of every GPU with joules per output token; null where no GPU was read). Each level's
`ramp_requests`: how many requests its ramp sent (`load.ramp`, records v9 `ramp`: after the warmup,
finished before the measured phase, outside every figure), null without a ramp.
Each level's `slices` (`report.slice_s`; `loadgate.analysis.slices`): slice_s, window_s, requests_by
("origin"), tokens_by ("arrival"), too_many (the slices a window past 10,000 of them would need, none
kept; else null) and per slice of the level's window its start_s, end_s, partial (the last one,
shorter), requests, succeeded, failed, output_tokens with output_throughput, and count, p50 and p99 of
ttft, itl and e2e; null when off.
The summary's `search` (a run with `load.search`; null otherwise): the knob (over, lo, hi,
resolution), the probes in the order they ran (level, load, passed, and per threshold the figure
read — metric, statistic, unit —, the observed value, the limit, passed, and `ci`, its 95 %
confidence interval from the probe's samples: low, high, method, coverage, or null ends with the
reason; `loadgate.analysis.intervals`), the `bracket` (passing, failing), the `answer` and `ended`
("answer below hi", "hi passed", "lowest failed" or "stopped"). Each level's `goodput` gains
`token_goodput` (output tokens per second of the window of the requests that met every SLO, a
figure thresholds can name) and `good_output_tokens` (those tokens).
Each level's `server_latency`: the engine's own TTFT, inter-token, end-to-end and queue-time
histograms over the window (`analysis.histograms`: bucket deltas, linear interpolation) as
p50/p90/p99 in ms, each with its bucket [lo_ms, hi_ms], the histogram's name, count and edges (null
without such histograms). Each level's `server_scrape`: the scraper process's report of the window
(`net.scraper`: scrapes, its own CPU seconds, the interval, warnings for a metrics URL that did not
answer or was not Prometheus text and for the series reaching its cap; null before it existed).
Each level's `groups` gains `endpoint` (`target.endpoints` without a router: the figures of each
replica's requests, keyed by its index, from records v9 `endpoint`; the server counters are every
replica's summed, `loadgate.load.replica_metrics`).
Version 8 files read the same, the new fields null.
8: the summary's `trace` (a timed trace's replay, `load.schedule: trace`: what meta.json says of
it: requests, span_s, mean_rate, out_of_order lines, lines, speed, window_s, and `sharing`, the
trace's own prefix sharing: ratio, shared_tokens, prompt_tokens, block; `loadgate.load.workload.trace`),
null otherwise, and `load` is "trace" for such a run; each level's `conversations`
(`workload.sessions`: conversations begun, complete, turns sent,
`not_sent` — the turns after a failed one, or after the run stopped — and the first 20 that ended
early, `broken`: conversation, the last turn sent, its error, the turns not sent) and `cached_tokens`
(the prompt tokens the engine said its prefix cache served, per request that said: requests, mean,
total, the mean prompt length beside it; records v8); `groups` gains `turn` (groups "1", "2", … of a
conversation's turns), and every group its `cached_tokens`. Version 7 files read the same, the
new fields null.
7: the summary's `request` (the measured requests' settings: `load.request`'s temperature,
top_p, top_k, min_p, seed, ignore_eos and stop, and the keys of `target.extra_body` as the profile
writes them); each level's `token_counts.natural_lengths` (the model chose the output lengths: a
completion is off the plan only when longer than planned) with `output_lengths` (min, p50, p90,
max, mean, distinct) and `finish_reasons` (requests per reason); the reasoning figures in
`metrics` (`ttfa`, `reasoning_tokens`, `answer_tokens`, `itl_answer`; records v7), present in a
level where a request streamed reasoning (without, ttfa is ttft and itl_answer itl), and `ttft` is
the first chunk of any kind, reasoning included (before, on chat APIs, the first chunk of answer
content or of ids). Version 6 files read the same, `request` null, the new counts absent.
6: each level's `groups`: figures by a record field (`category`: a dataset row's), per value its
requests, every distribution, throughput over the level's window and acceptance from per-request
fields, and `acceptance_adds_up` (whether the groups' accepted tokens and verify steps sum to the
level's counter deltas); null when no record has a group; the summary's `dataset` (what meta.json
says of the run's dataset: file, format, rows drawn, where lengths came from), null without one.
Version 5 files read the same, both null.
5: each level's `token_counts.impossible_counts` (requests whose server sent a token count no
server can mean, kept as received in their records' `counts_received`) and
`completion_unverified` (of those, completions left without a count); each level's
`client_health.host_steal_fraction`: the share of the machine's CPU time a
hypervisor took during the window (the worst phase; null where unknown). Above 2 %, reads of
several segments in loop turns that woke from an idle poll keep the bound since the poll (the host
may have held the wake). Version 4 files read the same, the field null.
4: each level's `client_health.stamp_bound` names the cause of the bounds: `busy_fraction` (the
share of chunks bounded while the client was behind: its loop busy, or its wake held up) and `quiet_p99_ms` (the p99 without them),
null where the records are older than record v4; `shared_read_fraction` is now the share of chunks
whose read held another chunk (from the stamps) and `bounded_fraction` the share given a bound (a
read of one TCP segment is exact). Version 3 files read the same, the new fields absent.
3: each level's `client_health` states the stamp bound (`stamp_bound`: the p99 of every chunk's
bound and how many chunks had one), `warnings` (budgets exceeded that do not invalidate) and the
client's CPU seconds (`cpu_s` over the window, `decode_cpu_s` after it); each level's
`prefix_cache` (the server's cache hits of the window's prompt tokens) and the contamination
check's allowance for failed requests. Version 2 files read the same, those fields empty.
2: the summary carries its version; token counts say why prompts went unverified
(`prompt_no_server_count`, `prompt_not_planned`) and where completion counts came from; the token
pool and the chat template's count are kept; `contamination` and `server_gauges` are always
present (null without server metrics); `damage` (unreadable record lines) and `interrupted`.
Version 1 files (no `summary_version`) read the same."""


@dataclass(frozen=True)
class Summary:
    """A run's summary (summary.json), rebuilt from its files by `build_summary`."""

    run_id: str
    loadgate: str
    model: str
    api: str
    load: str  # "concurrency", "rate" or "trace"
    levels: dict[str, LevelSummary]
    valid: bool
    attestation: dict[str, Any] | None
    unverified: bool
    token_pool: dict[str, Any] | None
    chat_template_tokens: int | None
    damage: dict[str, Any] | None = None  # records.jsonl lines that could not be read (`records.Damage`)
    interrupted: bool = False  # a signal stopped the run: these are the requests that finished
    tls_insecure: bool = False  # the server's certificate was not checked (target.tls.insecure)
    dataset: dict[str, Any] | None = None  # meta.json's `dataset`: where the prompts came from
    request: dict[str, Any] | None = None  # the measured requests' settings (v7; null before)
    trace: dict[str, Any] | None = None  # a timed trace's replay (v8; null before and for other runs)
    search: SearchSection | None = None  # a capacity search's evidence (v9; null before and for other runs)
    summary_version: int = SUMMARY_VERSION

    def to_json(self) -> dict[str, Any]:
        """The fields added since version 1 first, then those of version 1 in their order."""
        d = asdict(self)
        d["levels"] = {lv: ls.to_json() for lv, ls in self.levels.items()}
        d["search"] = None if self.search is None else self.search.to_json()
        return {"summary_version": d.pop("summary_version"), "interrupted": d.pop("interrupted"),
                "damage": d.pop("damage"), "tls_insecure": d.pop("tls_insecure"), "dataset": d.pop("dataset"),
                "request": d.pop("request"), "trace": d.pop("trace"), "search": d.pop("search"), **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Summary:
        """From a summary.json of version 1 to 8 (`summary_version` kept as the file says)."""
        return cls(d["run_id"], d["loadgate"], d["model"], d["api"], d.get("load", "concurrency"),
                   {lv: LevelSummary.from_json(s) for lv, s in d["levels"].items()}, d["valid"],
                   d.get("attestation"), bool(d.get("unverified")), d.get("token_pool"), d.get("chat_template_tokens"),
                   d.get("damage"), bool(d.get("interrupted")), bool(d.get("tls_insecure")), d.get("dataset"),
                   d.get("request"), d.get("trace"),
                   None if d.get("search") is None else SearchSection.from_json(d["search"]),
                   int(d.get("summary_version", 1)))


def _listed(d: Any, where: str) -> list[Any]:
    if not isinstance(d, list):
        raise DocumentError(f"{where}: expected a JSON array, got {type(d).__name__}")
    return d


def _levels(path: Path, read: Callable[[Any, str], T]) -> dict[str, T]:
    """A per-level document (server.json, health.json) read into its types; {} when the run
    wrote none; a DocumentError naming the file and the place when it does not have its shape
    (`report.views.read_summary` says the folder is not a complete run folder)."""
    if not path.exists():
        return {}
    doc = load_json(path)
    try:
        if not isinstance(doc, dict):
            raise DocumentError(f"expected a JSON object, got {type(doc).__name__}")
        return {str(lv): read(d, f"level {lv}") for lv, d in doc.items()}
    except DocumentError as e:
        raise DocumentError(f"{path.name}: {e}") from None


def build_summary(run_dir: Path, extra: list[Record] | None = None) -> Summary:
    """The summary of a run folder from its files. `extra`: records of a run that did not finish,
    recovered from elsewhere (its exchange logs): added where records.jsonl does not hold them."""
    meta = load_json(run_dir / "meta.json")
    server = _levels(run_dir / "server.json", ServerLevel.from_json)
    health = _levels(run_dir / "health.json", lambda d, where: [
        HealthPhase.from_json(h, f"{where}[{i}]") for i, h in enumerate(_listed(d, where))])
    by_level: dict[str, list[Record]] = {str(lv): [] for lv in meta["levels"]}
    damage = Damage()
    seen = set()
    ramped = meta["profile"]["load"].get("ramp") is not None
    ramp: dict[str, set[int]] = {lv: set() for lv in by_level} if ramped else {}  # the ramp's requests by level
    if (run_dir / "records.jsonl").exists() or extra is None:
        for r in read_records(run_dir / "records.jsonl", damage=damage, include_warmup=True):
            if r.excluded:
                if r.ramp and ramped:
                    ramp.setdefault(str(r.level), set()).add(r.i)
                continue
            by_level.setdefault(str(r.level), []).append(r)
            seen.add((str(r.level), r.i))
    for r in extra or ():
        if r.ramp and ramped:
            ramp.setdefault(str(r.level), set()).add(r.i)
        if not r.excluded and (str(r.level), r.i) not in seen:
            by_level.setdefault(str(r.level), []).append(r)
            seen.add((str(r.level), r.i))
    stop = load_json(run_dir / "stop.json") if (run_dir / "stop.json").exists() else {}
    gpu = read_gpu_file(run_dir) or dcgm_from_series(run_dir, meta["profile"])
    levels = {lv: dataclasses.replace(
        level_summary(recs, server.get(lv), health.get(lv, []), meta["profile"], meta.get("cpus"),
                      len(ramp.get(lv, ())) if ramped else None),
        gpu=level_gpu(gpu, meta.get("t0_ns"), recs)) for lv, recs in by_level.items()}
    return Summary(meta["run_id"], meta["loadgate"], meta["model"], meta["api"],
                   _load_kind(meta["profile"]["load"]), levels,
                   not any(s.invalid for s in levels.values()), meta.get("attestation"), bool(meta.get("unverified")),
                   meta.get("token_pool"), meta.get("chat_template_tokens"), damage.to_json() if damage.any else None,
                   stop.get("outcome") == "interrupted", bool(meta.get("tls_insecure")), meta.get("dataset"),
                   {**request_settings(meta["profile"]), "stream": bool(meta["profile"]["load"].get("stream", True)),
                    "extra_body_keys": sorted((meta["profile"].get("target") or {}).get("extra_body") or {})},
                   meta.get("trace"), search_section(meta["profile"], levels, by_level))


def _load_kind(load: dict[str, Any]) -> str:
    """How the run sent its requests: "trace" (a timed trace's times), "rate" or "concurrency"."""
    if load.get("schedule") == "trace":
        return "trace"
    if load.get("search"):
        return str(load["search"]["over"])
    return "rate" if load["rate"] is not None else "concurrency"
