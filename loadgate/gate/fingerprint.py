"""The configuration fingerprint: everything that can change the engine's arithmetic, hashed.

Two parts:
- **introspected** from the engine itself: vLLM `/version`, `/v1/models` (`root`,
  `max_model_len`), `/metrics` labels (`model_name`, `engine`, `vllm:cache_config_info`);
  SGLang and the simulator `/server_info` (every server arg and `version`); llama.cpp `/props`
  (`build_info`, `model_path`, `total_slots`, `default_generation_settings`, chat template hash).
  (The `system_fingerprint` of responses is derived from these: vLLM's version, llama-server's
  `build_info`.) Volatile values (uptime, counters, cumulative
  acceptance, timestamps) are left out so the same configuration gives the same hash.
- **declared** in the profile (`target.declared`): what no engine serves — model revision,
  weight and tokenizer hashes, launch flags such as the attention backend, driver, GPU, dtype…
plus the request side: every sampling parameter sent and the concurrency used while checking.

The canonical form is JSON with sorted keys and no whitespace (orjson), and the hash its sha256.
`diff` names every field that differs between two fingerprints.
"""

from __future__ import annotations

import hashlib
from typing import Any

import aiohttp
import orjson

from loadgate.engine.adapters import info_metrics, introspection, metric_prefixes
from loadgate.net.scrape import scrape

VOLATILE_KEYS = frozenset({
    # counters, state and clocks
    "internal_states", "uptime", "created", "last_gen_throughput", "memory_usage", "load", "num_running_reqs",
    "avg_spec_accept_length", "slots", "is_processing", "id_task", "n_busy_slots_per_decode", "time",
    "timestamp", "start_time", "permission", "is_sleeping",
    # drawn anew at every start, or where the server listens: no effect on arithmetic
    "media_marker", "host", "port",
    # SGLang /server_info: how long each start-up phase took, and the command line as typed (it
    # holds the port; every flag in it is also its own server arg). The only fields besides the
    # ones above that differed between two starts of one configuration (SGLang 0.5.23, CPU)
    "startup_time", "launch_command",
})
# vLLM `cache_config_info` labels that come out of memory profiling and may move between restarts
VOLATILE_LABELS = frozenset({"num_gpu_blocks", "num_cpu_blocks", "kv_cache_memory_bytes", "kv_cache_size_tokens",
                             "kv_cache_max_concurrency", "num_gpu_blocks_override"})
ABSENT = "(absent)"


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in VOLATILE_KEYS}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def _get(session: aiohttp.ClientSession, url: str) -> Any | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return None
            return orjson.loads(await r.read())
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        return None


async def introspect(session: aiohttp.ClientSession, base: str, metrics_url: str | None = None) -> dict[str, Any]:
    """Ask the engine what it is. Routes that do not exist are simply absent from the result."""
    out: dict[str, Any] = {}
    for q in introspection():  # each engine family's routes (of several for one key, the first answering)
        got = None
        for route in q.routes:
            got = await _get(session, base + route)
            if got:
                break
        if isinstance(got, dict) and q.key == "models":  # OpenAI's list: only what names the model
            if got.get("data"):
                out[q.key] = [{k: m.get(k) for k in ("id", "root", "parent", "max_model_len") if k in m}
                              for m in got["data"]]
        elif isinstance(got, dict):
            doc = _strip(got)
            for name in q.hashed:
                value = doc.pop(name, None)
                if isinstance(value, str):
                    doc[name + "_sha256"] = sha256_text(value)
            out[q.key] = doc
    snap = await scrape(session, metrics_url or f"{base}/metrics")
    if snap is not None:
        kept, prefixes = info_metrics(), metric_prefixes()
        labels: dict[str, list[str]] = {}
        for (name, lab), _ in snap.values.items():
            if name.startswith(kept) or name.endswith("_info"):
                labels[name] = sorted(f"{k}={v}" for k, v in lab if k not in VOLATILE_LABELS)
        engines = sorted({dict(lab).get("model_name", "") for (n, lab), _ in snap.values.items()
                          if n.startswith(prefixes)} - {""})
        out["metrics_labels"] = {"model_name": engines, **labels}
    return out


def build(introspected: dict[str, Any], declared: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint document (without its hash)."""
    return {"engine": introspected, "declared": dict(declared), "request": request}


def canonical(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def fingerprint_hash(doc: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(doc)).hexdigest()


def _key(prefix: str, k: Any) -> str:
    k = str(k)
    if any(c in k for c in ".[]\"") or not k:
        return f"{prefix}[{orjson.dumps(k).decode()}]"  # a key with a dot never reads as nesting
    return f"{prefix}.{k}" if prefix else k


def flatten(x: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by path (`a.b[0].c`, keys holding dots or brackets quoted: `p["speculative.types"]`)."""
    if isinstance(x, dict):
        out: dict[str, Any] = {}
        for k, v in x.items():
            out.update(flatten(v, _key(prefix, k)))
        return out or {prefix: {}}
    if isinstance(x, list) and any(isinstance(v, (dict, list)) for v in x):
        out = {}
        for i, v in enumerate(x):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: x}


_MISSING = object()


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field path, value in a, value in b) for every field that differs, sorted by path; a field
    present on one side only reads ABSENT on the other (distinct from null)."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted(fa.keys() | fb.keys())
    out = []
    for k in keys:
        va, vb = fa.get(k, _MISSING), fb.get(k, _MISSING)
        if va is _MISSING or vb is _MISSING or va != vb:
            out.append((k, ABSENT if va is _MISSING else va, ABSENT if vb is _MISSING else vb))
    return out


def describe_diff(changes: list[tuple[str, Any, Any]], limit: int = 8) -> str:
    def show(v: Any) -> str:
        return v if v is ABSENT else repr(v)

    parts = [f"{k}: {show(va)} -> {show(vb)}" for k, va, vb in changes[:limit]]
    more = f"(and {len(changes) - limit} more)" if len(changes) > limit else ""
    return "; ".join(parts) + (" " if parts and more else "") + more
