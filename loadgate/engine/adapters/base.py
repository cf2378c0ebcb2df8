"""The one transport seam: what every engine adapter does, and what it returns.

An adapter builds a request body and decodes a finished raw response. It never does I/O: the
attack loop sends the bytes and keeps the reads; decoding happens after the request ended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

# Where a chunk's token count came from, strongest first.
TokenSource = Literal["ids", "usage", "meta_info", "logprobs", "one_per_chunk"]

# Kinds of failure, each counted separately in reports. The limits a hostile or broken server
# meets: header_too_large, response_too_large, event_too_large, memory_budget (all responses in
# flight together), bad_response (not HTTP), idle_timeout (no byte for target.limits.idle_timeout_s);
# cancelled: a signal stopped the run while the request was in flight.
ErrorKind = Literal["http_status", "timeout", "disconnect", "malformed", "error_event", "connect", "empty",
                    "header_too_large", "response_too_large", "event_too_large", "memory_budget", "bad_response",
                    "idle_timeout", "cancelled", "aborted"]


@dataclass(frozen=True, slots=True)
class Sampling:
    """Every sampling parameter, always sent explicitly (servers fill unset ones from model files)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = 0  # None: no seed is sent (measured requests under `load.request.seed: none`)


@dataclass(frozen=True, slots=True)
class GenRequest:
    """One request as the adapter needs it. Exactly one of prompt_ids / prompt_text / messages."""

    max_tokens: int
    prompt_ids: tuple[int, ...] | None = None
    prompt_text: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None  # chat: OpenAI tool schemas
    ignore_eos: bool = True
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # how many top alternatives; None: no logprobs
    sampling: Sampling = Sampling()
    stream: bool = True


@dataclass(slots=True)
class Chunk:
    """One content-bearing event: when it arrived and how many tokens it carried."""

    t_ns: int
    n_tokens: int
    ids: list[int] | None = None
    # its tokens were streamed as reasoning (`reasoning_content` / `reasoning`): True; it carried answer
    # text: False; no text of either kind (ids alone: a reasoning parser's <think> markers): None
    reasoning: bool | None = False
    # of its tokens, those streamed as reasoning: all of a reasoning chunk's; of a chunk that carried
    # both (the step in which a parser saw </think>), a share by the characters of each, at least one
    # token each
    thought: int = 0


@dataclass(slots=True)
class SpecCounts:
    """Per-request speculative decoding counts as the engine reported them, with their source.

    `verify_steps` counts target forward passes that verified drafts; `draft_tokens` tokens
    proposed; `accepted` draft tokens accepted. Any may be None when the engine does not say.
    """

    source: str
    verify_steps: int | None = None
    draft_tokens: int | None = None
    accepted: int | None = None
    reported_acceptance_length: float | None = None


@dataclass(slots=True)
class ErrorInfo:
    kind: ErrorKind
    detail: str


@dataclass(slots=True)
class Decoded:
    """Everything loadgate keeps from one response."""

    chunks: list[Chunk] = field(default_factory=list)
    token_source: TokenSource = "one_per_chunk"
    output_ids: list[int] | None = None
    logprobs: list[float | None] | None = None
    top_logprobs: list[list[tuple[int, float | None]]] | None = None
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_ids: list[int] | None = None
    finish_reason: str | None = None
    spec: SpecCounts | None = None
    error: ErrorInfo | None = None
    system_fingerprint: str | None = None
    # Output positions whose logprob is not a real value: absent, or a placeholder such as
    # llama-server's 0.0 with an empty top list for draft-accepted tokens. Compared on ids only.
    placeholder_positions: list[int] = field(default_factory=list)
    # Token counts the server sent that no server can mean (a bool, a negative, a fraction, a
    # string, a number beyond any context): by name, as received (`server_count`).
    counts_received: dict[str, Any] = field(default_factory=dict)
    # Prompt tokens the engine's prefix cache served, where the response says (vLLM's
    # usage.prompt_tokens_details.cached_tokens, SGLang's meta_info.cached_tokens); None: not said.
    cached_tokens: int | None = None


def cached_count(v: Any) -> int | None:
    """A cached-token count as sent: a non-negative integer, else None (not said, or not a count)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


class EngineAdapter(Protocol):
    """An engine API: `path` to POST to, how to build a body, how to decode a finished response."""

    name: str
    path: str
    ids_in_stream: bool  # a stream carries every output id (else exactness sends requests unstreamed)
    family: str | None  # the engine family it implies (`Family.name`); None: told by the server's metrics
    chat: bool  # a chat route (requests carry messages)
    chat_api: str  # the chat route of the same engine (the reference corpus's chat cases go there)
    prompt_cache_off: bool  # every body asks the engine not to use its prompt cache (no reset needed)

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]: ...

    def tokenize_body(self, model: str, text: str, add_special: bool | None = False) -> dict[str, Any]:
        """The engine's `/tokenize` body for `text`; `add_special` None: the engine's default."""
        ...

    def detokenized(self, answer: dict[str, Any]) -> Any:
        """The text of the engine's `/detokenize` answer (not checked to be a string)."""
        ...

    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        """Decode SSE `data` payloads (with their arrival times) of one streamed response."""
        ...

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        """Decode one non-streamed response body that finished arriving at `t_ns`."""
        ...


# Body keys that carry sampling, in every engine's spelling: inside the exactness check the check's
# own values of these win over `target.extra_body` (its contract is about greedy or seeded output).
SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "repeat_penalty",
                           "presence_penalty", "frequency_penalty", "seed", "sampling_seed", "ignore_eos", "stop",
                           "logprobs", "top_logprobs", "n_probs", "return_tokens_as_token_ids", "return_token_ids",
                           "return_tokens", "return_logprob", "top_logprobs_num", "n", "best_of", "logit_bias",
                           "min_tokens", "max_new_tokens"})


def merged_body(body: dict[str, Any], extra: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
    """`body` with `target.extra_body` merged in: a new key is added; where both hold a mapping
    (`stream_options`, SGLang's `sampling_params`, `chat_template_kwargs`) the two are merged the same
    way, key by key; any other value is replaced by extra's. With `check` (the exactness check's
    bodies), a sampling key (`SAMPLING_KEYS`) the body already has keeps the body's value, at every
    level. The keys loadgate sets (model, prompt, ...) reach this only where the profile allowed it
    (`target.extra_body_override`)."""
    if not extra:
        return body
    out = dict(body)
    for k, v in extra.items():
        mine = out.get(k)
        if isinstance(mine, dict) and isinstance(v, dict):
            out[k] = merged_body(mine, v, check=check)
        elif not (check and k in SAMPLING_KEYS and k in out):
            out[k] = v
    return out


def template_kwargs(extra_body: dict[str, Any]) -> dict[str, Any]:
    """The chat template's extra variables a request body carries (`chat_template_kwargs`, as vLLM
    and SGLang read it): what renders the prompt, so counting the prompt renders it the same way."""
    got = extra_body.get("chat_template_kwargs")
    return dict(got) if isinstance(got, dict) else {}


def with_template_kwargs(body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A /tokenize body of chat messages, with the template's extra variables where there are any."""
    return {**body, "chat_template_kwargs": kwargs} if kwargs else body


def timings_spec(timings: dict[str, Any]) -> SpecCounts | None:
    """Draft counts of a response's `timings` (`draft_n`, `draft_n_accepted`), as llama-server
    writes them on its native and its /v1 routes; None when nothing was drafted."""
    if "draft_n" not in timings:
        return None

    def count(key: str) -> int | None:  # anything but a count is no count (the run's arithmetic needs ints)
        v = timings.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    return SpecCounts(source="llama.cpp timings", draft_tokens=count("draft_n"), accepted=count("draft_n_accepted"))


def error_message(obj: Any) -> str | None:
    """The error text of an engine's error object (`{"error": {...}}`, `{"error": "..."}`, ...)."""
    if not isinstance(obj, dict) or "error" not in obj or obj["error"] in (None, "", {}):
        return None
    err = obj["error"]
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def load_payload(data: bytes, what: str) -> tuple[Any, ErrorInfo | None]:
    """Parse one SSE payload or body: (object, None); or (object, error) when it is an engine error
    object; or (None, error) when it is not JSON."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, ErrorInfo("malformed", f"unparseable {what}: {data[:80]!r}")
    msg = error_message(obj)
    return obj, (ErrorInfo("error_event", msg) if msg is not None else None)


MAX_COUNT = 100_000_000  # tokens: beyond the context of any model a server holds


def server_count(d: Decoded, name: str, v: Any) -> int | None:
    """A token count as the server sent it (`name`: its field): a plain integer from 0 to
    `MAX_COUNT`, or None where it sent none. Anything else is impossible (a bool, which passes an
    int check; a negative; a fraction; a string; 10**30, which JSON parsers read as a float): None,
    with the value kept as received in `d.counts_received` (the record keeps it; the request's
    count comes from its ids where the stream has them, else it is unverified)."""
    if v is None or (type(v) is int and 0 <= v <= MAX_COUNT):
        return v
    d.counts_received[name] = v if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 64) \
        else repr(v)[:64]
    return None


def iter_objects(events: list[tuple[int, bytes]], d: Decoded) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a stream with their arrival times, up to `[DONE]`. A malformed event is
    recorded in `d.error` and skipped; an error event is recorded and ends the stream."""
    for t_ns, data in events:
        if data == b"[DONE]":
            return
        obj, err = load_payload(data, "event")
        if err is not None and err.kind == "error_event":
            d.error = err
            return
        if err is None and isinstance(obj, dict):
            yield t_ns, obj
        elif d.error is None:
            d.error = err or ErrorInfo("malformed", f"event is not an object: {data[:80]!r}")


GaugeKey = Literal["kv_cache_usage", "running", "waiting"]
GAUGE_KEYS: tuple[GaugeKey, ...] = ("kv_cache_usage", "running", "waiting")
# the client figures an engine's latency histograms stand beside (`Family.latency_histograms`);
# `queue` has no client figure: the time the server held a request before it began computing it
LATENCY_KEYS = ("ttft", "itl", "e2e", "queue")


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """An engine's speculative-decoding counters (Prometheus names). `drafts_are_steps`: one draft
    is one verify step (vLLM), so 1 + Δaccepted / Δdrafts is the per-request acceptance length;
    False where the engine counts only steps that verified a draft (llama.cpp), so only the token
    counts (accepted, drafted) compare with the responses'."""

    drafts: str
    draft_tokens: str
    accepted: str
    per_position: str | None = None  # accepted tokens by draft position (label `position`)
    drafts_are_steps: bool = True


@dataclass(frozen=True, slots=True)
class Introspection:
    """A route the fingerprint asks (GET): its answer is kept under `key`, volatile fields left out
    and the `hashed` fields replaced by their sha256 (`FIELD_sha256`). Of several families' routes
    for one key, the first answering wins."""

    key: str
    routes: tuple[str, ...]
    hashed: tuple[str, ...] = ()
    order: int = 50  # where the key comes in the fingerprint (the order it was always written in)


@dataclass(frozen=True, slots=True)
class Family:
    """Everything loadgate knows about one engine family besides its request and response formats
    (those are its adapters'): the routes it serves, the names of its metrics, what it promises.
    One per module of `loadgate.engine.adapters`, registered in `FAMILIES` there; no other module
    branches on an engine's name.

    `identifies(engine)` tells from a fingerprint's introspected part (`engine` of
    `gate.fingerprint.build`) whether the server is this family's; `seeds(engine)` states what it
    promises about per-request sampling seeds (the sampling contracts' report quotes it);
    `context_length(engine)` the longest context one request may use, where it says;
    `speculation(engine)` whether its introspection says speculative decoding is on, and where it
    says so (None where it does not say)."""

    name: str  # as run folders write it (`engine` of the counters' acceptance)
    title: str  # as people write it
    metric_prefix: str  # every metric it serves begins so ("" for none of its own)
    # identification order, lowest first: a family whose `identifies` is loose (SGLang: any
    # /server_info) comes after the ones it could take for itself (the simulator serves one too)
    precedence: int = 50
    gauges: dict[GaugeKey, tuple[str, ...]] = field(default_factory=dict)  # first one served is read
    generated: str | None = None  # generated tokens counter
    successes: str | None = None  # finished requests counter (label `finished_reason`)
    spec: SpecCounters | None = None
    prefix_cache: tuple[str, str] | None = None  # (hits, queries) counters, in prompt tokens
    preemptions: str | None = None  # counter of requests the engine preempted (plotted over time)
    # the engine's own latency histograms (seconds), by the client figure each stands beside
    # (`LATENCY_KEYS`: ttft, itl, e2e, queue); first one served is read
    latency_histograms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    info_metrics: tuple[str, ...] = ()  # metrics whose labels the fingerprint keeps (and any `*_info`)
    introspection: tuple[Introspection, ...] = ()
    reset_routes: tuple[str, ...] = ()  # POST routes that empty its prefix cache
    identifies: Callable[[dict[str, Any]], bool] = field(default=lambda engine: False)
    seeds: Callable[[dict[str, Any]], str] = field(default=lambda engine: "")
    context_length: Callable[[dict[str, Any]], int | None] = field(default=lambda engine: None)
    speculation: Callable[[dict[str, Any]], tuple[bool, str] | None] = field(default=lambda engine: None)

    def metric_names(self) -> tuple[str, ...]:
        """Every metric name it declares (a snapshot holding one of them is this family's)."""
        names = [n for key in GAUGE_KEYS for n in self.gauges.get(key, ())]
        names += [n for n in (self.generated, self.successes) if n]
        if self.spec is not None:
            names += [self.spec.drafts, self.spec.draft_tokens, self.spec.accepted]
        names += list(self.prefix_cache or ())
        return tuple(names)


class PromptTokenize:
    """`/tokenize` and `/detokenize` as vLLM and SGLang serve them: the text in `prompt`."""

    def tokenize_body(self, model: str, text: str, add_special: bool | None = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "prompt": text}
        if add_special is not None:
            body["add_special_tokens"] = add_special
        return body

    def detokenized(self, answer: dict[str, Any]) -> Any:
        return answer.get("prompt")


class ContentTokenize:
    """`/tokenize` and `/detokenize` as llama-server serves them: the text in `content`."""

    def tokenize_body(self, model: str, text: str, add_special: bool | None = False) -> dict[str, Any]:
        body: dict[str, Any] = {"content": text}
        if add_special is not None:
            body["add_special"] = add_special
        return body

    def detokenized(self, answer: dict[str, Any]) -> Any:
        return answer.get("content")


def models_context_length(engine: dict[str, Any]) -> int | None:
    """`max_model_len` of the first model in OpenAI's `/v1/models` list that gives one (vLLM's
    field; SGLang and the simulator serve it too)."""
    for m in engine.get("models") or []:
        n = m.get("max_model_len") if isinstance(m, dict) else None
        if type(n) is int and n > 0:  # anything else the server sent says nothing
            return n
    return None
