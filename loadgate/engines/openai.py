"""OpenAI-compatible routes as vLLM (and the simulator) serve them: /v1/completions, /v1/chat/completions.

Token counts per chunk, strongest source first: `choices[].token_ids` (vLLM `return_token_ids`),
the delta of cumulative `usage.completion_tokens` (`continuous_usage_stats`), the number of
logprob entries, and as a last resort one token per content chunk (recorded as such).
"""

from __future__ import annotations

from typing import Any

from loadgate.engines.base import (
    Chunk,
    Decoded,
    GenRequest,
    SpecStats,
    TokenSource,
    iter_objects,
    load_payload,
)

_RANK: dict[str, int] = {"ids": 0, "usage": 1, "meta_info": 1, "logprobs": 2, "one_per_chunk": 3}


def _token_key_id(key: Any) -> int:
    """vLLM writes tokens as "token_id:123" with `return_tokens_as_token_ids`; -1 when not an id."""
    if isinstance(key, str) and key.startswith("token_id:"):
        try:
            return int(key[9:])
        except ValueError:
            return -1
    return -1


def _completion_logprobs(lp: dict[str, Any]) -> tuple[list[float | None], list[list[tuple[int, float | None]]]]:
    values = list(lp.get("token_logprobs") or [])
    tops = [sorted(((_token_key_id(k), v) for k, v in (d or {}).items()),
                   key=lambda kv: -(kv[1] if kv[1] is not None else float("inf")))
            for d in (lp.get("top_logprobs") or [])]
    return values, tops


def _chat_logprobs(lp: dict[str, Any]) -> tuple[list[float | None], list[list[tuple[int, float | None]]]]:
    values: list[float | None] = []
    tops: list[list[tuple[int, float | None]]] = []
    for entry in lp.get("content") or []:
        values.append(entry.get("logprob"))
        tops.append([(_token_key_id(t.get("token")), t.get("logprob")) for t in entry.get("top_logprobs") or []])
    return values, tops


def _spec_from_metrics(obj: dict[str, Any]) -> SpecStats | None:
    sd = (obj.get("metrics") or {}).get("speculative_decoding") if isinstance(obj.get("metrics"), dict) else None
    if not isinstance(sd, dict):
        return None
    return SpecStats(source="vllm metrics.speculative_decoding", verify_steps=sd.get("num_spec_steps"),
                     draft_tokens=sd.get("num_draft_tokens"), accepted=sd.get("num_accepted_draft_tokens"),
                     reported_acceptance_length=sd.get("mean_acceptance_length"))


class _OpenAIBase:
    name = "openai"
    path = "/v1/completions"
    chat = False

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]:
        s = req.sampling
        body: dict[str, Any] = {
            "model": model, "max_tokens": req.max_tokens, "stream": req.stream,
            "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p,
            "repetition_penalty": s.repetition_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "seed": s.seed,
            "ignore_eos": req.ignore_eos, "return_token_ids": True,
        }
        if req.stop:
            body["stop"] = list(req.stop)
        if req.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        self._add_prompt(body, req)
        self._add_logprobs(body, req)
        body.update(req.extra)
        return body

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

    # -- decoding -------------------------------------------------------------------------
    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        d = Decoded(output_ids=[], logprobs=[], top_logprobs=[])
        saw_ids = missing_ids = False
        source_rank = 0
        last_completion = 0
        text: list[str] = []
        for t_ns, obj in iter_objects(events, d):
            usage = obj.get("usage")
            usage_delta = None
            if isinstance(usage, dict):
                d.prompt_tokens = usage.get("prompt_tokens", d.prompt_tokens)
                ct = usage.get("completion_tokens")
                if isinstance(ct, int):
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
                ids = choice.get("token_ids")
                lps, tops = ([], [])
                if isinstance(choice.get("logprobs"), dict):
                    lps, tops = self._choice_logprobs(choice["logprobs"])
                    d.logprobs.extend(lps)  # type: ignore[union-attr]
                    d.top_logprobs.extend(tops)  # type: ignore[union-attr]
                piece = self._choice_text(choice)
                text.append(piece)
                source: TokenSource
                if isinstance(ids, list):
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
                if n > 0:
                    missing_ids = missing_ids or not isinstance(ids, list)
                    d.chunks.append(Chunk(t_ns, n, list(ids) if isinstance(ids, list) else None))
                    source_rank = max(source_rank, _RANK[source])
        d.text = "".join(text)
        d.token_source = next(k for k, v in _RANK.items() if v == source_rank)  # type: ignore[assignment]
        if missing_ids or not saw_ids:
            d.output_ids = None
        if not d.logprobs:
            d.logprobs, d.top_logprobs = None, None
        return d

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        obj, err = load_payload(body, "body")
        if err is not None:
            return Decoded(error=err)
        d = Decoded(token_source="ids")
        usage = obj.get("usage") or {}
        d.prompt_tokens, d.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        d.system_fingerprint = obj.get("system_fingerprint")
        d.spec = _spec_from_metrics(obj)
        choices = obj.get("choices") or []
        if choices:
            c = choices[0]
            d.finish_reason = c.get("finish_reason")
            d.text = self._choice_text(c)
            if c.get("token_ids") is not None:
                d.output_ids = list(c["token_ids"])
            if c.get("prompt_token_ids") is not None:
                d.prompt_ids = list(c["prompt_token_ids"])
            if isinstance(c.get("logprobs"), dict):
                d.logprobs, d.top_logprobs = self._choice_logprobs(c["logprobs"])
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
