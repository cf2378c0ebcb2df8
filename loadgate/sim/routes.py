"""HTTP routes of the simulated engine (handlers only; the shared generation path is in serving).

vLLM:   POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /version,
        POST /tokenize, POST /detokenize, GET /health, GET /metrics
SGLang: POST /generate, GET /server_info (and /get_server_info), GET /get_model_info
Sim:    GET /sim/truth (JSON lines), POST /sim/truth/reset, GET /sim/config
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from loadgate.sim.chat import chat_prompt_ids
from loadgate.sim.errors import ApiError, bad_request
from loadgate.sim.metrics import render_metrics
from loadgate.sim.openai_format import ChatFormatter, CompletionFormatter, OpenAIFormatter
from loadgate.sim.params import (
    OpenAIOptions,
    body_field,
    check_model,
    parse_chat,
    parse_completion,
    parse_generate,
)
from loadgate.sim.sequence import GenParams
from loadgate.sim.serving import Job, SimState, handle_generation, read_json_object
from loadgate.sim.sglang_format import GenerateFormatter

STATE = web.AppKey("loadgate_sim_state", SimState)
_SGLANG_SPEC = {"none": None, "draft_model": "STANDALONE", "ngram": "NGRAM"}


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")




# ---- generation ---------------------------------------------------------------------------

def _openai_route(parse: Callable[..., tuple[GenParams, OpenAIOptions]], formatter: type[OpenAIFormatter],
                  id_prefix: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A handler for an OpenAI generation route: `parse` reads the body, `formatter` shapes chunks."""

    async def handler(request: web.Request) -> web.StreamResponse:
        st = request.app[STATE]

        def job(body: dict[str, Any]) -> Job:
            params, opts = parse(body, st.cfg, st.tokenizer)
            return Job(params, opts.stream, lambda seq, rid: formatter(
                seq, f"{id_prefix}-{rid}", st.cfg.model, st.tokenizer, opts, st.fingerprint))

        return await handle_generation(request, st, job, "vllm")

    return handler


completions = _openai_route(parse_completion, CompletionFormatter, "cmpl")
chat_completions = _openai_route(parse_chat, ChatFormatter, "chatcmpl")


async def generate(request: web.Request) -> web.StreamResponse:
    st = request.app[STATE]
    arrival = time.perf_counter()

    def parse(body: dict[str, Any]) -> Job:
        params, opts = parse_generate(body, st.cfg, st.tokenizer)
        return Job(params, opts.stream, lambda seq, rid: GenerateFormatter(seq, rid, opts, arrival))

    return await handle_generation(request, st, parse, "sglang")


# ---- vLLM introspection -------------------------------------------------------------------

async def models(request: web.Request) -> web.Response:
    st = request.app[STATE]
    created = int(st.started)
    perm_id = "modelperm-" + hashlib.sha256(f"{st.cfg.model}:{st.cfg.seed}".encode()).hexdigest()[:16]
    return _json({"object": "list", "data": [{
        "id": st.cfg.model, "object": "model", "created": created, "owned_by": "vllm",
        "root": f"sim/{st.cfg.model}", "parent": None, "max_model_len": st.cfg.max_model_len,
        "permission": [{
            "id": perm_id, "object": "model_permission", "created": created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
            "organization": "*", "group": None, "is_blocking": False}]}]})


async def version(request: web.Request) -> web.Response:
    return _json({"version": request.app[STATE].version})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def tokenize(request: web.Request) -> web.Response:
    st = request.app[STATE]
    if not st.cfg.tokenize:
        raise web.HTTPNotFound()
    try:
        body = await read_json_object(request)
        check_model(body, st.cfg)
        if "messages" in body:
            ids = chat_prompt_ids(st.tokenizer, body["messages"], body.get("tools"),
                                  body_field(body, "add_generation_prompt", bool, True))
        elif isinstance(body.get("prompt"), str):
            ids = st.tokenizer.encode(body["prompt"])
        else:
            raise bad_request("prompt (a string) or messages is required", "prompt")
    except ApiError as e:
        return e.response()
    strs = [st.tokenizer.token_str(i) for i in ids] if body.get("return_token_strs") else None
    return _json({"count": len(ids), "max_model_len": st.cfg.max_model_len, "tokens": ids,
                  "token_strs": strs})


async def detokenize(request: web.Request) -> web.Response:
    st = request.app[STATE]
    if not st.cfg.tokenize:
        raise web.HTTPNotFound()
    try:
        body = await read_json_object(request)
        check_model(body, st.cfg)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise bad_request("tokens must be a list of integers", "tokens")
        bad = st.tokenizer.check_ids(ids)
        if bad is not None:
            raise bad_request(f"Token id {bad} is out of vocabulary", "tokens")
    except ApiError as e:
        return e.response()
    return _json({"prompt": st.tokenizer.decode(ids)})


async def metrics(request: web.Request) -> web.Response:
    st = request.app[STATE]
    text = render_metrics(st.engine.counters, st.engine.gauges(), st.cfg.model)
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Prometheus-Format": "0.0.4"})


# ---- SGLang introspection -----------------------------------------------------------------

async def server_info(request: web.Request) -> web.Response:
    st = request.app[STATE]
    cfg = st.cfg
    spec = cfg.speculative
    on = spec.method != "none"
    div = cfg.divergence
    state: dict[str, Any] = {"last_gen_throughput": 0.0}
    if on:
        state["avg_spec_accept_length"] = st.engine.sglang_avg_spec_accept_length
    return _json({
        "model_path": f"sim/{cfg.model}", "tokenizer_path": f"sim/{cfg.model}",
        "served_model_name": cfg.model, "dtype": "float32", "kv_cache_dtype": "auto",
        "context_length": cfg.max_model_len, "max_running_requests": cfg.max_num_seqs,
        "max_total_tokens": cfg.max_num_seqs * cfg.max_model_len, "chunked_prefill_size": -1,
        "page_size": 1, "tp_size": 1, "dp_size": 1, "attention_backend": "sim",
        "sampling_backend": "sim", "random_seed": cfg.seed,
        "enable_deterministic_inference": not (div.batch_variant or div.run_to_run > 0),
        "disable_radix_cache": True, "disable_cuda_graph": True, "disable_overlap_schedule": True,
        "speculative_algorithm": _SGLANG_SPEC[spec.method],
        "speculative_num_steps": spec.k if on else None,
        "speculative_eagle_topk": 1 if on else None,
        "speculative_num_draft_tokens": spec.k + 1 if on else None,
        "speculative_draft_model_path": None,
        "version": st.version,
        "internal_states": [state],
        "sim": dataclasses.asdict(cfg),
    })


async def model_info(request: web.Request) -> web.Response:
    cfg = request.app[STATE].cfg
    return _json({"model_path": f"sim/{cfg.model}", "tokenizer_path": f"sim/{cfg.model}",
                  "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                  "has_image_understanding": False, "has_audio_understanding": False,
                  "model_type": "sim", "architectures": ["SimForCausalLM"]})


# ---- simulator's own ----------------------------------------------------------------------

async def truth(request: web.Request) -> web.Response:
    return web.Response(body=request.app[STATE].truth.jsonl(), content_type="application/x-ndjson")


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's `POST /reset_prefix_cache` (a dev-mode route there): every cached block dropped.
    404 when the prefix cache is off, as an engine without the route answers."""
    engine = request.app[STATE].engine
    if engine.prefix_cache is None:
        return web.Response(status=404, text="404: Not Found")
    engine.prefix_cache.blocks.clear()
    return web.Response(status=200)


async def truth_reset(request: web.Request) -> web.Response:
    log = request.app[STATE].truth
    n = len(log.records)
    log.reset()
    return _json({"reset": n})


async def sim_config(request: web.Request) -> web.Response:
    return _json(dataclasses.asdict(request.app[STATE].cfg))


def add_routes(app: web.Application) -> None:
    """Register every route on `app` (whose `app[STATE]` is set by the caller)."""
    r = app.router
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/v1/models", models)
    r.add_get("/version", version)
    r.add_get("/health", health)
    r.add_post("/tokenize", tokenize)
    r.add_post("/detokenize", detokenize)
    r.add_get("/metrics", metrics)
    r.add_post("/generate", generate)
    r.add_get("/server_info", server_info)
    r.add_get("/get_server_info", server_info)
    r.add_get("/get_model_info", model_info)
    r.add_get("/sim/truth", truth)
    r.add_post("/sim/truth/reset", truth_reset)
    r.add_post("/reset_prefix_cache", reset_prefix_cache)
    r.add_get("/sim/config", sim_config)
