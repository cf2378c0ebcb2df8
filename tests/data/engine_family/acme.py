"""A made-up engine family, "Acme", written as docs/contributing.md's "Add an engine" says: this one
file, put in `loadgate/engine/adapters/`, is all loadgate needs. Acme speaks the OpenAI-compatible
routes and serves vLLM's metric names, so the embedded simulator can play it
(tests/e2e/test_engine_family.py copies this file into a copy of the package and runs a check and a
run through it)."""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import Family, Introspection, SpecCounters
from loadgate.engine.adapters.openai import OpenAIChat, OpenAICompletions


class AcmeCompletions(OpenAICompletions):
    name = "acme-completions"
    family: str | None = "acme"
    chat_api = "acme-chat"


class AcmeChat(OpenAIChat):
    name = "acme-chat"
    family: str | None = "acme"
    chat_api = "acme-chat"


def _identifies(engine: dict[str, Any]) -> bool:
    return "acme_build" in engine


FAMILY = Family(
    name="acme", title="Acme", metric_prefix="vllm:",
    gauges={"kv_cache_usage": ("vllm:kv_cache_usage_perc",), "running": ("vllm:num_requests_running",),
            "waiting": ("vllm:num_requests_waiting",)},
    generated="vllm:generation_tokens_total",
    successes="vllm:request_success_total",
    spec=SpecCounters(drafts="vllm:spec_decode_num_drafts_total", draft_tokens="vllm:spec_decode_num_draft_tokens_total",
                      accepted="vllm:spec_decode_num_accepted_tokens_total"),
    prefix_cache=("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    introspection=(Introspection("acme_build", ("/server_info",)),),
    reset_routes=("/reset_prefix_cache",),
    identifies=_identifies,
    seeds=lambda engine: "Acme takes a per-request seed",
    context_length=lambda engine: 4096,
)
APIS = {"acme-completions": AcmeCompletions, "acme-chat": AcmeChat}
