"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, as vLLM, SGLang and the
simulator serve them (`openai-*`); llama.cpp's llama-server's variants of them (`llamacpp-openai-*`)
are `loadgate.engine.adapters.llamacpp`'s.

Token counts per chunk, strongest source first: output ids (vLLM `choices[].token_ids` with
`return_token_ids`; llama-server `__verbose.tokens` with `verbose` + `return_tokens`), the delta of
cumulative `usage.completion_tokens` (`continuous_usage_stats`), the number of logprob entries,
and as a last resort one token per content chunk (recorded as such).
"""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import (
    Chunk,
    Decoded,
    GenRequest,
    PromptTokenize,
    SpecCounts,
    TokenSource,
    cached_count,
    iter_objects,
    load_payload,
    server_count,
    timings_spec,
)


def _cached(usage: dict[str, Any]) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` (vLLM with --enable-prompt-tokens-details), else None."""
    details = usage.get("prompt_tokens_details")
    return cached_count(details.get("cached_tokens")) if isinstance(details, dict) else None


_RANK: dict[TokenSource, int] = {"ids": 0, "usage": 1, "meta_info": 1, "logprobs": 2, "one_per_chunk": 3}


def _token_key_id(key: Any) -> int:
    """vLLM writes tokens as "token_id:123" with `return_tokens_as_token_ids`; -1 when not an id."""
    if isinstance(key, str) and key.startswith("token_id:"):
        try:
            return int(key[9:])
        except ValueError:
            return -1
    return -1


LogprobLists = tuple[list[float | None], list[list[tuple[int, float | None]]]]


def _entry_id(t: dict[str, Any]) -> int:
    """A logprob entry's token id: llama-server's `id`, else vLLM's "token_id:N" token; -1 if neither."""
    i = t.get("id")
    return i if isinstance(i, int) else _token_key_id(t.get("token"))


def _completion_logprobs(lp: dict[str, Any]) -> LogprobLists:
    if "content" in lp:  # llama-server answers /v1/completions in chat's shape
        return _chat_logprobs(lp)
    values = list(lp.get("token_logprobs") or [])
    tops = [sorted(((_token_key_id(k), v) for k, v in (d or {}).items()),
                   key=lambda kv: -(kv[1] if kv[1] is not None else float("inf")))
            for d in (lp.get("top_logprobs") or [])]
    return values, tops


def _chat_logprobs(lp: dict[str, Any]) -> LogprobLists:
    values: list[float | None] = []
    tops: list[list[tuple[int, float | None]]] = []
    for entry in lp.get("content") or []:
        values.append(entry.get("logprob"))
        tops.append([(_entry_id(t), t.get("logprob")) for t in entry.get("top_logprobs") or []])
    return values, tops


def _spec_from_metrics(obj: dict[str, Any]) -> SpecCounts | None:
    if isinstance(obj.get("timings"), dict):  # llama-server
        return timings_spec(obj["timings"])
    sd = (obj.get("metrics") or {}).get("speculative_decoding") if isinstance(obj.get("metrics"), dict) else None
    if not isinstance(sd, dict):
        return None
    return SpecCounts(source="vllm metrics.speculative_decoding", verify_steps=sd.get("num_spec_steps"),
                     draft_tokens=sd.get("num_draft_tokens"), accepted=sd.get("num_accepted_draft_tokens"),
                     reported_acceptance_length=sd.get("mean_acceptance_length"))


class _OpenAIBase(PromptTokenize):
    name = "openai"
    path = "/v1/completions"
    family: str | None = None  # vLLM, SGLang's /v1 and the simulator serve these routes: the metrics tell
    chat = False
    chat_api = "openai-chat"
    prompt_cache_off = False
    placeholder_zero = False  # `logprob 0.0` with no alternatives is a placeholder (llama-server)
    ids_in_stream = True  # a stream of this route carries every output id

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]:
        s = req.sampling
        body: dict[str, Any] = {
            "model": model, "max_tokens": req.max_tokens, "stream": req.stream,
            "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p,
            "repetition_penalty": s.repetition_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "ignore_eos": req.ignore_eos, "return_token_ids": True,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if req.stop:
            body["stop"] = list(req.stop)
        if req.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        self._add_prompt(body, req)
        self._add_logprobs(body, req)
        self._add_engine(body, req)
        return body

    def _add_engine(self, body: dict[str, Any], req: GenRequest) -> None:
        """Fields only one engine reads."""

    def _add_prompt(self, body: dict[str, Any], req: GenRequest) -> None:
        if req.prompt_ids is not None:
            body["prompt"] = list(req.prompt_ids)
        else:
            body["prompt"] = req.prompt_text or ""

    def _add_logprobs(self, body: dict[str, Any], req: GenRequest) -> None:
        if req.logprobs is not None:
            body["logprobs"] = req.logprobs
            body["return_tokens_as_token_ids"] = True

    def _choice_logprobs(self, lp: dict[str, Any]) -> tuple[list[float | None], list[list[tuple[int, float | None]]]]:
        return _completion_logprobs(lp)

    def _choice_text(self, choice: dict[str, Any]) -> str:
        return choice.get("text") or ""

    def _choice_reasoning(self, choice: dict[str, Any]) -> str:
        """The reasoning text of a chat delta (none on the completions route)."""
        return ""

    # -- decoding -------------------------------------------------------------------------
    @staticmethod
    def _ids(obj: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
        ids = choice.get("token_ids")
        if ids is None and isinstance(obj.get("__verbose"), dict):  # llama-server, verbose + return_tokens
            ids = obj["__verbose"].get("tokens")
        return ids if isinstance(ids, list) else None

    def _positions(self, d: Decoded, n_tokens: int | None, lps: list[float | None],
                   tops: list[list[tuple[int, float | None]]]) -> None:
        """Append one event's logprobs, padded to its `n_tokens` when given. Placeholders (llama-server:
        a token of a speculative step has no entry in a stream, `0.0` with no alternatives in a body)
        become None, their positions recorded."""
        assert d.logprobs is not None and d.top_logprobs is not None
        for k, v in enumerate(lps):  # a null or short top_logprobs list loses no logprob value
            top = tops[k] if k < len(tops) else []
            if self.placeholder_zero and v == 0.0 and not top:
                d.placeholder_positions.append(len(d.logprobs))
                v = None
            d.logprobs.append(v)
            d.top_logprobs.append(top)
        if n_tokens is not None:
            for _ in range(n_tokens - len(lps)):
                d.placeholder_positions.append(len(d.logprobs))
                d.logprobs.append(None)
                d.top_logprobs.append([])

    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        d = Decoded(output_ids=[], logprobs=[], top_logprobs=[])
        saw_ids = missing_ids = saw_logprobs = False
        source_rank = 0
        last_completion = 0
        text: list[str] = []
        for t_ns, obj in iter_objects(events, d):
            usage = obj.get("usage")
            usage_delta = None
            if isinstance(usage, dict):
                if "prompt_tokens" in usage:
                    d.prompt_tokens = server_count(d, "prompt_tokens", usage["prompt_tokens"])
                cached = _cached(usage)
                d.cached_tokens = cached if cached is not None else d.cached_tokens
                ct = server_count(d, "completion_tokens", usage.get("completion_tokens"))
                if ct is not None:
                    usage_delta = ct - last_completion
                    last_completion = ct
                    d.completion_tokens = ct
            d.system_fingerprint = obj.get("system_fingerprint") or d.system_fingerprint
            d.spec = _spec_from_metrics(obj) or d.spec
            for choice in obj.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                if choice.get("prompt_token_ids") is not None:
                    d.prompt_ids = list(choice["prompt_token_ids"])
                if choice.get("finish_reason") is not None:
                    d.finish_reason = choice["finish_reason"]
                ids = self._ids(obj, choice)
                lps: list[float | None] = []
                tops: list[list[tuple[int, float | None]]] = []
                if isinstance(choice.get("logprobs"), dict):
                    lps, tops = self._choice_logprobs(choice["logprobs"])
                    saw_logprobs = True
                piece = self._choice_text(choice)
                text.append(piece)
                thought = self._choice_reasoning(choice)
                kind = False if piece else True if thought else None  # answer / reasoning / tokens only
                both = bool(piece and thought)
                piece = piece or thought
                source: TokenSource
                if ids:
                    n, source = len(ids), "ids"
                    d.output_ids.extend(ids)  # type: ignore[union-attr]
                    saw_ids = True
                elif not piece and not lps:
                    # an event with no text: only tokens the usage says were not yet counted (e.g.
                    # llama-server's final /v1 event repeats the whole count after one-token chunks)
                    counted = sum(c.n_tokens for c in d.chunks)
                    n = max(0, (d.completion_tokens or 0) - counted) if usage_delta is not None else 0
                    source = "usage"
                else:
                    if usage_delta is not None:
                        n, source = usage_delta, "usage"
                    elif lps:
                        n, source = len(lps), "logprobs"
                    else:
                        n, source = (1 if piece else 0), "one_per_chunk"
                # llama-server: a position without an entry is a placeholder (one token per event
                # when the ids are not given)
                if lps or self.placeholder_zero:
                    self._positions(d, n if self.placeholder_zero else None, lps, tops)
                if n > 0:
                    missing_ids = missing_ids or not ids
                    d.chunks.append(Chunk(t_ns, n, list(ids) if ids else None, kind,
                                          _share(n, thought, piece) if both else n if kind else 0))
                    source_rank = max(source_rank, _RANK[source])
        d.text = "".join(text)
        d.token_source = next(k for k, v in _RANK.items() if v == source_rank)
        if missing_ids or not saw_ids:
            d.output_ids = None
        if not saw_logprobs:
            d.logprobs, d.top_logprobs, d.placeholder_positions = None, None, []
        return d

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        obj, err = load_payload(body, "body")
        if err is not None:
            return Decoded(error=err)
        d = Decoded(token_source="ids")
        usage = obj.get("usage") or {}
        d.prompt_tokens = server_count(d, "prompt_tokens", usage.get("prompt_tokens"))
        d.completion_tokens = server_count(d, "completion_tokens", usage.get("completion_tokens"))
        d.cached_tokens = _cached(usage)
        d.system_fingerprint = obj.get("system_fingerprint")
        d.spec = _spec_from_metrics(obj)
        choices = obj.get("choices") or []
        if choices:
            c = choices[0]
            d.finish_reason = c.get("finish_reason")
            d.text = self._choice_text(c)
            ids = self._ids(obj, c)
            if ids is not None:
                d.output_ids = list(ids)
            if c.get("prompt_token_ids") is not None:
                d.prompt_ids = list(c["prompt_token_ids"])
            if isinstance(c.get("logprobs"), dict):
                d.logprobs, d.top_logprobs = [], []
                self._positions(d, None, *self._choice_logprobs(c["logprobs"]))
        n = len(d.output_ids) if d.output_ids is not None else (d.completion_tokens or 0)
        if d.output_ids is None:
            d.token_source = "usage"
        if n:
            d.chunks.append(Chunk(t_ns, n, d.output_ids))
        return d


class OpenAICompletions(_OpenAIBase):
    name = "openai-completions"
    path = "/v1/completions"


class OpenAIChat(_OpenAIBase):
    name = "openai-chat"
    path = "/v1/chat/completions"
    chat = True

    def _add_prompt(self, body: dict[str, Any], req: GenRequest) -> None:
        if req.messages is not None:
            body["messages"] = list(req.messages)
        else:
            body["messages"] = [{"role": "user", "content": req.prompt_text or ""}]
        if req.tools:
            body["tools"] = list(req.tools)

    def _add_logprobs(self, body: dict[str, Any], req: GenRequest) -> None:
        if req.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = req.logprobs
            body["return_tokens_as_token_ids"] = True

    def _choice_logprobs(self, lp: dict[str, Any]) -> tuple[list[float | None], list[list[tuple[int, float | None]]]]:
        return _chat_logprobs(lp)

    def _choice_text(self, choice: dict[str, Any]) -> str:
        part = choice.get("delta") or choice.get("message") or {}
        return part.get("content") or ""

    def _choice_reasoning(self, choice: dict[str, Any]) -> str:
        """A reasoning parser's text: `reasoning_content` (vLLM before 0.10, SGLang, llama-server)
        or `reasoning` (vLLM since); a string, else nothing."""
        part = choice.get("delta") or choice.get("message") or {}
        got = part.get("reasoning_content") or part.get("reasoning")
        return got if isinstance(got, str) else ""


APIS = {"openai-completions": OpenAICompletions, "openai-chat": OpenAIChat}  # no family: the metrics tell


def _share(n: int, thought: str, answer: str) -> int:
    """Of `n` tokens that carried reasoning text and answer text, the reasoning's, by the two texts'
    lengths (at least one token each where there are two or more)."""
    if n < 2:
        return 0
    k = round(n * len(thought) / (len(thought) + len(answer)))
    return max(1, min(n - 1, k))
