"""The embedded simulator as an engine family (`SIMULATOR`): it serves the OpenAI-compatible
routes and vLLM's metric names (so its metrics read as the vLLM family's), and says what it is on
`/server_info`."""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters.base import Family, Introspection, models_context_length


def _speculation(engine: dict[str, Any]) -> tuple[bool, str] | None:
    """/server_info's `sim.speculative.method` (\"none\" when off)."""
    info = engine.get("server_info")
    sim = info.get("sim") if isinstance(info, dict) else None  # a server may send anything
    spec = sim.get("speculative") if isinstance(sim, dict) else None
    if not isinstance(spec, dict):
        return None
    method = spec.get("method")
    return method not in (None, "none"), f"simulator speculative.method = {method!r}"


SIMULATOR = Family(
    name="sim", title="the simulator", metric_prefix="", precedence=0,
    introspection=(Introspection("server_info", ("/server_info",), order=2),),
    reset_routes=("/reset_prefix_cache",),
    identifies=lambda engine: isinstance(info := engine.get("server_info"), dict) and "sim" in info,
    seeds=lambda engine: "the simulator takes a per-request seed",
    context_length=models_context_length,
    speculation=_speculation,
)


FAMILY = SIMULATOR
