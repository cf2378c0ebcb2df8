"""Contract: every simulator route answers in the shape real engines use.

vLLM routes are compared with the recorded vLLM 0.32 responses in shared/fixtures/vllm-cpu
(same keys, same nesting, same JSON value types); SGLang routes with the field lists of
shared/reference/engines.md.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgate.config.simconfig import SpeculativeConfig
from loadgate.sim.server import RunningSim
from tests.sim.helpers import (
    assert_same_shape,
    fast_cfg,
    fixture_events,
    fixture_json,
    post_json,
    post_stream,
    serve,
    sse_payloads,
    vllm_fixture,
)

SPEC = SpeculativeConfig(method="ngram", k=4)
CFG = fast_cfg(model="tiny", max_model_len=2048, speculative=SPEC)
TOP_MAPS = frozenset({"top_logprobs"})
PROMPT = "def main():\n    return 1\n\nclass Foo:\n    def bar(self):\n"


def _token_events(events: list[Any]) -> list[dict]:
    return [e for e in events if isinstance(e, dict) and e.get("choices")]


def _compare_stream(ours: list[Any], theirs: list[Any], maps: frozenset[str] = frozenset()) -> None:
    """First, middle and last token chunks, the usage chunk and [DONE], each against its kind."""
    assert ours[-1] == theirs[-1] == "[DONE]"
    assert_same_shape(ours[-2], theirs[-2], maps, "usage-chunk")
    o, t = _token_events(ours), _token_events(theirs)
    assert len(o) >= 3 and len(t) >= 3
    for name, i in (("first", 0), ("middle", 1), ("last", -1)):
        assert_same_shape(o[i], t[i], maps, f"{name}-chunk")


def test_completions_stream_with_ids_logprobs_and_continuous_usage_matches_vllm() -> None:
    theirs = fixture_events("completions_stream_ids_logprobs.sse")
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "logprobs": 2,
            "ignore_eos": True, "stream": True, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        return (await post_stream(s, sim.url + "/v1/completions", body))[1]

    ours = serve(CFG, go)
    _compare_stream(ours, theirs, TOP_MAPS)
    chunks = _token_events(ours)
    assert chunks[0]["choices"][0]["prompt_token_ids"] and all(
        c["choices"][0]["prompt_token_ids"] is None for c in chunks[1:])
    assert any(len(c["choices"][0]["token_ids"]) > 1 for c in chunks), "speculation gives multi-token chunks"
    assert all(t.startswith("token_id:") for c in chunks for t in c["choices"][0]["logprobs"]["tokens"])
    assert set(ours[-2]["metrics"]["speculative_decoding"]) == set(theirs[-2]["metrics"]["speculative_decoding"])


def test_completions_stream_with_prompt_ids_matches_vllm() -> None:
    theirs = fixture_events("completions_stream_prompt_ids.sse")
    body = {"model": "tiny", "prompt": [318, 2247, 818, 201, 261, 322, 392], "max_tokens": 12,
            "temperature": 0, "ignore_eos": True, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True}}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        return (await post_stream(s, sim.url + "/v1/completions", body))[1]

    ours = serve(CFG, go)
    _compare_stream(ours, theirs)
    assert _token_events(ours)[0]["choices"][0]["prompt_token_ids"] == body["prompt"]
    assert ours[-2]["usage"]["prompt_tokens"] == 7 and ours[-2]["usage"]["completion_tokens"] == 12


def test_completions_nonstream_matches_vllm() -> None:
    theirs = fixture_json("completions_nonstream.json")
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "logprobs": 2,
            "ignore_eos": True, "return_token_ids": True}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[int, Any]:
        return await post_json(s, sim.url + "/v1/completions", body)

    status, ours = serve(CFG, go)
    assert status == 200
    assert_same_shape(ours, theirs, TOP_MAPS)
    lp = ours["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == ours["choices"][0]["text"]
    assert lp["text_offset"][1] == len(lp["tokens"][0])


def test_chat_stream_with_logprobs_matches_vllm() -> None:
    theirs = fixture_events("chat_stream_logprobs.sse")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Write a function."}], "max_tokens": 16,
            "temperature": 0, "logprobs": True, "top_logprobs": 2, "ignore_eos": True, "stream": True,
            "return_token_ids": True, "stream_options": {"include_usage": True}}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        return (await post_stream(s, sim.url + "/v1/chat/completions", body))[1]

    ours = serve(CFG, go)
    _compare_stream(ours, theirs)
    assert ours[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert ours[0]["prompt_token_ids"]


def test_chat_nonstream_matches_vllm() -> None:
    theirs = fixture_json("chat_nonstream.json")
    body = {"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}],
            "max_tokens": 16, "temperature": 0, "logprobs": True, "top_logprobs": 2, "ignore_eos": True,
            "return_token_ids": True}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[int, Any]:
        return await post_json(s, sim.url + "/v1/chat/completions", body)

    status, ours = serve(CFG, go)
    assert status == 200
    assert_same_shape(ours, theirs)


def test_models_version_tokenize_detokenize_match_vllm() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with s.get(sim.url + "/v1/models") as r:
            out["models"] = await r.json()
        async with s.get(sim.url + "/version") as r:
            out["version"] = await r.json()
        out["tokenize"] = (await post_json(s, sim.url + "/tokenize", {"model": "tiny", "prompt": PROMPT}))[1]
        ids = out["tokenize"]["tokens"]
        out["detokenize"] = (await post_json(s, sim.url + "/detokenize", {"model": "tiny", "tokens": ids}))[1]
        out["chat_tokens"] = (await post_json(s, sim.url + "/tokenize", {
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}]}))[1]
        async with s.get(sim.url + "/health") as r:
            out["health"] = r.status
        return out

    got = serve(CFG, go)
    assert_same_shape(got["models"], fixture_json("v1_models.json"))
    assert got["models"]["data"][0]["id"] == "tiny" and got["models"]["data"][0]["max_model_len"] == 2048
    assert_same_shape(got["version"], fixture_json("version.json"))
    assert_same_shape(got["tokenize"], fixture_json("tokenize.json"))
    assert got["tokenize"]["count"] == len(got["tokenize"]["tokens"])
    assert_same_shape(got["detokenize"], fixture_json("detokenize.json"))
    assert got["detokenize"]["prompt"] == PROMPT
    assert got["chat_tokens"]["count"] > 3 and got["health"] == 200


def test_error_bodies_match_vllm() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[tuple[int, Any]]:
        return [await post_json(s, sim.url + "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 99999}),
                await post_json(s, sim.url + "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 4}),
                await post_json(s, sim.url + "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2048})]

    (s1, too_large), (s2, unknown), (s3, over_context) = serve(CFG, go)
    theirs_large, theirs_unknown = fixture_json("error_max_tokens_too_large.json"), fixture_json("error_unknown_model.json")
    assert (s1, s2, s3) == (400, 404, 400)
    assert too_large == theirs_large  # the same message, as vLLM words it
    assert unknown == {"error": {**theirs_unknown["error"], "message": "The model `nope` does not exist. Valid aliases: tiny."}}
    assert_same_shape(over_context, theirs_large)
    assert over_context["error"]["param"] == "max_tokens"


REQUIRED_FAMILIES = ("request_success", "prompt_tokens", "generation_tokens", "spec_decode_num_drafts",
                     "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens",
                     "spec_decode_num_accepted_tokens_per_pos", "kv_cache_usage_perc", "num_requests_running",
                     "num_requests_waiting")


def _families(text: str) -> dict[str, tuple[str, set[frozenset[str]]]]:
    return {f.name: (f.type, {frozenset(s.labels) for s in f.samples}) for f in text_string_to_metric_families(text)}


def test_metrics_families_names_types_and_labels_match_vllm() -> None:
    theirs = _families(vllm_fixture("metrics_after.txt").read_text())

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> str:
        await post_stream(s, sim.url + "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 8,
                                                           "temperature": 0, "stream": True})
        async with s.get(sim.url + "/metrics") as r:
            return await r.text()

    ours = _families(serve(CFG, go))
    for name in REQUIRED_FAMILIES:
        full = f"vllm:{name}"
        assert full in ours, f"{full} missing"
        assert ours[full] == theirs[full], f"{full}: {ours[full]} != {theirs[full]}"


def test_sglang_generate_has_the_documented_fields_nonstream_and_stream() -> None:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 9, "temperature": 0, "ignore_eos": True},
            "return_logprob": True, "top_logprobs_num": 2}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[Any, list[Any]]:
        _, whole = await post_json(s, sim.url + "/generate", body)
        async with s.post(sim.url + "/generate", json={**body, "stream": True}) as r:
            events = sse_payloads(await r.read())
        return whole, events

    whole, events = serve(CFG, go)
    for obj in [whole] + events[:-1]:
        assert {"text", "output_ids", "meta_info"} <= set(obj)
        meta = obj["meta_info"]
        assert {"id", "prompt_tokens", "completion_tokens", "finish_reason", "output_token_logprobs",
                "output_top_logprobs", "spec_verify_ct", "spec_accept_length", "e2e_latency"} <= set(meta)
        lp, top = meta["output_token_logprobs"], meta["output_top_logprobs"]
        assert len(lp) == len(top) == len(obj["output_ids"]) == meta["completion_tokens"]
        assert all(isinstance(x, float) and t == i and z is None for (x, t, z), i in zip(lp, obj["output_ids"], strict=True))
        assert all(len(pos) == 2 and all(len(e) == 3 and e[2] is None for e in pos) for pos in top)
    assert whole["meta_info"]["finish_reason"] == {"type": "length", "length": 9}
    assert events[-1] == "[DONE]"
    counts = [e["meta_info"]["completion_tokens"] for e in events[:-1]]
    assert counts == sorted(counts) and counts[-1] == 9, "cumulative completion_tokens"
    assert events[-2]["output_ids"] == whole["output_ids"] and events[-2]["text"] == whole["text"]
    assert whole["meta_info"]["spec_accept_length"] == 9 / whole["meta_info"]["spec_verify_ct"]


def test_sglang_server_info_and_model_info_have_the_documented_fields() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        out = []
        for path in ("/server_info", "/get_server_info", "/get_model_info"):
            async with s.get(sim.url + path) as r:
                out.append(await r.json())
        return out

    info, old_info, model = serve(CFG, go)
    assert info == old_info
    assert {"model_path", "dtype", "max_running_requests", "speculative_algorithm", "speculative_num_draft_tokens",
            "attention_backend", "enable_deterministic_inference", "chunked_prefill_size", "version",
            "internal_states", "sim"} <= set(info)
    assert info["speculative_algorithm"] == "NGRAM" and info["speculative_num_draft_tokens"] == 5
    assert isinstance(info["internal_states"][0]["avg_spec_accept_length"], float)
    assert info["sim"]["speculative"]["k"] == 4
    assert {"model_path", "is_generation"} <= set(model)
