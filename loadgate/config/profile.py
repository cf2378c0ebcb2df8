"""The profile: one YAML file that names the target engine, the workload and the load.

The frozen dataclasses below are the only definition of the profile format. `load_profile` turns a
YAML file into a `Profile` with strict validation (see `loadgate.config.typed_yaml`): an unknown key, a
wrong type, a value out of range or a missing required key raises `ProfileError` naming the file,
the line, the key path and what was expected. `profile_json_schema` derives the JSON Schema from
the same definitions. Cross-field rules live in each class's `check()` method, which returns a list
of (key, reason) problems.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from loadgate.config.contract import Contract
from loadgate.config.knob import knob
from loadgate.config.simconfig import SimConfig
from loadgate.config.typed_yaml import json_schema, line_of_key, load_dataclass_file
from loadgate.core import aborting, probes, ramps
from loadgate.core.figures import ab_figures
from loadgate.core.thresholds import Threshold, ThresholdError, parse
from loadgate.engine.adapters import apis
from loadgate.errors import ProfileError, UsageError
from loadgate.secrets import redact_headers


@dataclass(frozen=True)
class Distribution:
    """A distribution of token lengths. `dist` picks the family; each family reads its own keys."""

    dist: Literal["fixed", "uniform", "normal", "lognormal", "empirical", "mixture"] = knob(
        "fixed", "distribution family")
    value: int | None = knob(None, "fixed: the length", min=1)
    min: int | None = knob(None, "uniform: lowest length; normal/lognormal: clip below", min=1)
    max: int | None = knob(None, "uniform: highest length; normal/lognormal: clip above", min=1)
    mean: float | None = knob(None, "normal: mean; lognormal: mean of the length (not of its log)",
                              exclusive_min=0.0)
    std: float | None = knob(None, "normal/lognormal: standard deviation of the length", min=0.0)
    file: str | None = knob(
        None, "empirical: CSV of `length,weight` rows (a histogram) or `length,cdf` rows with "
        "header `length,cdf`; relative to the profile")
    components: tuple[MixtureComponent, ...] = knob((), "mixture: weighted components")

    def check(self) -> list[tuple[str, str]]:
        """Keys the family needs are given, keys it ignores are not, and min <= max."""
        need = {
            "fixed": ["value"], "uniform": ["min", "max"], "normal": ["mean", "std"],
            "lognormal": ["mean", "std"], "empirical": ["file"], "mixture": ["components"],
        }[self.dist]
        problems = [(k, f"required when dist is {self.dist!r}") for k in need
                    if getattr(self, k) in (None, ())]
        reads = need + (["min", "max"] if self.dist in ("normal", "lognormal") else [])
        problems += [(k, f"not used when dist is {self.dist!r} (it reads: {', '.join(reads)})")
                     for k in ("value", "min", "max", "mean", "std", "file", "components")
                     if k not in reads and getattr(self, k) not in (None, ())]
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append(("max", f"must be >= min ({self.min}), got {self.max}"))
        return problems


@dataclass(frozen=True)
class MixtureComponent:
    """One part of a mixture: a distribution and its relative weight."""

    weight: float = knob(1.0, "relative weight of this component", exclusive_min=0.0)
    dist: Distribution = field(default_factory=Distribution, metadata={"help": "the component"})

    def check(self) -> list[tuple[str, str]]:
        """The component's distribution is complete (also when `dist` was left out)."""
        return [(f"dist.{key}", reason) for key, reason in self.dist.check()]


@dataclass(frozen=True)
class SharedPrefix:
    """Prompts start with one of `groups` shared prefixes of `prefix_len` tokens."""

    groups: int = knob(1, "number of distinct shared prefixes", min=1)
    prefix_len: int = knob(256, "tokens in each shared prefix", min=1)


@dataclass(frozen=True)
class DatasetFields:
    """Which of a row's fields (JSON keys, parquet or Arrow columns) hold what; unset: the usual name
    when the row has it (`docs/workloads.md` lists them per format)."""

    prompt: str | None = knob(None, "the prompt text (default: prompt, else text, else instruction)")
    messages: str | None = knob(None, "OpenAI chat messages, a list of {role, content} (default: messages)")
    conversations: str | None = knob(
        None, "ShareGPT turns, a list of {from, value} (default: conversations): the first human turn is the "
        "prompt, the next gpt turn the reply")
    completion: str | None = knob(
        None, "the reply text, which gives the output length (default: completion, else response, else output)")
    category: str | None = knob(None, "the request's group in every figure by category (default: category)")


@dataclass(frozen=True)
class Dataset:
    """Prompts from a file: ShareGPT JSON, JSONL (chat messages, prompt/completion, or a trace of lengths
    and ids), or Hugging Face dataset files (parquet; an Arrow folder as `datasets.save_to_disk` writes it)."""

    path: str = knob("", "the file (an Arrow dataset: its folder), relative to the profile")
    format: Literal["auto", "sharegpt", "jsonl", "parquet", "arrow", "trace", "mooncake"] = knob(
        "auto", "auto: by the name (.json sharegpt, .jsonl jsonl, trace or mooncake by its first line, .parquet, a "
        "folder with state.json arrow)")
    fields: DatasetFields = field(default_factory=DatasetFields, metadata={"help": "the row's field names"})
    lengths: Literal["dataset", "profile"] = knob(
        "dataset", "dataset: prompts as written, output lengths from each row's reply (rows without one: "
        "workload.output_len); profile: prompts cut or extended (by repeating their own text) to "
        "workload.input_len and outputs to workload.output_len")
    order: Literal["shuffle", "file"] = knob(
        "shuffle", "shuffle: rows drawn with the seed, without replacement while rows last; file: in file order")
    min_input_len: int | None = knob(None, "skip rows whose prompt has fewer tokens", min=1)
    max_input_len: int | None = knob(None, "skip rows whose prompt has more tokens", min=1)
    min_output_len: int | None = knob(None, "skip rows whose reply has fewer tokens", min=1)
    max_output_len: int | None = knob(None, "skip rows whose reply has more tokens", min=1)
    block_size: int = knob(512, "trace and mooncake: tokens per block of a line's hash_ids (equal ids, equal "
                           "tokens)", min=1, max=65536)

    @property
    def filters(self) -> dict[str, int]:
        """The length filters set, by key."""
        return {k: v for k in ("min_input_len", "max_input_len", "min_output_len", "max_output_len")
                if (v := getattr(self, k)) is not None}

    def check(self) -> list[tuple[str, str]]:
        if not self.path:
            return [("path", "required: the dataset file (or Arrow folder)")]
        for lo, hi in (("min_input_len", "max_input_len"), ("min_output_len", "max_output_len")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                return [(hi, f"must be >= {lo} ({a}), got {b}")]
        if self.format in ("trace", "mooncake") and (self.filters or self.lengths != "dataset"):
            return [("format", "a trace sets its own lengths: no length filters, lengths: dataset")]
        if self.lengths == "profile" and self.filters:
            return [(next(iter(self.filters)), "length filters judge a row's own lengths: not with lengths: profile, "
                     "which sets them")]
        return []


@dataclass(frozen=True)
class ResponseLimits:
    """What the client accepts from a server, whatever it sends; a response over a limit ends
    with a named error kind (kept in the population like every failure)."""

    max_header_kib: int = knob(64, "longest response header block, KiB (header_too_large)", min=1)
    max_response_mb: float = knob(32.0, "longest single response, MiB (response_too_large)", exclusive_min=0.0)
    max_event_mb: float = knob(8.0, "longest single SSE event, MiB (event_too_large)", exclusive_min=0.0)
    memory_budget_mb: float = knob(
        512.0, "all responses in flight in one client process together, MiB (memory_budget)", exclusive_min=0.0)
    idle_timeout_s: float | None = knob(
        None, "end a request when no byte arrived for this long (idle_timeout); default: only "
        "target.timeout_s", exclusive_min=0.0)


@dataclass(frozen=True)
class Tls:
    """HTTPS to the engine (`https://` endpoints); paths are relative to the profile."""

    ca_file: str | None = knob(None, "PEM file of the CA certificate(s) that sign the endpoint's certificate")
    client_cert: str | None = knob(None, "PEM client certificate, for a server that requires one (with its key "
                                   "unless client_key)")
    client_key: str | None = knob(None, "PEM private key of client_cert")
    insecure: bool = knob(False, "do not check the server's certificate; every report warns")

    def check(self) -> list[tuple[str, str]]:
        if self.client_key is not None and self.client_cert is None:
            return [("client_key", "needs client_cert")]
        return []


@dataclass(frozen=True)
class Gpu:
    """GPU telemetry read with NVML on this host during the run (`loadgate.load.gpu`)."""

    telemetry: str = knob("auto", "'nvml' reads this host's GPUs (utilisation, memory, power, energy), 'auto' "
                          "only where the engine runs on this host and NVML is installed, 'off' never",
                          one_of=lambda: ("auto", "nvml", "off"))
    interval_s: float = knob(0.5, "seconds between readings", min=0.05)
    max_mb: float = knob(64.0, "most of gpu.jsonl kept in the run folder, MiB (then readings stop, with a "
                         "warning)", exclusive_min=0.0)


ROUTES = ("round_robin", "least_in_flight", "sticky", "via_router")  # target.route (docs/replicas.md)


@dataclass(frozen=True)
class Target:
    """The engine under test."""

    endpoint: str = knob("embedded", "'embedded' (in-process simulator) or the engine's base URL, "
                         "e.g. http://127.0.0.1:8000")
    endpoints: tuple[str, ...] | None = knob(
        None, "several replicas' base URLs (docs/replicas.md); with route via_router, target.endpoint is the "
        "router every request goes to and these are read for their fingerprints only")
    route: str = knob("round_robin", "how requests spread over target.endpoints: round_robin (by plan index), "
                      "sticky (a conversation's turns on one replica), via_router (all to target.endpoint, a "
                      "router in front of them) or least_in_flight", one_of=lambda: ROUTES)
    api: str = knob("openai-completions", "HTTP API used for generation: openai-* as vLLM/SGLang serve it, "
                    "llamacpp (llama-server /completion) or llamacpp-openai-* (its /v1 routes)", one_of=apis)
    model: str | None = knob(None, "model name sent in requests; default: the first of /v1/models")
    sim: SimConfig = field(default_factory=SimConfig,
                           metadata={"help": "simulator settings (only with endpoint: embedded)"})
    metrics_url: str | None = knob(None, "Prometheus /metrics URL; default: endpoint + /metrics")
    metrics_interval_s: float = knob(0.5, "seconds between scrapes of the metrics (the run folder's series "
                                     "server-metrics.jsonl.gz, and the gauges' min/mean/max)", exclusive_min=0.0)
    metrics_series_max_mb: float = knob(64.0, "largest series file, MiB: past it the series is no longer kept "
                                        "(a warning says so)", exclusive_min=0.0)
    extra_metrics_urls: tuple[str, ...] = knob((), "more Prometheus URLs scraped into the series beside the "
                                               "engine's (exporters: DCGM, node)")
    timeout_s: float = knob(600.0, "per-request timeout, seconds", exclusive_min=0.0)
    headers: dict[str, str] = field(default_factory=dict, metadata={
        "help": "extra HTTP headers; ${NAME} in a value is read from the environment at run time and never "
                "written anywhere"})
    api_key_env: str | None = knob(None, "environment variable holding an API key, sent as "
                                   "`Authorization: Bearer KEY` (read at run time, never written)")
    tls: Tls = field(default_factory=Tls, metadata={"help": "HTTPS: CA file, client certificate, insecure mode"})
    gpu: Gpu = field(default_factory=Gpu, metadata={"help": "GPU telemetry from NVML on this host: mode, "
                                                             "interval, size cap"})
    limits: ResponseLimits = field(default_factory=ResponseLimits,
                                   metadata={"help": "limits on what the client accepts from the server"})
    declared: dict[str, str] = field(default_factory=dict, metadata={
        "help": "configuration the engine does not serve, for the fingerprint: model revision, weight "
                "and tokenizer hashes, engine commit, attention backend, dtype, kv dtype, GPU, driver, "
                "speculative method / draft model / k, determinism flags, …"})
    extra_body: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "keys merged into every request body, the exactness check's included (where the check's own "
                "sampling keys win), e.g. chat_template_kwargs: {enable_thinking: false}, reasoning_effort, "
                "repetition_penalty; part of the fingerprint; ${NAME} in a string is read from the environment "
                "and never written anywhere"})
    extra_body_override: bool = knob(
        False, "let target.extra_body replace the keys loadgate itself sets (model, prompt, messages, stream, "
        "max_tokens)")

    def check(self) -> list[tuple[str, str]]:
        """Endpoint and metrics URL are http(s) URLs; extra_body keeps off the keys loadgate sets."""
        if self.endpoint != "embedded" and not is_http_url(self.endpoint):
            return [("endpoint", f"expected 'embedded' or an http:// or https:// URL, got {self.endpoint!r}")]
        problem = self._check_endpoints()
        if problem:
            return problem
        if self.metrics_url is not None and not is_http_url(self.metrics_url):
            return [("metrics_url", f"expected an http:// or https:// URL, got {self.metrics_url!r}")]
        for k, u in enumerate(self.extra_metrics_urls):
            if not is_http_url(u):
                return [(f"extra_metrics_urls[{k}]", f"expected an http:// or https:// URL, got {u!r}")]
        # top-level keys, and SGLang's sampling_params and the stream's options, where loadgate's own live too
        nested = [(f"{k}.{sub}", sub) for k in ("sampling_params", "stream_options")
                  if isinstance(self.extra_body.get(k), dict) for sub in self.extra_body[k]]
        for path, key in [(k, k) for k in self.extra_body] + nested:
            if key in REQUEST_KEYS:
                return [(f"extra_body.{path}", f"set by load.request.{REQUEST_KEYS[key]} (the exactness check sets "
                         "its own), not here")]
            if key in OWN_KEYS and not self.extra_body_override:
                return [(f"extra_body.{path}", "loadgate sets this key itself (model, prompt, messages, stream, "
                         "max_tokens, and what makes the server return ids, counts and logprobs); set "
                         "target.extra_body_override: true to replace it")]
        return []

    def _check_endpoints(self) -> list[tuple[str, str]]:
        """`endpoints`: not empty, http(s) URLs, none twice; not beside `endpoint` unless the route is
        via_router (where `endpoint`, the router, is required)."""
        if self.endpoints is None:
            if self.route != "round_robin":
                return [("route", f"{self.route} chooses among target.endpoints, and none are listed")]
            return []
        if not self.endpoints:
            return [("endpoints", "is empty: list the replicas' base URLs, or leave it out and set target.endpoint")]
        seen: dict[str, int] = {}
        for k, u in enumerate(self.endpoints):
            if not is_http_url(u):
                return [(f"endpoints[{k}]", f"expected an http:// or https:// URL, got {u!r}")]
            j = seen.setdefault(u.rstrip("/"), k)
            if j != k:
                return [(f"endpoints[{k}]", f"{u!r} is listed twice (also endpoints[{j}]): each replica once")]
        if self.route == "via_router":
            if self.endpoint == "embedded":
                return [("route", "via_router sends every request to target.endpoint, the router in front of "
                         "target.endpoints: give the router's URL there")]
        elif self.endpoint != "embedded":
            return [("endpoint", "set target.endpoint or target.endpoints, not both (both only with route: "
                     "via_router, where endpoint is the router and endpoints its replicas)")]
        return []

    @property
    def replicas(self) -> tuple[str, ...]:
        """The replicas' base URLs (no trailing slash), () for one endpoint."""
        return tuple(u.rstrip("/") for u in self.endpoints or ())

# Body keys loadgate sets on every request: refused in target.extra_body unless extra_body_override
OWN_KEYS = frozenset({"model", "prompt", "messages", "stream", "max_tokens", "max_completion_tokens", "n_predict",
                      "max_new_tokens", "text", "input_ids", "include_usage", "continuous_usage_stats",
                      "return_token_ids", "return_tokens_as_token_ids", "return_tokens", "cache_prompt", "logprobs",
                      "top_logprobs", "n_probs", "return_logprob", "top_logprobs_num", "n", "best_of"})
# Body keys load.request sets (per engine spelling): refused in extra_body, with the key to use instead
REQUEST_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                "seed": "seed", "sampling_seed": "seed", "ignore_eos": "ignore_eos", "stop": "stop"}


def is_http_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True)
class ThinkTime:
    """A user's pause between a reply and their next turn, in seconds: `fixed` (value), `uniform`
    (min..max) or `exponential` (mean)."""

    dist: Literal["fixed", "uniform", "exponential"] = knob("fixed", "distribution family")
    value: float | None = knob(None, "fixed: the pause, seconds", min=0.0)
    min: float | None = knob(None, "uniform: shortest pause, seconds", min=0.0)
    max: float | None = knob(None, "uniform: longest pause, seconds", min=0.0)
    mean: float | None = knob(None, "exponential: mean pause, seconds", exclusive_min=0.0)

    def check(self) -> list[tuple[str, str]]:
        need = {"fixed": ["value"], "uniform": ["min", "max"], "exponential": ["mean"]}[self.dist]
        problems = [(k, f"required when dist is {self.dist!r}") for k in need if getattr(self, k) is None]
        problems += [(k, f"not used when dist is {self.dist!r} (it reads: {', '.join(need)})")
                     for k in ("value", "min", "max", "mean") if k not in need and getattr(self, k) is not None]
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append(("max", f"must be >= min ({self.min:g}), got {self.max:g}"))
        return problems


@dataclass(frozen=True)
class Sessions:
    """Multi-turn conversations (docs/workloads.md#conversations): each turn sends the whole history
    (the earlier user turns and replies) and a new user turn; `workload.requests` counts conversations,
    `load.concurrency` those in flight (closed loop) or `load.rate` those started a second (open loop)."""

    turns: int = knob(3, "synthetic conversations (no dataset): turns in each; each user turn is "
                      "workload.input_len tokens, each reply workload.output_len (a dataset's conversations "
                      "have their own user turns)", min=1, max=256)
    history: Literal["auto", "actual", "recorded"] = knob(
        "auto", "the replies a turn's history carries: 'actual' (the engine's own replies to the earlier "
        "turns), 'recorded' (the dataset's replies; synthetic: token ids drawn from the seed, so both sides of "
        "an A/B send identical bodies); 'auto': actual in a single run, recorded in an A/B (which refuses actual)")
    think_time: float | ThinkTime = knob(
        0.0, "seconds between a reply and the next turn of its conversation: a number, or {dist: fixed | "
        "uniform | exponential, ...}")
    header: str = knob("x-session-id", "HTTP header carrying the conversation's id (the same on both sides of an "
                       "A/B); empty: none")
    max_turns: int | None = knob(None, "a dataset's conversations: at most this many user turns each (the rest "
                                 "are not sent)", min=1)

    def check(self) -> list[tuple[str, str]]:
        if self.header and not all(c.isalnum() or c in "-_" for c in self.header):
            return [("header", f"an HTTP header name (letters, digits, - and _), got {self.header!r}")]
        if not isinstance(self.think_time, ThinkTime) and self.think_time < 0:  # a ThinkTime checks itself
            return [("think_time", f"expected a number >= 0, got {self.think_time:g}")]
        return []


@dataclass(frozen=True)
class Workload:
    """What to send: how many requests, and the prompt and output lengths (or a trace)."""

    requests: int | None = knob(
        None, "measured requests (warmup comes on top); default 100, and with load.schedule: trace every request "
        "in the trace's window (then this caps them: the first in time)", min=1)
    input_len: Distribution = field(default_factory=lambda: Distribution(dist="fixed", value=128),
                                    metadata={"help": "prompt length in tokens"})
    output_len: Distribution = field(default_factory=lambda: Distribution(dist="fixed", value=128),
                                     metadata={"help": "output length in tokens (sent with ignore_eos)"})
    dataset: Dataset | None = knob(None, "prompts from a dataset file instead of drawn token ids "
                                   "(docs/workloads.md); rows repeat when `requests` exceeds them")
    trace: str | None = knob(None, "JSONL trace to replay instead of the distributions (relative to "
                             "the profile); the same as dataset: {path: ..., format: trace}")
    tokenizer: str = knob(
        "server", "where prompt token ids come from: 'server' (the engine's /tokenize), a local Hugging Face "
        "tokenizer (PATH of a model folder or its tokenizer.json, relative to the profile; its chat template "
        "gives exact chat prompt lengths), or 'none' (text prompts, every count from the server's usage)")
    shared_prefix: SharedPrefix | None = knob(None, "give prompts a shared prefix, in groups")
    sessions: Sessions | None = knob(
        None, "multi-turn conversations (docs/workloads.md#conversations): `requests` then counts conversations, "
        "`load.concurrency` conversations in flight (or `load.rate` conversations started a second)")
    cache: Literal["fresh", "warm"] = knob(
        "fresh", "prefix-cache state between load levels and A/B pairs: 'fresh' gives each level and "
        "each pair its own prompts (same lengths, other token ids; both sides of a pair alike; declared "
        "shared prefixes kept; a trace's own ids, text and messages are sent as written), so no run replays prompts an earlier one left in the engine's prefix "
        "cache; 'warm' replays the same prompts everywhere (to measure a warm cache on purpose)")
    prompt_salt: int | None = knob(
        None, "with cache: fresh, which prompts a run draws (lengths stay the seed's): unset, each run "
        "draws its own salt, so a second run of one profile does not replay the first's prompts into a "
        "warm cache; meta.json's profile records the salt, and setting it sends that run's prompts again",
        min=0)
    token_mismatch_limit: float = knob(
        0.0, "largest fraction of requests whose prompt or completion token count may differ "
        "from the plan before the run is invalid", min=0.0, max=1.0)

    @property
    def request_count(self) -> int:
        """`requests`, or its default (100) where unset; a timed trace's window decides its own."""
        return 100 if self.requests is None else self.requests

    def check(self) -> list[tuple[str, str]]:
        if self.trace is not None and self.dataset is not None:
            return [("trace", "give either trace or dataset (a trace is dataset: {path: ..., format: trace})")]
        d = self.dataset
        if d is not None and self.tokenizer == "none":
            if d.filters:
                return [(f"dataset.{next(iter(d.filters))}", "length filters count tokens: needs workload.tokenizer "
                         "server or a local tokenizer (not none)")]
            if d.lengths == "profile":
                return [("dataset.lengths", "shaping prompts to workload.input_len counts tokens: needs "
                         "workload.tokenizer server or a local tokenizer (not none)")]
        if d is not None and d.format != "trace" and self.shared_prefix is not None:
            return [("shared_prefix", "prompts come from the dataset, which has its own (no shared_prefix)")]
        if self.sessions is not None:
            if self.trace is not None or (d is not None and d.format == "trace"):
                return [("sessions", "a trace's lines are single requests: conversations come from a dataset's "
                         "conversations (ShareGPT, OpenAI chat JSONL) or are synthetic")]
            if d is not None and (d.filters or d.lengths != "dataset"):
                return [("sessions", "a dataset's conversations are sent as written: no length filters, "
                         "lengths: dataset")]
            if self.shared_prefix is not None:
                return [("shared_prefix", "conversations share their own history: no shared_prefix")]
        return []

    @property
    def source(self) -> Dataset | None:
        """The dataset the requests come from: `dataset`, or `trace` read as a dataset of format trace."""
        if self.trace is not None:
            return Dataset(path=self.trace, format="trace")
        return self.dataset


@dataclass(frozen=True)
class RequestSettings:
    """The sampling and stopping settings of every measured request (`load.request`). The exactness
    check keeps its own: greedy, or the sampling contracts of `exactness.sampling`."""

    temperature: float = knob(0.0, "sampling temperature; 0 is greedy", min=0.0)
    top_p: float = knob(1.0, "nucleus sampling: sample from the most likely tokens whose probabilities add up "
                        "to this", exclusive_min=0.0, max=1.0)
    top_k: int = knob(-1, "sample from the k most likely tokens; -1 keeps them all", min=-1)
    min_p: float = knob(0.0, "drop tokens less likely than this fraction of the most likely one", min=0.0, max=1.0)
    seed: Literal["none", "per_request"] = knob(
        "none", "'per_request': each request carries a seed made from the profile's `seed` and the request's "
        "index (the same request gets the same seed in every run and on both sides of an A/B); 'none': no seed "
        "is sent, as production traffic sends none")
    ignore_eos: bool = knob(True, "generate max_tokens tokens even past the end-of-sequence token; false: the "
                            "model may stop early, and the report shows the output lengths it received")
    stop: tuple[str, ...] = knob((), "stop strings: the output ends before the first of them (implies that "
                                 "outputs may be shorter than planned)", free_text=True)

    @property
    def natural_lengths(self) -> bool:
        """Output lengths are the model's to choose (EOS or a stop string may end a request early)."""
        return not self.ignore_eos or bool(self.stop)

    def check(self) -> list[tuple[str, str]]:
        if any(not s for s in self.stop):
            return [("stop", "an empty stop string would end every output at once")]
        return []


@dataclass(frozen=True)
class Abort:
    """A circuit breaker (`load.abort`): a measured phase whose finished requests fail at this rate
    over a sliding window stops the run: no new request starts, those in flight get `load.grace_s`
    and are then cut (kept as errors of kind `aborted`), and the run ends ABORTED (exit 20)."""

    error_rate: float = knob(0.5, "failed share of the requests that finished in the window that aborts",
                             exclusive_min=0.0, max=1.0)
    window_s: float = knob(10.0, "the sliding window, seconds of the phase", exclusive_min=0.0)
    min_requests: int = knob(10, "requests finished in the window before it is judged", min=1)


@dataclass(frozen=True)
class ThresholdSpec:
    """A threshold written as a mapping (k6's form) beside the plain string: its text, and whether its
    failing during a measured level aborts the run (`abort_on_fail`: judged on the requests the level
    finished so far, after `delay_abort_eval`; docs/hardening.md)."""

    threshold: str = field(metadata={"help": "the threshold, as its plain string form (e.g. \"p(99) < 500ms\")"})
    abort_on_fail: bool = knob(False, "abort the level (exit 20, ABORTED) once this threshold fails on the "
                               "requests finished so far")
    delay_abort_eval: float | str | None = knob(
        None, "with abort_on_fail: judge nothing before this long into the level (seconds, or e.g. '10s', "
        "'500ms', '2m')", min=0.0)

    @property
    def delay_s(self) -> float:
        """`delay_abort_eval` in seconds (0 when not given)."""
        d = self.delay_abort_eval
        if d is None:
            return 0.0
        if not isinstance(d, str):
            return float(d)
        m = _DELAY.fullmatch(d.strip())
        if m is None:  # (a profile file's is refused when it loads: `check`)
            raise ValueError(f"delay_abort_eval: expected seconds or a duration like '10s', got {d!r}")
        return float(m.group(1)) * _DELAY_UNITS[m.group(2)]

    def check(self) -> list[tuple[str, str]]:
        d = self.delay_abort_eval
        if isinstance(d, str) and _DELAY.fullmatch(d.strip()) is None:
            return [("delay_abort_eval", f"expected seconds or a duration like '10s', '500ms' or '2m', got {d!r}")]
        if d is not None and not self.abort_on_fail:
            return [("delay_abort_eval", "holds the evaluation of abort_on_fail, which is not set: add "
                     "abort_on_fail: true or remove it")]
        return []


_DELAY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)")
_DELAY_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}


def threshold_text(item: str | ThresholdSpec) -> str:
    """A threshold's text, whichever form it was written in."""
    return item if isinstance(item, str) else item.threshold


@dataclass(frozen=True)
class Search:
    """The SLO capacity search (docs/capacity.md): probes from `lo` up (doubling, capped at `hi`) until
    the profile's `thresholds` fail, then bisection between the last passing and the first failing
    load until they are within `resolution` of each other."""

    over: Literal["concurrency", "rate"] = knob(
        "concurrency", "what the probes vary: concurrency (closed loop, integer levels) or rate (open loop)")
    lo: float = knob(1.0, "the first probe's load; it failing the thresholds ends the search (exit 20)",
                     exclusive_min=0.0)
    hi: float = knob(64.0, "the highest load probed", exclusive_min=0.0)
    resolution: float = knob(0.05, "stop bisecting when (first failing - last passing) / last passing is at "
                             "most this", exclusive_min=0.0, max=1.0)

    def check(self) -> list[tuple[str, str]]:
        if self.lo >= self.hi:
            return [("lo", f"the search needs lo < hi, got lo {self.lo:g} and hi {self.hi:g}")]
        if self.over == "concurrency":
            for key in ("lo", "hi"):
                v = getattr(self, key)
                if v != int(v):
                    return [(key, f"a concurrency is a whole number of requests in flight, got {v:g}")]
        return []


@dataclass(frozen=True)
class Ramp:
    """Before each measured level, after its warmup, the load rises from `start` to the level's over
    `duration_s` (docs/workloads.md#ramps): a closed loop's limit on requests in flight grows, an open
    loop's arrival rate grows (the intended times follow the integrated rate). No request starts after
    `duration_s`; those in flight finish before the level's counters are scraped and its measured
    phase starts. The ramp's requests are flagged (`ramp` in their records) and outside every figure."""

    duration_s: float = field(metadata={"help": "seconds the load takes to rise to the level's", "exclusive_min": 0.0})
    shape: Literal["linear", "exponential"] = knob(
        "linear", "how the load rises over time: linear (start + (level - start) t / T) or exponential "
        "(start x (level / start) ^ (t / T))")
    start: float | None = knob(
        None, "the load the ramp starts from: requests in flight (closed loop, a whole number; default 1) or "
        "arrivals per second (open loop; default a tenth of the level's rate); above a level's load, that "
        "level's ramp holds its load", exclusive_min=0.0)


@dataclass(frozen=True)
class PerActor:
    """What each Ray actor reserves on its node."""

    cpus: float = knob(1.0, "CPUs each actor reserves (Ray's num_cpus; give it one per load.workers process)",
                       exclusive_min=0.0)


@dataclass(frozen=True)
class Distributed:
    """The load sent from several client hosts through Ray (docs/distributed.md): the plan split across
    `actors` Ray actors, each running `load.workers` local client processes; one run folder."""

    backend: Literal["ray"] = knob("ray", "the engine that places the client processes: ray (pip install "
                                   "'loadgate[ray]')")
    address: str = knob("auto", "the Ray cluster: auto (the one `ray start` left on this host), host:port of "
                        "its head, or ray://host:port (Ray Client)")
    actors: int = knob(2, "Ray actors, spread over the cluster's nodes", min=1, max=1024)
    per_actor: PerActor = field(default_factory=PerActor, metadata={"help": "what each actor reserves: cpus"})

    def check(self) -> list[tuple[str, str]]:
        """The address is `auto`, host:port or ray://host:port."""
        a = self.address
        if a == "auto":
            return []
        rest = a.removeprefix("ray://")
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in rest:
            return [("address", f"give auto, host:port or ray://host:port, got {a!r}")]
        return []


@dataclass(frozen=True)
class Load:
    """How to send it: closed loop (`concurrency`), open loop (`rate`), or a timed trace's own times
    (`schedule: trace`)."""

    schedule: Literal["generated", "trace"] = knob(
        "generated", "generated: a closed loop at `concurrency` or an open loop at `rate`; trace: each request "
        "at its trace line's timestamp (workload.dataset of format trace or mooncake), latency from that time")
    trace_speed: float = knob(1.0, "schedule trace: how fast trace time passes (2: gaps halved, twice the rate)",
                              exclusive_min=0.0)
    trace_start_s: float = knob(0.0, "schedule trace: replay from this many seconds after the trace's earliest "
                                "timestamp", min=0.0)
    trace_length_s: float | None = knob(None, "schedule trace: replay this many seconds of trace time (default: "
                                        "to its end)", exclusive_min=0.0)
    concurrency: int | tuple[int, ...] | None = knob(
        None, "closed loop: requests in flight (a list runs a sweep)", min=1)
    rate: float | tuple[float, ...] | None = knob(
        None, "open loop: mean arrivals per second (a list runs a sweep, one level per rate)", exclusive_min=0.0)
    search: Search | None = knob(None, "the SLO capacity search (docs/capacity.md): the probes' loads replace "
                                 "`concurrency` and `rate`")
    arrival: Literal["poisson", "gamma", "constant"] = knob("poisson", "open loop arrival process")
    burstiness: float = knob(1.0, "gamma shape factor: < 1 burstier than Poisson, > 1 smoother",
                             exclusive_min=0.0)
    max_in_flight: int | None = knob(None, "open loop: cap on requests in flight", min=1)
    warmup_requests: int = knob(0, "requests sent first and excluded from every figure", min=0)
    duration_s: float | None = knob(None, "stop starting requests after this many seconds",
                                    exclusive_min=0.0)
    stream: bool = knob(True, "stream responses (SSE)")
    request: RequestSettings = field(default_factory=RequestSettings, metadata={
        "help": "sampling and stopping of every measured request: temperature, top_p, top_k, min_p, seed, "
                "ignore_eos, stop"})
    transport: Literal["socket", "aiohttp"] = knob(
        "socket", "hot-path HTTP client: 'socket' stamps each read with the kernel's receive time "
        "(plain HTTP; user-space time for TLS) before any parsing; 'aiohttp' stamps after aiohttp "
        "parsed the read (later by a task switch)")
    reset_prefix_cache: bool = knob(
        False, "empty the engine's prefix cache before each load level and each A/B run (vLLM "
        "POST /reset_prefix_cache, a dev-mode route: VLLM_SERVER_DEV_MODE=1; SGLang POST /flush_cache); "
        "an engine without either route stops the run (exit 3) before its performance phase")
    workers: int = knob(1, "client processes, each with its own event loop; raise it when the "
                        "client health check says the loop lagged", min=1, max=64)
    grace_s: float = knob(1.0, "after SIGINT or SIGTERM (or an abort), how long requests in flight may finish "
                          "before they are cancelled (a second signal cancels at once)", min=0.0)
    abort: Abort | None = knob(None, "a circuit breaker: stop the run when the measured requests fail at this "
                               "rate over a sliding window (exit 20, ABORTED)")
    ramp: Ramp | None = knob(None, "before each measured level, the load rises to the level's over "
                             "ramp.duration_s (its requests outside every figure; docs/workloads.md#ramps)")
    distributed: Distributed | None = knob(None, "send from several client hosts through Ray actors "
                                           "(docs/distributed.md); default: this host only")

    def _check_ramp(self) -> list[tuple[str, str]]:
        """A ramp shorter than the measured phase's `duration_s`, starting at a whole number of requests in
        flight in a closed loop."""
        r = self.ramp
        if r is None:
            return []
        if self.duration_s is not None and r.duration_s >= self.duration_s:
            return [("ramp.duration_s", f"the ramp ({r.duration_s:g} s) must be shorter than the measured phase "
                     f"(load.duration_s: {self.duration_s:g} s)")]
        closed = self.concurrency is not None or (self.search is not None and self.search.over == "concurrency")
        if closed and r.start is not None and r.start != int(r.start):
            return [("ramp.start", f"a closed loop's ramp starts at a whole number of requests in flight, got "
                     f"{r.start:g}")]
        return []

    @property
    def rates(self) -> tuple[float, ...]:
        """The open loop's rates in the order their levels run (one unless `rate` is a sweep)."""
        r = self.rate
        return r if isinstance(r, tuple) else () if r is None else (r,)

    def check(self) -> list[tuple[str, str]]:
        """Exactly one of concurrency and rate (neither under a trace's schedule); open-loop-only knobs
        only with rate or a trace."""
        if self.schedule == "trace":
            for key in ("search", "ramp"):
                if getattr(self, key) is not None:
                    return [(key, f"load.schedule: trace sends each request at its trace timestamp: no {key}")]
            for key in ("concurrency", "rate"):
                if getattr(self, key) is not None:
                    return [(key, "load.schedule: trace sends each request at its trace timestamp: no "
                             f"{key} (cap requests in flight with max_in_flight)")]
            if self.duration_s is not None:
                return [("duration_s", "load.schedule: trace replays a window of the trace: give its length as "
                         "load.trace_length_s (seconds of trace time), not duration_s")]
            for key, given in (("arrival", self.arrival != "poisson"), ("burstiness", self.burstiness != 1.0)):
                if given:
                    return [(key, "the arrivals are the trace's own under load.schedule: trace")]
            return []
        for key, default in (("trace_speed", 1.0), ("trace_start_s", 0.0), ("trace_length_s", None)):
            if getattr(self, key) != default:
                return [(key, "only used with load.schedule: trace")]
        problem = self._check_ramp()
        if problem:
            return problem
        if self.search is not None:
            for key in ("concurrency", "rate"):
                if getattr(self, key) is not None:
                    return [(key, f"load.search chooses each probe's {self.search.over}: no {key}")]
            if self.search.over == "concurrency" and self.max_in_flight is not None:
                return [("max_in_flight", "only used with a search over rate (open loop)")]
            return []
        if (self.concurrency is None) == (self.rate is None):
            return [("concurrency", "give exactly one of `concurrency` (closed loop) or `rate` (open loop)")]
        for key in ("concurrency", "rate"):
            if getattr(self, key) == ():
                return [(key, "a sweep needs at least one value")]
        if self.concurrency is not None and self.max_in_flight is not None:
            return [("max_in_flight", "only used with `rate` (open loop); closed loop keeps "
                     "`concurrency` requests in flight")]
        return []


@dataclass(frozen=True)
class Scenarios:
    """How the corpus is replayed against the candidate; each scenario compares every sequence."""

    solo: bool = knob(True, "each case alone, one request at a time")
    concurrent: int = knob(0, "every case with this many requests in flight; 0 is off", min=0)
    repeat: int = knob(0, "this many requests cycling through the cases (run-to-run drift); 0 is off", min=0)
    repeat_batch: int = knob(8, "requests in flight during `repeat`", min=1)
    long: bool = knob(False, "the cases tagged `long`, one at a time")
    reset_prefix_cache: bool = knob(
        True, "empty the engine's prefix cache before each scenario where it has a route (vLLM in dev "
        "mode, SGLang; llama.cpp requests never use it), so no scenario meets the corpus cached by the "
        "one before; each scenario's prefix-cache hits are reported either way")

    def check(self) -> list[tuple[str, str]]:
        if not (self.solo or self.concurrent or self.repeat or self.long):
            return [("solo", "at least one scenario must be on")]
        return []


@dataclass(frozen=True)
class Protocol:
    """Interface checks run after the scenarios (`loadgate.gate.protocol`): each says what it proved,
    or why it does not apply to the engine."""

    stream: bool = knob(True, "a streamed and a non-streamed request give the same ids, finish reason and usage")
    stop: bool = knob(True, "a stop string ends the output before it, with finish reason 'stop'")
    max_tokens: bool = knob(True, "max_tokens ends the output there, with finish reason 'length'")
    tools: bool = knob(True, "a named tool_choice gives a tool call whose JSON arguments validate against its schema")
    timeout: bool = knob(True, "a request the client gives up on leaves the server healthy")
    cancel: bool = knob(True, "a client that disconnects mid-stream frees its slot")
    free_within_s: float = knob(5.0, "how soon the running-requests gauge must be back to idle, seconds",
                                exclusive_min=0.0)
    long_max_tokens: int = knob(2048, "max_tokens of the long request the timeout and cancel checks cut short "
                                "(at most what the engine's context leaves)", min=16)
    client_timeout_s: float = knob(0.2, "the timeout check's client timeout, seconds", exclusive_min=0.0)


@dataclass(frozen=True)
class SamplingContract:
    """Contracts for sampled outputs (`loadgate.exactness.sampling`), checked after the scenarios."""

    temperature: float = knob(0.8, "the sampling temperature both contracts use", exclusive_min=0.0)
    seeded_replay: bool = knob(True, "seeded-replay: each case sampled with a fixed seed, sent twice, gives the "
                               "same ids (where the engine takes per-request seeds)")
    replay_cases: int = knob(8, "seeded-replay: how many short cases", min=1)
    replays: int = knob(2, "seeded-replay: how many times each case is sent with its seed (all must agree)", min=2)
    distribution_preserving: bool = knob(
        False, "distribution-preserving: at fixed prefixes, the candidate's sampled tokens follow the "
        "baseline's distribution (chi-square per prefix, Holm-corrected); the baseline file must hold "
        "samples (`loadgate baseline` with this section)")
    alpha: float = knob(0.01, "distribution-preserving: family-wise significance level", exclusive_min=0.0, max=0.5)
    samples: int = knob(300, "distribution-preserving: seeded samples per prefix and side", min=20)
    prefixes: int = knob(2, "distribution-preserving: how many short completion cases serve as prefixes", min=1)
    concurrency: int = knob(8, "sample requests in flight", min=1)


@dataclass(frozen=True)
class Exactness:
    """The exactness check that must pass before any speed is reported."""

    baseline: str = knob("sim-reference", "baseline file written by `loadgate baseline`, or "
                         "'sim-reference' (embedded targets: the simulator's own reference output)")
    corpus: str | None = knob(None, "JSONL corpus of cases; default: workloads/reference.jsonl")
    contract: Contract = field(default_factory=Contract, metadata={"help": "what must match"})
    scenarios: Scenarios = field(default_factory=Scenarios, metadata={"help": "how the corpus is replayed"})
    logprobs: int = knob(2, "top logprobs requested per position (2 gives the near-tie gap)", min=0, max=20)
    seed: int = knob(0, "sampling seed sent with every request", min=0)
    speculation: Literal["auto", "on", "off"] = knob(
        "auto", "whether the check must prove that speculation ran: 'auto' follows the fingerprint")
    timeout_s: float = knob(600.0, "per-request timeout during the check, seconds", exclusive_min=0.0)
    protocol: Protocol | None = knob(None, "interface checks after the scenarios: streaming, stop strings, "
                                     "max_tokens, tool calls, timeouts, cancellation")
    sampling: SamplingContract | None = knob(None, "sampling contracts after the scenarios: seeded replay, "
                                             "distribution-preserving speculation")

    def check(self) -> list[tuple[str, str]]:
        """A tier that reads logprobs needs them requested (near-tie-tolerant: two, for the gap)."""
        need = {"bit-exact": 1, "logprob-tolerance": 1, "near-tie-tolerant": 2}.get(self.contract.tier, 0)
        if self.logprobs < need:
            return [("logprobs", f"the {self.contract.tier!r} contract reads logprobs: needs at least {need}, "
                     f"got {self.logprobs}")]
        if self.contract.stable and self.scenarios.repeat == 0:
            return [("contract.stable", "judged on prompts sent more than once: set exactness.scenarios.repeat "
                     "(at least twice the number of cases)")]
        return []


@dataclass(frozen=True)
class AB:
    """Candidate vs baseline in one profile: `target` is the candidate, `ab.baseline` the baseline;
    both must be up at once. Runs alternate in pairs (order shuffled within each pair)."""

    baseline: Target = field(default_factory=Target, metadata={"help": "the baseline engine"})
    pairs: int = knob(5, "baseline/candidate run pairs", min=2, max=100)
    order_seed: int = knob(0, "seed of the order within each pair", min=0)
    practical: float = knob(0.05, "smallest relative change that matters (0.05 = 5 %)", min=0.0, max=1.0)
    practical_ms: float = knob(1.0, "latency changes smaller than this many milliseconds never matter "
                               "(whatever their relative size)", min=0.0)
    alpha: float = knob(0.05, "significance level of the rank test", exclusive_min=0.0, max=0.5)
    confidence: float = knob(0.95, "confidence of the bootstrap interval", exclusive_min=0.5, max=0.999)
    decide_on: tuple[str, ...] = knob(
        ("output_throughput", "ttft.p50", "itl.p50", "e2e.p50", "e2e.p99"),
        "figures whose decisions make the verdict (" + ", ".join(ab_figures()) + ")")

    def check(self) -> list[tuple[str, str]]:
        known = ab_figures()
        bad = [f for f in self.decide_on if f not in known]
        if bad:
            return [("decide_on", f"unknown figure {bad[0]!r}; known: {', '.join(known)}")]
        return self.baseline.check()


@dataclass(frozen=True)
class Slo:
    """Per-request service levels for goodput; a request counts as good when it succeeded and met
    every level given."""

    ttft_ms: float | None = knob(None, "time to first token at most this", exclusive_min=0.0)
    tpot_ms: float | None = knob(None, "time per output token after the first at most this", exclusive_min=0.0)
    e2e_ms: float | None = knob(None, "end-to-end latency at most this", exclusive_min=0.0)


@dataclass(frozen=True)
class HealthBudgets:
    """How much measurement error a run may carry. Over `stamp_error_p99_ms` or (open loop)
    `schedule_lag_p99_ms` the run is invalid (exit code 30); the others are warned about."""

    stamp_error_p99_ms: float = knob(
        2.0, "p99 of how far a TTFT or ITL stamp may be from the chunk's arrival (several chunks in one read; "
        "with user-space stamps, plus the loop's lag): over it the run is invalid", exclusive_min=0.0)
    loop_lag_p99_ms: float = knob(10.0, "event-loop lag p99: warned about when over", exclusive_min=0.0)
    gc_pause_max_ms: float = knob(50.0, "longest garbage-collection pause: warned about when over", exclusive_min=0.0)
    cpu_max: float = knob(0.95, "client CPU as a fraction of one core, per worker process: warned about when over",
                          exclusive_min=0.0)
    schedule_lag_p99_ms: float = knob(10.0, "open loop: p99 of how late requests were noticed as due: over it "
                                      "the run is invalid", exclusive_min=0.0)
    clock_offset_ms: float = knob(5.0, "load.distributed: how well each client host's clock offset to the driver's "
                                  "must be known (half the best round trip, plus its change from the level's start "
                                  "to its end): over it the run is invalid", exclusive_min=0.0)


MAX_SLICES = 10_000
"""The most time slices one level of a bounded run may be cut into (`Report.slice_s`)."""


@dataclass(frozen=True)
class Report:
    """What the report adds to each level's figures (docs/measurement.md#time-slices)."""

    slice_s: float | None = knob(
        None, "cut each level's window into slices of this many seconds and give each its requests (by start), "
        "output tokens per second (by arrival) and p50 / p99 of ttft, itl and e2e; default: off",
        exclusive_min=0.0)


@dataclass(frozen=True)
class Output:
    """Where results go."""

    dir: str = knob("results", "folder that receives results/<run-id>/")
    run_id: str | None = knob(None, "run folder name; default: <profile name>-<UTC time>")

    def check(self) -> list[tuple[str, str]]:
        """The run id is one folder name."""
        if self.run_id is not None and not is_folder_name(self.run_id):
            return [("run_id", f"expected a folder name (no slashes, not . or ..), got {self.run_id!r}")]
        return []


def is_folder_name(text: str) -> bool:
    """One path segment that stays inside its parent: no separators, not `.`, `..` or empty."""
    return bool(text) and "/" not in text and "\\" not in text and text not in (".", "..") \
        and not text.startswith("-")


@dataclass(frozen=True)
class Profile:
    """A loadgate profile: the engine under test, what to send, how, and where results go."""

    name: str = knob("run", "name used in run ids and reports")
    seed: int = knob(0, "seed of the request plan", min=0)
    target: Target = field(default_factory=Target, metadata={"help": "the engine under test"})
    workload: Workload = field(default_factory=Workload, metadata={"help": "what to send"})
    load: Load = field(default_factory=lambda: Load(concurrency=1),
                       metadata={"help": "how to send it"})
    exactness: Exactness | None = knob(None, "the exactness check (required by `loadgate run`; "
                                       "without it only `--unverified` measures)")
    ab: AB | None = knob(None, "compare against a baseline engine in interleaved runs")
    thresholds: dict[str, tuple[str | ThresholdSpec, ...]] = field(default_factory=dict, metadata={
        "help": "k6-style thresholds per metric, e.g. ttft: ['p(99) < 800ms'], or as mappings "
                "{threshold: 'p(99) < 800ms', abort_on_fail: true}; see loadgate/core/thresholds.py"})
    slo: Slo = field(default_factory=Slo, metadata={"help": "service levels for goodput"})
    health: HealthBudgets = field(default_factory=HealthBudgets,
                                  metadata={"help": "client health budgets (run validity)"})
    report: Report = field(default_factory=Report, metadata={"help": "what the report adds: time slices"})
    output: Output = field(default_factory=Output, metadata={"help": "where results go"})
    path: str = field(default="", metadata={"internal": True})  # set by the loader: the file read

    def to_json(self) -> dict[str, Any]:
        """The profile as run folders keep it (meta.json): credential headers masked."""
        d = dataclasses.asdict(self)
        d["target"]["headers"] = redact_headers(self.target.headers)
        if self.ab is not None:
            d["ab"]["baseline"]["headers"] = redact_headers(self.ab.baseline.headers)
        return d

    def resolve(self, p: str | Path) -> Path:
        """A path written in the profile: absolute, or relative to the profile file's folder (the
        working directory for a profile built in code)."""
        p = Path(p)
        return p if p.is_absolute() else (Path(self.path).parent if self.path else Path.cwd()) / p

    @property
    def history(self) -> str | None:
        """The conversations' history ('actual' or 'recorded'; `auto` resolved), None without sessions."""
        ss = self.workload.sessions
        if ss is None:
            return None
        if ss.history != "auto":
            return ss.history
        return "recorded" if self.ab is not None else "actual"

    def files(self) -> list[tuple[str, str]]:
        """(key path, value as written) of every file the profile names."""
        w, ex, tls = self.workload, self.exactness, self.target.tls
        out = [(k, v) for k, v in (("target.tls.ca_file", tls.ca_file), ("target.tls.client_cert", tls.client_cert),
                                   ("target.tls.client_key", tls.client_key)) if v]
        out += [(k, v) for k, v in (("workload.tokenizer", self.tokenizer_path), ("workload.trace", w.trace),
                                    ("workload.dataset.path", w.dataset.path if w.dataset else None)) if v]
        out += _dist_files("workload.input_len", w.input_len) + _dist_files("workload.output_len", w.output_len)
        if ex is not None:
            if ex.corpus:
                out.append(("exactness.corpus", ex.corpus))
            if ex.baseline != "sim-reference":
                out.append(("exactness.baseline", ex.baseline))
        return out

    @property
    def tokenizer_path(self) -> str | None:
        """`workload.tokenizer` when it names a local tokenizer (not `server` or `none`)."""
        t = self.workload.tokenizer
        return None if t in ("server", "none") else t

    def check_files(self, sections: tuple[str, ...] = ("target", "workload", "exactness")) -> None:
        """Raise a ProfileError (file, line, key) for the first file named in `sections` that is not
        there, so a run fails before it starts, not after minutes of exactness check."""
        for key, value in self.files():
            if key.split(".", 1)[0] not in sections:
                continue
            p = self.resolve(value)
            try:
                if p.is_file() or (key == "workload.tokenizer" and (p / "tokenizer.json").is_file()) \
                        or (key == "workload.dataset.path" and p.is_dir()):  # an Arrow dataset's folder
                    continue
                why = ("is a directory without tokenizer.json" if key == "workload.tokenizer" else
                       "is a directory, expected a file") if p.is_dir() else "file not found"
            except OSError as e:  # a name too long, a folder that may not be read, ...
                why = f"cannot read ({e.strerror or e})"
            line = None
            if self.path:
                line = line_of_key(Path(self.path), key)
            raise ProfileError(self.path or "profile", line, key, f"{why}: {p}")

    def metrics_url(self, base: str) -> str:
        """Where the engine's Prometheus metrics are: `target.metrics_url`, else BASE/metrics."""
        return self.target.metrics_url or base + "/metrics"

    def check(self) -> list[tuple[str, str]]:
        if self.workload.sessions is not None and self.load.schedule == "trace":
            return [("load.schedule", "conversations send each turn after the last one's reply: not with a timed "
                     "trace's schedule (give load.concurrency or load.rate)")]
        if not is_folder_name(self.name):
            return [("name", f"becomes part of a run folder's name: expected no slashes, not . or .., not "
                     f"starting with '-', got {self.name!r}")]
        for metric, items in self.thresholds.items():
            for k, item in enumerate(items):
                key = f"thresholds.{metric}[{k}]" + ("" if isinstance(item, str) else ".threshold")
                try:
                    t = parse(metric, threshold_text(item))
                except ThresholdError as e:
                    return [(key, e.reason)]
                if isinstance(item, ThresholdSpec) and item.abort_on_fail:
                    why = aborting.refusal(t) or self._abort_refusal()
                    if why is not None:
                        return [(f"thresholds.{metric}[{k}].abort_on_fail", why)]
        problem = self._check_search() or self._check_ramp_requests() or self._check_slices() or self._check_route()
        if problem:
            return problem
        ss = self.workload.sessions
        if ss is not None:
            if self.ab is not None and ss.history == "actual":
                return [("workload.sessions.history", "an A/B sends identical bodies to both sides: history "
                         "'recorded' (the default in an A/B), not 'actual' (each side's own replies)")]
        if self.ab is not None and self.exactness is not None and self.exactness.baseline == "sim-reference" \
                and self.ab.baseline.endpoint != "embedded":
            return [("ab.baseline.endpoint", "exactness.baseline 'sim-reference' needs both engines embedded; "
                     "write a baseline file with `loadgate baseline`")]
        return []


    def _check_route(self) -> list[tuple[str, str]]:
        """A sticky route needs conversations; spreading the requests reads each replica's own
        counters (no shared metrics URL, no one cache to reset)."""
        t = self.target
        if t.endpoints is None or t.route == "via_router":
            return []
        if t.route == "sticky" and self.workload.sessions is None:
            return [("target.route", "sticky keeps a conversation's turns on one replica: it needs conversations "
                     "(workload.sessions); use round_robin")]
        if t.metrics_url is not None:
            return [("target.metrics_url", f"with route {t.route} each replica's own /metrics is read "
                     "(ENDPOINT/metrics) and the counters summed: leave metrics_url out")]
        if self.load.reset_prefix_cache:
            return [("load.reset_prefix_cache", "emptying every replica's prefix cache between levels is "
                     "not built yet: leave it out with target.endpoints")]
        return []

    def _check_ramp_requests(self) -> list[tuple[str, str]]:
        """An open loop's ramp sends fewer requests than its measured phase: its expected arrivals
        (`loadgate.core.ramps.expected_arrivals`, at the highest rate a level or search probe runs) are
        below `workload.requests`. A closed loop's ramp sends as many as the server finishes, unknown
        before the run (the summary counts them: `ramp_requests`)."""
        load, r = self.load, self.load.ramp
        if r is None or load.schedule == "trace":
            return []
        rates = (load.search.hi,) if load.search is not None and load.search.over == "rate" else load.rates
        if not rates:
            return []
        top = max(rates)
        n = ramps.expected_arrivals(r.shape, ramps.start_of(r.start, top, closed=False), top, r.duration_s)
        if n >= self.workload.request_count:
            return [("load.ramp.duration_s", f"a ramp over {r.duration_s:g} s ({r.shape}) to {top:g} requests/s sends "
                     f"about {n:,.0f} requests, not fewer than the measured phase's workload.requests "
                     f"({self.workload.request_count:,}): shorten the ramp or raise workload.requests")]
        return []

    def _check_slices(self) -> list[tuple[str, str]]:
        """Where the level's length is known beforehand (`load.duration_s`, a trace's window), a slice
        shorter than it, and at most `MAX_SLICES` of them."""
        s, ld = self.report.slice_s, self.load
        if s is None:
            return []
        if ld.duration_s is not None:
            length, what = ld.duration_s, f"load.duration_s ({ld.duration_s:g} s)"
        elif ld.schedule == "trace" and ld.trace_length_s is not None:
            length = ld.trace_length_s / ld.trace_speed
            what = f"the trace's window (load.trace_length_s / load.trace_speed = {length:g} s)"
        else:
            return []
        if s >= length:
            return [("report.slice_s", f"{s:g} s is not shorter than {what}: each level would be one slice, "
                     "its own figures; give a shorter slice")]
        if length / s > MAX_SLICES:
            return [("report.slice_s", f"{s:g} s cuts {what} into more than {MAX_SLICES:,} slices; give at least "
                     f"{length / MAX_SLICES:.3g} s")]
        return []

    def _abort_refusal(self) -> str | None:
        """Why this profile's runs cannot abort a level on a threshold (None: they can)."""
        if self.ab is not None:
            return "abort_on_fail in an A/B run is not built yet: measure each engine in its own run"
        if self.load.search is not None:
            return ("a search judges each probe at its end (a failing probe ends the bracket, not the run): "
                    "abort_on_fail is not built for it yet")
        return None

    def threshold_texts(self) -> dict[str, tuple[str, ...]]:
        """`thresholds` as their texts, whichever form each was written in."""
        return {m: tuple(threshold_text(x) for x in items) for m, items in self.thresholds.items()}

    def aborting_thresholds(self) -> list[tuple[Threshold, float]]:
        """The thresholds with `abort_on_fail`, parsed, each with its `delay_abort_eval` in seconds."""
        return [(parse(m, x.threshold), x.delay_s) for m, items in self.thresholds.items() for x in items
                if isinstance(x, ThresholdSpec) and x.abort_on_fail]

    def _check_search(self) -> list[tuple[str, str]]:
        """A search needs thresholds to judge its probes, probes large enough for their strictest
        quantile, and a resolution they can resolve (the rules: loadgate/core/probes.py)."""
        search = self.load.search
        if search is None:
            return []
        if not self.thresholds:
            return [("load.search", "a search judges each probe on the profile's thresholds: add some "
                     "(e.g. thresholds: {ttft: [\"p(90) < 500ms\"]}); none are set")]
        relative = next((f"{m}: \"{text}\"" for m, texts in self.threshold_texts().items() for text in texts
                         if parse(m, text).baseline), None)
        if relative is not None:
            return [("thresholds", f"{relative} reads the baseline, but a search judges each probe within its own "
                     "run, where there is none; give a fixed limit (an A/B of searches compares their answers: "
                     "docs/capacity.md)")]
        if self.workload.sessions is not None:
            return [("load.search", "a search sends requests, not conversations: no workload.sessions")]
        n = self.workload.request_count
        t = probes.strictest(parse(m, text) for m, texts in self.threshold_texts().items() for text in texts)
        assert t is not None
        q = probes.quantile_of(t)
        need = probes.requests_needed(q)
        if n < need:
            return [("workload.requests", f"each search probe sends workload.requests ({n}); the threshold "
                     f"{t.metric} \"{t.text}\" reads p({q:g}), which needs at least {need:,} (10 / (1 - {q:g}%))")]
        finest = probes.finest_resolution(n)
        if search.resolution < finest - 1e-12:
            return [("load.search.resolution", f"{search.resolution:.3g} is finer than probes of {n} requests "
                     f"resolve (1 / sqrt({n}) = {finest:.3g}): raise workload.requests to "
                     f"{math.ceil(1 / search.resolution ** 2):,} or the resolution to {finest:.3g}")]
        return []


def _dist_files(key: str, d: Distribution) -> list[tuple[str, str]]:
    if d.dist == "empirical" and d.file:
        return [(f"{key}.file", d.file)]
    return [f for i, c in enumerate(d.components) for f in _dist_files(f"{key}.components[{i}].dist", c.dist)]


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file; raises ProfileError with file, line, key and reason."""
    return load_dataclass_file(Profile, Path(path))


def profile_json_schema() -> dict[str, Any]:
    return json_schema(Profile, title="loadgate profile")


def with_distributed(profile: Profile, address: str | None, actors: int | None) -> Profile:
    """`loadgate run --ray ADDRESS --actors N`: the profile's `load.distributed` with those set (a
    `--actors` alone needs the profile's own `load.distributed`)."""
    if address is None and actors is None:
        return profile
    d = profile.load.distributed
    if d is None:
        if address is None:
            raise UsageError("--actors: the profile has no load.distributed; give --ray ADDRESS too")
        d = Distributed()
    d = dataclasses.replace(d, address=d.address if address is None else address, actors=actors or d.actors)
    for key, why in d.check():
        raise UsageError(f"--ray: {why}" if key == "address" else f"load.distributed.{key}: {why}")
    return dataclasses.replace(profile, load=dataclasses.replace(profile.load, distributed=d))
