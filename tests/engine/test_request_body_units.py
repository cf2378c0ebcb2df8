"""The request body's pieces on their own inputs: `merged_body` (extra keys into loadgate's body;
inside the exactness check its own sampling keys win), the per-request seed, and the chat
adapter's reading of reasoning deltas (vLLM's `reasoning` and `reasoning_content`) as chunks of
their own kind."""

from __future__ import annotations

import orjson

from loadgate.engine.adapters import adapter_for
from loadgate.engine.adapters.base import GenRequest, Sampling, merged_body
from loadgate.load.target import request_seed


def test_extra_keys_are_added_mappings_merged_and_the_check_keeps_its_sampling():
    body = adapter_for("openai-completions").build_body(GenRequest(max_tokens=4, prompt_ids=(1, 2)), "m")
    extra = {"repetition_penalty": 1.3, "chat_template_kwargs": {"enable_thinking": False},
             "stream_options": {"continuous_usage_stats": False, "x": 1}}
    load = merged_body(body, extra)
    assert load["repetition_penalty"] == 1.3 and load["chat_template_kwargs"] == {"enable_thinking": False}
    assert load["stream_options"] == {"include_usage": True, "continuous_usage_stats": False, "x": 1}
    check = merged_body(body, extra, check=True)
    assert check["repetition_penalty"] == 1.0  # the check's own (greedy, no penalty) wins
    assert check["chat_template_kwargs"] == {"enable_thinking": False}  # what changes the prompt goes in
    assert body["repetition_penalty"] == 1.0 and "chat_template_kwargs" not in body  # the input is not changed
    assert merged_body(body, {}) is body


def test_the_check_keeps_sglang_sampling_params_inside_the_nested_mapping():
    body = adapter_for("sglang").build_body(GenRequest(max_tokens=4, prompt_ids=(1,)), "m")
    got = merged_body(body, {"sampling_params": {"temperature": 0.7, "json_schema": "{}"}}, check=True)
    assert got["sampling_params"]["temperature"] == 0.0 and got["sampling_params"]["json_schema"] == "{}"


def test_no_seed_is_sent_when_none_is_asked_and_a_request_seed_depends_on_run_seed_and_index_alone():
    for api in ("openai-completions", "openai-chat", "llamacpp", "sglang"):
        body = adapter_for(api).build_body(GenRequest(max_tokens=4, prompt_text="hi", sampling=Sampling(seed=None)), "m")
        assert "seed" not in orjson.dumps(body).decode(), api
    seeds = {request_seed(7, i) for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**31 for s in seeds)
    assert request_seed(7, 3) == request_seed(7, 3) != request_seed(8, 3)


def _events(*deltas: dict, usage: bool = False) -> list[tuple[int, bytes]]:
    out = []
    for k, d in enumerate(deltas):
        obj = {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        if usage:
            obj["usage"] = {"prompt_tokens": 3, "completion_tokens": k}  # the role chunk carries none
        out.append((1000 * (k + 1), orjson.dumps(obj)))
    return out + [(9999, b"[DONE]")]


def test_reasoning_deltas_become_chunks_of_their_own_kind_in_either_spelling():
    chat = adapter_for("openai-chat")
    for key in ("reasoning_content", "reasoning"):
        d = chat.decode_stream(_events({"role": "assistant", "content": ""}, {key: "Let"}, {key: " me"},
                                       {"content": "Yes"}, {"content": "."}, usage=True))
        assert [(c.t_ns, c.n_tokens, c.reasoning) for c in d.chunks] == [
            (2000, 1, True), (3000, 1, True), (4000, 1, False), (5000, 1, False)], key
        assert d.text == "Yes." and d.completion_tokens == 4 and d.token_source == "usage"
    # the completions route has no reasoning field: a `reasoning` key there is not read
    comp = adapter_for("openai-completions")
    obj = {"choices": [{"index": 0, "text": "a", "reasoning": "b"}]}
    d = comp.decode_stream([(1, orjson.dumps(obj)), (2, b"[DONE]")])
    assert [c.reasoning for c in d.chunks] == [False]


def test_a_delta_of_both_kinds_splits_its_tokens_and_a_textless_chunk_mid_thought_is_reasoning():
    """vLLM's parser, when </think> falls inside a step of several tokens (speculation), sends one
    delta with `reasoning` and `content`: the chunk starts the answer and its tokens are shared by
    the texts' lengths. A chunk of ids with no text between two reasoning chunks (a character cut
    across tokens) is reasoning; the markers before and after the thought are neither."""
    from loadgate.load.recorder import answer_chunk, reasoning_tokens

    chat = adapter_for("openai-chat")

    def ev(t: int, delta: dict, ids: list[int]) -> tuple[int, bytes]:
        return t, orjson.dumps({"choices": [{"index": 0, "delta": delta, "token_ids": ids}]})

    d = chat.decode_stream([ev(1, {}, [5]), ev(2, {"reasoning": "abcd"}, [6, 7]), ev(3, {}, [8]),
                            ev(4, {"reasoning": "ef"}, [9]), ev(5, {"reasoning": "ghij", "content": "XY"}, [10, 11, 12]),
                            ev(6, {"content": "Z"}, [13]), (7, b"[DONE]")])
    assert [(c.reasoning, c.thought) for c in d.chunks] == [(None, 0), (True, 2), (None, 0), (True, 1), (False, 2),
                                                          (False, 0)]
    assert reasoning_tokens(d.chunks) == 2 + 1 + 1 + 2 and answer_chunk(d.chunks) == 4
    # the </think> marker alone after the thought, then the answer: the marker counts as neither
    d = chat.decode_stream([ev(1, {"reasoning": "ab"}, [1]), ev(2, {}, [2]), ev(3, {"content": "c"}, [3]), (4, b"[DONE]")])
    assert reasoning_tokens(d.chunks) == 1 and answer_chunk(d.chunks) == 2
    # ids alone everywhere (no text of either kind): no reasoning, the first chunk is the answer's
    d = chat.decode_stream([ev(1, {}, [1]), ev(2, {}, [2]), (3, b"[DONE]")])
    assert reasoning_tokens(d.chunks) == 0 and answer_chunk(d.chunks) == 0


def test_a_request_that_reasoned_and_never_answered_is_an_infinite_ttfa():
    from loadgate.core.figures import figure
    from tests.recs import make_record

    never = make_record(chunk_tokens=[1, 1, 1], reasoning_tokens=3, answer_chunk=None)
    answered = make_record(chunk_tokens=[1, 1, 1], reasoning_tokens=2, answer_chunk=2)
    plain = make_record(chunk_tokens=[1, 1])
    ttfa = figure("ttfa").samples
    assert ttfa is not None
    assert ttfa(never) == [float("inf")] and ttfa(answered) == [3.0] and ttfa(plain) == [1.0]


def test_chat_template_kwargs_reach_the_servers_tokenize_and_a_local_template():
    import asyncio

    import aiohttp
    from aiohttp import web

    from loadgate.load.workload.dataset import ServerCounter
    from tests.loopback import json_routes

    seen: list[dict] = []

    async def tokenize(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"tokens": [1, 2, 3], "count": 3})

    async def go() -> None:
        async with json_routes({"/tokenize": tokenize}) as base, aiohttp.ClientSession() as s:
            c = ServerCounter(s, base, "m", "openai-chat", {"enable_thinking": False})
            assert await c.chat_ids([{"role": "user", "content": "hi"}]) == [1, 2, 3]
            plain = ServerCounter(s, base, "m", "openai-chat")
            await plain.chat_ids([{"role": "user", "content": "hi"}])

    asyncio.run(go())
    assert seen[0]["chat_template_kwargs"] == {"enable_thinking": False} and "chat_template_kwargs" not in seen[1]
