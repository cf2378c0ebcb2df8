"""llama.cpp `llama-server` native /completion route.

Body: `prompt` (ids or text), `n_predict`, `n_probs`, `return_tokens`, `cache_prompt: false`
(its own docs warn prompt caching can make results nondeterministic), every sampler set
explicitly (its defaults are temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).
Stream: one event per emitted token batch with `tokens` (ids) and `tokens_predicted`; the final
event (`stop: true`) carries `timings` with `draft_n` / `draft_n_accepted` (absent, not 0, when
nothing was drafted). `completion_probabilities` is missing for tokens accepted from a draft in a
stream, and reads `logprob: 0.0` with an empty `top_logprobs` in a non-streamed body: both are
placeholders, recorded in `placeholder_positions`, never values.
"""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import (
    Chunk,
    Decoded,
    GenRequest,
    SpecCounts,
    iter_objects,
    load_payload,
    server_count,
)


def llama_spec(timings: dict[str, Any]) -> SpecCounts | None:
    if "draft_n" not in timings:
        return None

    def count(key: str) -> int | None:  # anything but a count is no count (the run's arithmetic needs ints)
        v = timings.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    return SpecCounts(source="llama.cpp timings", draft_tokens=count("draft_n"), accepted=count("draft_n_accepted"))


def _stop_reason(obj: dict[str, Any]) -> str | None:
    st = obj.get("stop_type")
    return {"limit": "length", "eos": "stop", "word": "stop"}.get(st, st) if st else None


class LlamaCppCompletion:
    name = "llamacpp"
    path = "/completion"
    ids_in_stream = True

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]:
        s = req.sampling
        body: dict[str, Any] = {
            "prompt": list(req.prompt_ids) if req.prompt_ids is not None else (req.prompt_text or ""),
            "n_predict": req.max_tokens, "stream": req.stream, "temperature": s.temperature,
            "top_k": s.top_k if s.top_k > 0 else 0, "top_p": s.top_p, "min_p": s.min_p,
            "repeat_penalty": s.repetition_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "seed": s.seed, "ignore_eos": req.ignore_eos,
            "return_tokens": True, "cache_prompt": False,
        }
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
                d.spec = llama_spec(obj.get("timings") or {})
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
                    finish_reason=_stop_reason(obj), spec=llama_spec(obj.get("timings") or {}),
                    system_fingerprint=obj.get("system_fingerprint"))
        d.prompt_tokens = server_count(d, "prompt_tokens", obj.get("tokens_evaluated"))
        d.completion_tokens = server_count(d, "completion_tokens", obj.get("tokens_predicted"))
        if "completion_probabilities" in obj:
            d.logprobs, d.top_logprobs = [], []
            self._probs(d, 0, len(toks), obj["completion_probabilities"])
        if toks:
            d.chunks.append(Chunk(t_ns, len(toks), toks))
        return d
