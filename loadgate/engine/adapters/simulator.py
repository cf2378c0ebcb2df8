"""The embedded simulator as an engine family (`SIMULATOR`): it serves the OpenAI-compatible
routes and vLLM's metric names (so its metrics read as the vLLM family's), and says what it is on
`/server_info`."""

from __future__ import annotations

from loadgate.engine.adapters.base import Family, Introspection, models_context_length

SIMULATOR = Family(
    name="sim", title="the simulator", metric_prefix="", precedence=0,
    introspection=(Introspection("server_info", ("/server_info",), order=2),),
    reset_routes=("/reset_prefix_cache",),
    identifies=lambda engine: "sim" in (engine.get("server_info") or {}),
    seeds=lambda engine: "the simulator takes a per-request seed",
    context_length=models_context_length,
)


FAMILY = SIMULATOR
