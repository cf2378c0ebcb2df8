"""Speculative decoding: multi-token chunks, per-request statistics and Prometheus counters that all
agree exactly with the streamed tokens (prefill token: first chunk, outside every statistic)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgate.config.simconfig import SpeculativeConfig
from loadgate.sim.server import RunningSim
from tests.sim.helpers import completion_ids, fast_cfg, post_stream, serve

URL = "/v1/completions"
LENGTHS = (1, 2, 3, 7, 24, 40, 40, 64)


def counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_total"):
                key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
                key += f"[{s.labels['finished_reason']}]" if "finished_reason" in s.labels else ""
                out[key] = s.value
    return out


async def scrape(sim: RunningSim, s: aiohttp.ClientSession) -> dict[str, float]:
    async with s.get(sim.url + "/metrics") as r:
        return counters(await r.text())


def req(i: int, n: int, **kw: Any) -> dict[str, Any]:
    return {"prompt": f"speculate {i}", "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
            "return_token_ids": True, "stream_options": {"include_usage": True}, **kw}


def run_batch(spec: SpeculativeConfig) -> tuple[dict[str, float], dict[str, float], list[list[Any]]]:
    cfg = fast_cfg(fixed_step_us=1000, speculative=spec)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[Any, Any, list[list[Any]]]:
        before = await scrape(sim, s)
        results = await asyncio.gather(*(post_stream(s, sim.url + URL, req(i, n)) for i, n in enumerate(LENGTHS)))
        return before, await scrape(sim, s), [ev for _, ev in results]

    return serve(cfg, go)


def token_chunks(events: list[Any]) -> list[list[int]]:
    return [e["choices"][0]["token_ids"] for e in events if isinstance(e, dict) and e["choices"]]


def test_streamed_tokens_per_request_stats_and_counters_agree_exactly() -> None:
    before, after, runs = run_batch(SpeculativeConfig(method="draft_model", k=4))
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    total_tokens = steps = accepted = drafted = verify_chunks = 0
    for n, events in zip(LENGTHS, runs, strict=True):
        chunks = token_chunks(events)
        usage, stats = events[-2]["usage"], events[-2]["metrics"]["speculative_decoding"]
        assert sum(len(c) for c in chunks) == usage["completion_tokens"] == n
        assert len(chunks[0]) == 1  # the prefill token
        assert stats["num_spec_steps"] == len(chunks) - 1 == sum(stats["acceptance_histogram"])
        assert stats["num_accepted_draft_tokens"] == n - 1 - stats["num_spec_steps"]
        assert stats["num_accepted_draft_tokens"] == sum(i * h for i, h in enumerate(stats["acceptance_histogram"]))
        assert all(len(c) <= 5 for c in chunks)
        if stats["num_spec_steps"]:
            assert stats["mean_acceptance_length"] == (n - 1) / stats["num_spec_steps"]
        total_tokens += n
        steps += stats["num_spec_steps"]
        accepted += stats["num_accepted_draft_tokens"]
        drafted += stats["num_draft_tokens"]
        verify_chunks += len(chunks) - 1
    assert any(len(c) > 1 for events in runs for c in token_chunks(events)), "multi-token bursts"
    assert delta["vllm:generation_tokens_total"] == total_tokens
    assert delta["vllm:spec_decode_num_drafts_total"] == steps
    assert delta["vllm:spec_decode_num_accepted_tokens_total"] == accepted
    assert delta["vllm:spec_decode_num_draft_tokens_total"] == drafted
    per_pos = [delta[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]"] for i in range(4)]
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    assert delta["vllm:request_success_total[length]"] == len(LENGTHS)
    from_counters = 1 + delta["vllm:spec_decode_num_accepted_tokens_total"] / delta["vllm:spec_decode_num_drafts_total"]
    from_stream = (total_tokens - len(LENGTHS)) / verify_chunks  # prefill tokens left out
    assert abs(from_counters - from_stream) < 1e-12


def test_speculation_does_not_change_the_tokens() -> None:
    _, _, plain = run_batch(SpeculativeConfig(method="none"))
    _, _, spec = run_batch(SpeculativeConfig(method="ngram", k=3))
    assert [completion_ids(e) for e in plain] == [completion_ids(e) for e in spec]
    assert all(len(c) == 1 for e in plain for c in token_chunks(e))


def test_acceptance_probabilities_shape_the_chunks() -> None:
    _, after_all, all_in = run_batch(SpeculativeConfig(method="draft_model", k=3, acceptance=(1.0,)))
    for n, events in zip(LENGTHS, all_in, strict=True):
        sizes = [len(c) for c in token_chunks(events)]
        assert sizes[1:-1] == [4] * (len(sizes) - 2) and sum(sizes) == n
    _, _, none_in = run_batch(SpeculativeConfig(method="draft_model", k=3, acceptance=(0.0,)))
    assert all(len(c) == 1 for e in none_in for c in token_chunks(e))
    _, after, half = run_batch(SpeculativeConfig(method="draft_model", k=4, acceptance=(0.5,)))
    pos = [after[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]"] for i in range(4)]
    assert pos[0] / after["vllm:spec_decode_num_drafts_total"] < 0.75 and pos[1] < pos[0]


def test_sglang_spec_fields_count_verify_passes_and_include_the_prefill_token() -> None:
    cfg = fast_cfg(fixed_step_us=1000, speculative=SpeculativeConfig(method="ngram", k=4))
    body = {"text": "sglang speculation", "sampling_params": {"max_new_tokens": 30, "temperature": 0,
                                                              "ignore_eos": True}, "stream": True}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[Any], Any]:
        _, events = await post_stream(s, sim.url + "/generate", body)
        async with s.get(sim.url + "/server_info") as r:
            return events, await r.json()

    events, info = serve(cfg, go)
    meta = events[-2]["meta_info"]
    assert meta["completion_tokens"] == 30 and meta["spec_verify_ct"] == len(events) - 2  # minus prefill, [DONE]
    assert meta["spec_accept_length"] == 30 / meta["spec_verify_ct"]
    assert meta["spec_num_correct_drafts"] == 30 - 1 - meta["spec_verify_ct"]
    assert info["internal_states"][0]["avg_spec_accept_length"] == meta["spec_accept_length"]


def test_the_per_token_shape_sends_the_same_tokens_one_event_each_a_step_in_one_write() -> None:
    """`stream_events: per_token` (llama-server's shape): every event carries one token, the ids and
    text are those of the per_step shape, and the truth log stamps the events of one step (one write)
    at one time, the stream's end with its last step."""
    spec = SpeculativeConfig(method="draft_model", k=4)
    _, _, per_step = run_batch(spec)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[list[Any]], list[dict[str, Any]]]:
        results = await asyncio.gather(*(post_stream(s, sim.url + URL, req(i, n)) for i, n in enumerate(LENGTHS)))
        return [ev for _, ev in results], [t.to_dict() for t in sim.truth.records]

    per_token, truth = serve(fast_cfg(fixed_step_us=1000, speculative=spec, stream_events="per_token"), go)
    assert [completion_ids(e) for e in per_token] == [completion_ids(e) for e in per_step]
    def texts(runs: list[list[Any]]) -> list[str]:
        return ["".join(e["choices"][0]["text"] for e in ev if isinstance(e, dict) and e["choices"]) for ev in runs]

    assert texts(per_token) == texts(per_step)
    assert all(len(c) == 1 for e in per_token for c in token_chunks(e))
    bursts = 0
    for t in truth:
        chunks = [c for c in t["chunks"] if c["kind"] == "tokens"]
        times = [c["send_ns"] for c in chunks]
        bursts += len(times) - len(set(times))  # events of one step share their write's time
        done = [c["send_ns"] for c in t["chunks"] if c["kind"] == "done"]
        assert done == [times[-1]]  # the end went out with the last step
    assert bursts > 0
