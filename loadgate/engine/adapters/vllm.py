"""The vLLM family: it is spoken to through the OpenAI-compatible adapters
(`loadgate.engine.adapters.openai`); here is what else loadgate knows about it (`VLLM`)."""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import Family, Introspection, SpecCounters, models_context_length


def _identifies(engine: dict[str, Any]) -> bool:
    info = engine.get("server_info")
    return (isinstance(info, dict) and "vllm_config" in info) or any(str(k).startswith("vllm:") for k in engine.get("metrics_labels") or {})


VLLM = Family(
    name="vllm", title="vLLM", metric_prefix="vllm:",
    gauges={"kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",)},
    generated="vllm:generation_tokens_total",
    successes="vllm:request_success_total",
    # a draft is one verify step: 1 + Δaccepted / Δdrafts has the per-request definition
    spec=SpecCounters(drafts="vllm:spec_decode_num_drafts_total", draft_tokens="vllm:spec_decode_num_draft_tokens_total",
                      accepted="vllm:spec_decode_num_accepted_tokens_total",
                      per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total"),
    prefix_cache=("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    preemptions="vllm:num_preemptions_total",
    # (older vLLM: time_per_output_token_seconds for the inter-token histogram)
    latency_histograms={"ttft": ("vllm:time_to_first_token_seconds",),
                        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
                        "e2e": ("vllm:e2e_request_latency_seconds",), "queue": ("vllm:request_queue_time_seconds",)},
    info_metrics=("vllm:cache_config_info", "vllm:model_config_info"),
    introspection=(Introspection("version", ("/version",), order=0), Introspection("models", ("/v1/models",), order=1)),
    reset_routes=("/reset_prefix_cache",),  # served only with VLLM_SERVER_DEV_MODE=1
    identifies=_identifies,
    seeds=lambda engine: "vLLM takes a per-request seed",
    context_length=models_context_length,
)


FAMILY = VLLM
