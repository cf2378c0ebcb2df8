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
