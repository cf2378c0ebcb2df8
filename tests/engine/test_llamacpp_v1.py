"""llama-server's /v1 routes and its `llamacpp:` counters, on responses recorded from a real server.

tests/data/llama-server-v1/ was written by scripts/engines/record_llama_v1.py against llama-server
(llama-cpp-python 0.3.36 source) serving the project's tiny f32 target with draft-model speculation,
one slot: five greedy requests of 24 tokens each on one prompt, `/metrics` before and after.
"""

from __future__ import annotations

import orjson

from loadgate.analysis.specdec import contamination, from_counters, from_records, reconcile
from loadgate.engine.adapters import adapter_for, chat_api_for, family_for
from loadgate.engine.adapters.base import Decoded, GenRequest
from loadgate.snapshot import parse_metrics
from tests.fixtures_path import DATA, sse_events
from tests.recs import make_record

D = DATA / "llama-server-v1"
COMPLETIONS, CHAT = "llamacpp-openai-completions", "llamacpp-openai-chat"
FILES = {"v1_completions_stream_verbose.sse": COMPLETIONS, "v1_completions_verbose.json": COMPLETIONS,
         "v1_chat_stream_verbose.sse": CHAT, "v1_chat_verbose.json": CHAT,
         "v1_completions_stream_nologprobs.sse": COMPLETIONS}


def decoded(name: str) -> Decoded:
    a, raw = adapter_for(FILES[name]), (D / name).read_bytes()
    if name.endswith(".json"):
        return a.decode_body(1, raw)
    return a.decode_stream(sse_events(D / name))


def raw_body(name: str) -> dict:
    return orjson.loads((D / name).read_bytes())


def test_the_bodies_ask_llama_server_for_ids_without_prompt_cache_and_vllm_keeps_its_own():
    prompt = "The quiet river walked over the old garden"  # as record_llama_v1.py sends it
    for api, name in ((COMPLETIONS, "v1_completions_stream_verbose"), (CHAT, "v1_chat_stream_verbose")):
        req = GenRequest(max_tokens=24, prompt_text=prompt, ignore_eos=True, logprobs=2, stream=True)
        b = adapter_for(api).build_body(req, "tiny")
        assert (b["verbose"], b["return_tokens"], b["cache_prompt"], b["repeat_penalty"], b["top_k"]) \
            == (True, True, False, 1.0, 0)
        assert not {"return_token_ids", "return_tokens_as_token_ids", "repetition_penalty"} & set(b)
        # a snapshot: the recorded answers were asked with this very body (record_llama_v1.py builds it
        # with the same adapter), so a change to the body shows here; the fields above are the check
        assert orjson.loads((D / f"{name}.request.json").read_bytes()) == b
    v = adapter_for("openai-completions").build_body(GenRequest(max_tokens=8, prompt_text="x", logprobs=2), "tiny")
    assert v["return_token_ids"] and v["top_k"] == -1 and not {"verbose", "return_tokens", "cache_prompt"} & set(v)
    assert chat_api_for("llamacpp") == chat_api_for(COMPLETIONS) == CHAT
    assert chat_api_for("openai-completions") == chat_api_for("sglang") == "openai-chat"


def test_completions_stream_and_body_give_the_servers_ids_with_speculative_positions_as_placeholders():
    s, b = decoded("v1_completions_stream_verbose.sse"), decoded("v1_completions_verbose.json")
    body = raw_body("v1_completions_verbose.json")
    assert s.error is None and b.error is None and s.token_source == "ids"
    assert s.output_ids == b.output_ids == body["__verbose"]["tokens"] == [e["id"] for e in body["choices"][0][
        "logprobs"]["content"]]
    assert len(s.output_ids) == s.completion_tokens == b.completion_tokens == 24
    assert [i for c in s.chunks for i in c.ids] == s.output_ids
    # the stream leaves out entries for speculative tokens; the body writes them as 0.0 with no
    # alternatives: both are placeholders at the same positions, the real values agree
    entries = body["choices"][0]["logprobs"]["content"]
    zero = [k for k, e in enumerate(entries) if e["logprob"] == 0.0 and not e["top_logprobs"]]
    assert s.placeholder_positions == b.placeholder_positions == zero and 0 < len(zero) < 24
    real = [k for k in range(24) if k not in zero]
    assert [s.logprobs[k] for k in real] == [b.logprobs[k] for k in real] == [entries[k]["logprob"] for k in real]
    assert all(v is None for k, v in enumerate(b.logprobs) if k in zero)
    assert b.top_logprobs[0] == [(t["id"], t["logprob"]) for t in entries[0]["top_logprobs"]]
    assert len(b.top_logprobs[0]) == 2 and b.top_logprobs[0][0][0] == b.output_ids[0]
    # timings: per request draft counts, the same for the same greedy request either way
    assert s.spec.source == "llama.cpp timings" and (s.spec.draft_tokens, s.spec.accepted) == (
        body["timings"]["draft_n"], body["timings"]["draft_n_accepted"]) == (b.spec.draft_tokens, b.spec.accepted)
    assert s.system_fingerprint == body["system_fingerprint"] and s.finish_reason == b.finish_reason == "length"


def test_without_logprobs_the_stream_still_gives_ids_and_no_placeholders():
    d, ref = decoded("v1_completions_stream_nologprobs.sse"), decoded("v1_completions_verbose.json")
    assert d.output_ids == ref.output_ids and d.logprobs is None and d.placeholder_positions == []


def test_chat_ids_come_only_from_the_body_so_exactness_sends_chat_unstreamed():
    s, b = decoded("v1_chat_stream_verbose.sse"), decoded("v1_chat_verbose.json")
    body = raw_body("v1_chat_verbose.json")
    assert b.output_ids == body["__verbose"]["tokens"] == [e["id"] for e in body["choices"][0]["logprobs"]["content"]]
    assert b.text == body["choices"][0]["message"]["content"] and len(b.output_ids) == b.completion_tokens == 24
    # no id in any event of the chat stream: loadgate says so (None), counts one token per event
    assert s.output_ids is None and s.text == b.text
    assert sum(c.n_tokens for c in s.chunks) == s.completion_tokens == 24 and len(s.chunks) == 24
    assert len(s.logprobs) == 24 and s.placeholder_positions == b.placeholder_positions  # aligned by event
    assert adapter_for(CHAT).ids_in_stream is False and adapter_for(COMPLETIONS).ids_in_stream is True


def test_llamacpp_counters_give_acceptance_reconciled_on_token_counts_and_a_clean_window():
    before = parse_metrics((D / "metrics_before.txt").read_text())
    after = parse_metrics((D / "metrics_after.txt").read_text())
    ds = [decoded(n) for n in FILES]
    records = [make_record(completion_tokens=d.completion_tokens,
                           spec={"source": d.spec.source, "verify_steps": None, "draft_tokens": d.spec.draft_tokens,
                                 "accepted": d.spec.accepted}) for d in ds]
    c = from_counters(before, after, family_for("llamacpp-openai-completions", after))
    assert c is not None and c["engine"] == "llamacpp"
    assert c["accepted"] == sum(d.spec.accepted for d in ds) and c["draft_tokens"] == sum(d.spec.draft_tokens for d in ds)
    assert c["acceptance_length"] == 1 + c["accepted"] / c["drafts"]
    assert set(c["per_position_acceptance"]) == {"0", "1", "2", "3"}
    pr = from_records(records)
    # the per-request length counts every step, llama.cpp's `drafts` only those that verified a draft
    assert pr["verify_steps"] == sum(23 - d.spec.accepted for d in ds) >= c["drafts"]
    assert pr["acceptance_length"] <= c["acceptance_length"]
    r = reconcile(pr, c)
    assert r["agree"] and r["compared"] == ["accepted", "draft_tokens"] and r["relative_difference"] == 0.0
    assert not reconcile({**pr, "accepted": pr["accepted"] + 5}, c)["agree"]
    llama = family_for("llamacpp", None)  # the adapter names its family: no metrics needed
    cc = contamination(before, after, records, llama)
    assert cc["clean"] and cc["server_generation_tokens"] == cc["client_generation_tokens"] == 120
    assert cc["server_requests"] is None  # llama-server counts no requests
    assert not contamination(before, after, records[:4], llama)["clean"]
