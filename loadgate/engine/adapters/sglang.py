"""The SGLang family: its native /generate route (`sglang`; its /v1 routes are the `openai-*`
adapters') and what else loadgate knows about it (`SGLANG`).

Streaming: each SSE event carries `output_ids`, `text` and `meta_info`. By default SGLang sends
them cumulatively (every event repeats the whole output so far); with
`incremental_streaming_output` it sends deltas. Both are handled: an event whose `output_ids`
extend the ids seen so far is cumulative. Tokens per chunk come from ids when present, else from
the delta of the cumulative `meta_info.completion_tokens` (source `meta_info`).
Logprobs: `meta_info.output_token_logprobs` = [[logprob, id, text|null], ...] and
`meta_info.output_top_logprobs` = one list of such triples per position.
"""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import (
    Chunk,
    Decoded,
    Family,
    GenRequest,
    Introspection,
    PromptTokenize,
    SpecCounts,
    cached_count,
    iter_objects,
    load_payload,
    models_context_length,
    server_count,
)


def _finish(meta: dict[str, Any]) -> str | None:
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        return str(fr.get("type")) if fr.get("type") is not None else None
    return fr if isinstance(fr, str) else None


def _spec(meta: dict[str, Any]) -> SpecCounts | None:
    if "spec_verify_ct" not in meta:
        return None
    accepted = meta.get("spec_num_correct_drafts", meta.get("spec_accept_token_num"))
    drafted = meta.get("spec_num_proposed_drafts", meta.get("spec_draft_token_num"))
    return SpecCounts(source="sglang meta_info", verify_steps=meta.get("spec_verify_ct"),
                     draft_tokens=drafted, accepted=accepted,
                     reported_acceptance_length=meta.get("spec_accept_length"))


def _lp_lists(meta: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    return list(meta.get("output_token_logprobs") or []), list(meta.get("output_top_logprobs") or [])


class SGLangGenerate(PromptTokenize):
    name = "sglang"
    path = "/generate"
    ids_in_stream = True
    family = "sglang"
    chat = False
    chat_api = "openai-chat"
    prompt_cache_off = False

    def build_body(self, req: GenRequest, model: str) -> dict[str, Any]:
        s = req.sampling
        params: dict[str, Any] = {
            "max_new_tokens": req.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "top_k": s.top_k, "min_p": s.min_p, "repetition_penalty": s.repetition_penalty,
            "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
            "ignore_eos": req.ignore_eos,
        }
        if s.seed is not None:
            params["sampling_seed"] = s.seed
        if req.stop:
            params["stop"] = list(req.stop)
        body: dict[str, Any] = {"sampling_params": params, "stream": req.stream}
        if req.prompt_ids is not None:
            body["input_ids"] = list(req.prompt_ids)
        else:
            body["text"] = req.prompt_text or ""
        if req.logprobs is not None:
            body["return_logprob"] = True
            body["top_logprobs_num"] = req.logprobs
        return body

    def _finalize(self, d: Decoded, meta: dict[str, Any], lps: list[Any], tops: list[Any]) -> None:
        if "prompt_tokens" in meta:
            d.prompt_tokens = server_count(d, "prompt_tokens", meta["prompt_tokens"])
        if "completion_tokens" in meta:
            d.completion_tokens = server_count(d, "completion_tokens", meta["completion_tokens"])
        d.finish_reason = _finish(meta) or d.finish_reason
        d.cached_tokens = cached_count(meta.get("cached_tokens"))
        d.spec = _spec(meta) or d.spec
        if lps:
            d.logprobs = [e[0] if isinstance(e, (list, tuple)) and e else None for e in lps]
            d.top_logprobs = [[(int(t[1]), t[0]) for t in (pos or [])] for pos in tops] if tops else None

    def decode_stream(self, events: list[tuple[int, bytes]]) -> Decoded:
        d = Decoded(token_source="ids")
        ids: list[int] = []
        have_ids = True
        last_ct = 0
        lps: list[Any] = []
        tops: list[Any] = []
        text = ""
        meta: dict[str, Any] = {}
        for t_ns, obj in iter_objects(events, d):
            meta = obj.get("meta_info") or {}
            ct = server_count(d, "completion_tokens", meta.get("completion_tokens"))
            new_ids = obj.get("output_ids")
            n = 0
            if isinstance(new_ids, list):
                if len(new_ids) >= len(ids) and new_ids[: len(ids)] == ids:
                    delta = new_ids[len(ids):]
                    ids = list(new_ids)
                else:
                    delta = list(new_ids)
                    ids.extend(delta)
                n = len(delta)
            else:
                have_ids = False
                if ct is not None:
                    n = ct - last_ct
                    d.token_source = "meta_info"
            if ct is not None:
                last_ct = ct
            piece = obj.get("text") or ""
            text = piece if piece.startswith(text) else text + piece
            new_lps, new_tops = _lp_lists(meta)
            if len(new_lps) >= len(lps) and new_lps[: len(lps)] == lps:
                lps, tops = new_lps, new_tops
            else:
                lps, tops = lps + new_lps, tops + new_tops
            if n > 0:
                d.chunks.append(Chunk(t_ns, n, ids[len(ids) - n:] if isinstance(new_ids, list) else None))
        d.output_ids = ids if have_ids and ids else None
        d.text = text
        self._finalize(d, meta, lps, tops)
        return d

    def decode_body(self, t_ns: int, body: bytes) -> Decoded:
        obj, err = load_payload(body, "body")
        if err is not None:
            return Decoded(error=err)
        if isinstance(obj, list):
            obj = obj[0] if obj else {}
        meta = obj.get("meta_info") or {}
        d = Decoded(token_source="ids", text=obj.get("text") or "")
        if isinstance(obj.get("output_ids"), list):
            d.output_ids = list(obj["output_ids"])
        else:
            d.token_source = "meta_info"
        lps, tops = _lp_lists(meta)
        self._finalize(d, meta, lps, tops)
        n = len(d.output_ids) if d.output_ids is not None else (d.completion_tokens or 0)
        if n:
            d.chunks.append(Chunk(t_ns, n, d.output_ids))
        return d


def _seeds(engine: dict[str, Any]) -> str:
    det = (engine.get("server_info") or {}).get("enable_deterministic_inference")
    return "SGLang takes a per-request sampling_seed" + (
        "" if det else "; without --enable-deterministic-inference it does not promise to honour it")



def _context_length(engine: dict[str, Any]) -> int | None:
    """/v1/models' `max_model_len`, else /server_info's `context_length`."""
    n = (engine.get("server_info") or {}).get("context_length")
    return models_context_length(engine) or (n if isinstance(n, int) and not isinstance(n, bool) else None)


def _speculation(engine: dict[str, Any]) -> tuple[bool, str] | None:
    """/server_info's `speculative_algorithm` (None or \"NONE\" when off)."""
    info = engine.get("server_info")
    if not isinstance(info, dict) or "speculative_algorithm" not in info:  # a server may send anything
        return None
    alg = info["speculative_algorithm"]
    return alg not in (None, "", "none", "NONE"), f"server_info speculative_algorithm = {alg!r}"


SGLANG = Family(
    name="sglang", title="SGLang", metric_prefix="sglang:", precedence=90,
    gauges={"kv_cache_usage": ("sglang:token_usage",), "running": ("sglang:num_running_reqs",),
            "waiting": ("sglang:num_queue_reqs",)},
    # incremented once per finished request by its completion tokens (labels `is_streaming`, summed).
    # No speculative-decoding counters, only gauges (`sglang:spec_accept_length`, ...): no `spec`
    generated="sglang:generation_tokens_total",
    prefix_cache=("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    # summed over `is_streaming` (the window's requests are all one kind)
    latency_histograms={"ttft": ("sglang:time_to_first_token_seconds",), "itl": ("sglang:inter_token_latency_seconds",),
                        "e2e": ("sglang:e2e_request_latency_seconds",), "queue": ("sglang:queue_time_seconds",)},
    introspection=(Introspection("server_info", ("/server_info", "/get_server_info"), order=2),),
    reset_routes=("/flush_cache",),
    identifies=lambda engine: bool(engine.get("server_info")),
    seeds=_seeds,
    context_length=_context_length,
    speculation=_speculation,
)


FAMILY = SGLANG
APIS = {"sglang": SGLangGenerate}
