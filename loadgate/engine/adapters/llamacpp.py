"""The llama.cpp family: `llama-server`'s native /completion route (`llamacpp`), its /v1 routes
(`llamacpp-openai-*`), and what else loadgate knows about it (`LLAMACPP`).

Body: `prompt` (ids or text), `n_predict`, `n_probs`, `return_tokens`, `cache_prompt: false`
(its own docs warn prompt caching can make results nondeterministic), every sampler set
explicitly (its defaults are temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).
Stream: one event per emitted token batch with `tokens` (ids) and `tokens_predicted`; the final
event (`stop: true`) carries `timings` with `draft_n` / `draft_n_accepted` (absent, not 0, when
nothing was drafted). `completion_probabilities` is missing for tokens accepted from a draft in a
stream, and reads `logprob: 0.0` with an empty `top_logprobs` in a non-streamed body: both are
placeholders, recorded in `placeholder_positions`, never values.

llama-server's /v1 answers, as its 0.3.36 build gives them (see tests/engines/test_llamacpp.py):
- ids: none in `choices`; `__verbose.tokens` has them per event of a /v1/completions stream and in
  a non-streamed body of either route; a /v1/chat/completions stream has them in no event (its
  final `__verbose.tokens` is empty), so exactness sends chat cases to it non-streamed;
- logprobs: `logprobs.content[]` (chat's shape, also on /v1/completions) with an `id` per entry;
  a token accepted from a draft has no entry in a stream and `logprob: 0.0` with an empty
  `top_logprobs` in a body: placeholders, never values;
- `timings` (with `draft_n` / `draft_n_accepted` when a draft was proposed) on the body and on
  a stream's final event;
- `cache_prompt` is on by default: a prompt's cached prefix changes the batch shapes and so the
  logprobs (seen: 2 of 3 prompt tokens cached moved a logprob in its 7th digit); sent false.
"""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import (
    Chunk,
    ContentTokenize,
    Decoded,
    Family,
    GenRequest,
    Introspection,
    SpecCounters,
    iter_objects,
    load_payload,
    server_count,
    timings_spec,
)
from loadgate.engine.adapters.openai import OpenAIChat, OpenAICompletions


def _stop_reason(obj: dict[str, Any]) -> str | None:
    st = obj.get("stop_type")
    return {"limit": "length", "eos": "stop", "word": "stop"}.get(st, st) if st else None


class LlamaCppCompletion(ContentTokenize):
    name = "llamacpp"
    path = "/completion"
    ids_in_stream = True
    family = "llamacpp"
    chat = False
    chat_api = "llamacpp-openai-chat"
    prompt_cache_off = True  # every body carries `cache_prompt: false`

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]:
        s = req.sampling
        body: dict[str, Any] = {
            "prompt": list(req.prompt_ids) if req.prompt_ids is not None else (req.prompt_text or ""),
            "n_predict": req.max_tokens, "stream": req.stream, "temperature": s.temperature,
            "top_k": s.top_k if s.top_k > 0 else 0, "top_p": s.top_p, "min_p": s.min_p,
            "repeat_penalty": s.repetition_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "ignore_eos": req.ignore_eos,
            "return_tokens": True, "cache_prompt": False,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if req.stop:
            body["stop"] = list(req.stop)
        if req.logprobs is not None:
            body["n_probs"] = req.logprobs
        return body

    @staticmethod
    def _probs(d: Decoded, base: int, n: int, probs: list[dict[str, Any]] | None) -> None:
        assert d.logprobs is not None and d.top_logprobs is not None
        probs = probs or []
        for j in range(n):
            p = probs[j] if j < len(probs) else None
            tops = [(int(t.get("id", -1)), t.get("logprob")) for t in (p or {}).get("top_logprobs") or []]
            if p is None or (not tops and p.get("logprob") == 0.0):
                d.placeholder_positions.append(base + j)
                d.logprobs.append(None)
                d.top_logprobs.append([])
            else:
                d.logprobs.append(p.get("logprob"))
                d.top_logprobs.append(tops)

    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        d = Decoded(token_source="ids", output_ids=[], logprobs=[], top_logprobs=[])
        text: list[str] = []
        want_probs = False
        for t_ns, obj in iter_objects(events, d):
            toks = obj.get("tokens") or []
            want_probs = want_probs or "completion_probabilities" in obj
            self._probs(d, len(d.output_ids or []), len(toks), obj.get("completion_probabilities"))
            d.output_ids.extend(toks)  # type: ignore[union-attr]
            text.append(obj.get("content") or "")
            if toks:
                d.chunks.append(Chunk(t_ns, len(toks), list(toks)))
            if obj.get("stop"):
                d.finish_reason = _stop_reason(obj)
                d.prompt_tokens = server_count(d, "prompt_tokens", obj.get("tokens_evaluated"))
                d.completion_tokens = server_count(d, "completion_tokens", obj.get("tokens_predicted"))
                d.spec = timings_spec(obj.get("timings") or {})
                d.system_fingerprint = obj.get("system_fingerprint")
        d.text = "".join(text)
        if not want_probs:
            d.logprobs, d.top_logprobs, d.placeholder_positions = None, None, []
        return d

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        obj, err = load_payload(body, "body")
        if err is not None:
            return Decoded(error=err)
        toks = list(obj.get("tokens") or [])
        d = Decoded(token_source="ids", output_ids=toks, text=obj.get("content") or "",
                    finish_reason=_stop_reason(obj), spec=timings_spec(obj.get("timings") or {}),
                    system_fingerprint=obj.get("system_fingerprint"))
        d.prompt_tokens = server_count(d, "prompt_tokens", obj.get("tokens_evaluated"))
        d.completion_tokens = server_count(d, "completion_tokens", obj.get("tokens_predicted"))
        if "completion_probabilities" in obj:
            d.logprobs, d.top_logprobs = [], []
            self._probs(d, 0, len(toks), obj["completion_probabilities"])
        if toks:
            d.chunks.append(Chunk(t_ns, len(toks), toks))
        return d


class _LlamaCppOpenAI(ContentTokenize):
    """llama-server's /v1 routes: ids through `verbose` + `return_tokens`, no prompt cache, its own
    name for the repetition penalty (it ignores vLLM's)."""

    placeholder_zero = True
    family: str | None = "llamacpp"
    chat_api = "llamacpp-openai-chat"
    prompt_cache_off = True  # every body carries `cache_prompt: false`

    def _add_engine(self, body: dict[str, Any], req: GenRequest) -> None:
        for k in ("return_token_ids", "return_tokens_as_token_ids", "repetition_penalty"):
            body.pop(k, None)
        body.update(verbose=True, return_tokens=True, cache_prompt=False,
                    repeat_penalty=req.sampling.repetition_penalty)
        if body.get("top_k", 0) < 0:
            body["top_k"] = 0  # llama.cpp: 0 disables top-k


class LlamaCppOpenAICompletions(_LlamaCppOpenAI, OpenAICompletions):
    name = "llamacpp-openai-completions"


class LlamaCppOpenAIChat(_LlamaCppOpenAI, OpenAIChat):
    name = "llamacpp-openai-chat"
    ids_in_stream = False  # a chat stream's events carry no ids (its final `__verbose.tokens` is empty)


def _seeds(engine: dict[str, Any]) -> str:
    return "llama.cpp takes a per-request seed"



def _context_length(engine: dict[str, Any]) -> int | None:
    """The per-slot context (`default_generation_settings.n_ctx` of /props)."""
    n = ((engine.get("props") or {}).get("default_generation_settings") or {}).get("n_ctx")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


LLAMACPP = Family(
    name="llamacpp", title="llama.cpp", metric_prefix="llamacpp:",
    gauges={"kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",), "running": ("llamacpp:requests_processing",),
            "waiting": ("llamacpp:requests_deferred",)},
    generated="llamacpp:tokens_predicted_total",
    # `drafts` counts only the steps that verified a draft: a step whose draft proposed nothing is not
    # counted, so 1 + Δaccepted / Δdrafts is the length per drafting step (>= the per-request figure)
    spec=SpecCounters(drafts="llamacpp:spec_decode_num_drafts_total",
                      draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
                      accepted="llamacpp:spec_decode_num_accepted_tokens_total",
                      per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos_total", drafts_are_steps=False),
    introspection=(Introspection("props", ("/props",), hashed=("chat_template",), order=3),),
    reset_routes=(),  # none: its adapters send `cache_prompt: false`, so no request uses the cache
    identifies=lambda engine: bool(engine.get("props")),
    seeds=_seeds,
    context_length=_context_length,
)


FAMILY = LLAMACPP
APIS = {"llamacpp": LlamaCppCompletion, "llamacpp-openai-completions": LlamaCppOpenAICompletions,
        "llamacpp-openai-chat": LlamaCppOpenAIChat}
