"""SGLang 0.5.23's recorded responses (tests/data/shared-fixtures/sglang-cpu/) through loadgate's
SGLang adapter, fingerprint and counter names: the shapes the live tests in
tests/engines/test_sglang.py meet, checked without a server."""

from __future__ import annotations

import orjson

from loadgate.analysis.specdec import GENERATED, contamination
from loadgate.engine.adapters import adapter_for
from loadgate.engine.servermetrics import Snapshot, first_name, parse_metrics
from loadgate.gate.fingerprint import VOLATILE_KEYS, _strip
from tests.fixtures_path import fixture_file, sse_events
from tests.recs import make_record


def test_native_stream_and_body_decode_to_the_same_ids_logprobs_and_finish_reason():
    body = orjson.loads(fixture_file("sglang-cpu", "generate_logprob.json").read_bytes())
    a = adapter_for("sglang")
    streamed = a.decode_stream(sse_events(fixture_file("sglang-cpu", "generate_stream.txt")))
    whole = a.decode_body(0, fixture_file("sglang-cpu", "generate_logprob.json").read_bytes())
    assert whole.output_ids == body["output_ids"] and len(whole.output_ids) == 32
    assert whole.logprobs == [e[0] for e in body["meta_info"]["output_token_logprobs"]]
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 32}
    assert whole.finish_reason == "length" and whole.completion_tokens == 32 and whole.prompt_tokens == 9
    assert whole.top_logprobs is not None and all(top[0][0] == i for top, i in zip(whole.top_logprobs,
                                                                                 whole.output_ids, strict=True))
    # the stream repeats the whole output in every event (cumulative): one new id per chunk
    assert streamed.output_ids is not None and streamed.output_ids == whole.output_ids[: len(streamed.output_ids)]
    assert all(ch.n_tokens == 1 for ch in streamed.chunks) and streamed.finish_reason in ("length", "stop")
    assert streamed.spec is None and whole.spec is None  # no spec_verify_ct without speculation


def test_the_generation_counter_is_sglangs_and_sums_streaming_and_not():
    snap = parse_metrics(fixture_file("sglang-cpu", "metrics.out").read_text())
    assert first_name(snap, GENERATED) == "sglang:generation_tokens_total"
    # 184 generated for unstreamed requests, 16 for streamed ones
    assert snap.total("sglang:generation_tokens_total") == 200.0
    cc = contamination(Snapshot({}), snap, [make_record(completion_tokens=200)])
    assert cc is not None and cc["clean"] and cc["server_generation_tokens"] == 200.0
    assert cc["server_requests"] is None  # SGLang has no vLLM-style success counter


def test_server_info_keeps_every_server_arg_and_drops_start_up_times_ports_and_the_command_line():
    info = orjson.loads(fixture_file("sglang-cpu", "server_info.out").read_bytes())
    stripped = _strip(info)
    assert {"startup_time", "launch_command", "port", "internal_states"} <= set(info) and "startup_time" in VOLATILE_KEYS
    assert not {"startup_time", "launch_command", "port", "internal_states"} & set(stripped)
    assert stripped["dtype"] == "auto" and stripped["attention_backend"] == "torch_native"
    assert stripped["version"] == "0.5.23" and stripped["disable_radix_cache"] is False
