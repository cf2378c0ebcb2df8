"""The one transport seam: what every engine adapter does, and what it returns.

An adapter builds a request body and decodes a finished raw response. It never does I/O: the
attack loop sends the bytes and keeps the reads; decoding happens after the request ended.
"""

from __future__ import annotations

from collections.abc import Iterator
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
                    "idle_timeout", "cancelled"]


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
    seed: int = 0


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


class EngineAdapter(Protocol):
    """An engine API: `path` to POST to, how to build a body, how to decode a finished response."""

    name: str
    path: str
    ids_in_stream: bool  # a stream carries every output id (else exactness sends requests unstreamed)

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]: ...

    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        """Decode SSE `data` payloads (with their arrival times) of one streamed response."""
        ...

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        """Decode one non-streamed response body that finished arriving at `t_ns`."""
        ...


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
