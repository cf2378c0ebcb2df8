"""The engine over HTTP: reproducible, batch-invariant, finishing rules, queueing, step timing, and a
ground-truth log that agrees with what a plain client received."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

import aiohttp
import orjson
import pytest

from loadgate.config.simconfig import SimConfig, SlowdownConfig
from loadgate.sim.engine import SimEngine
from loadgate.sim.model import SimModel
from loadgate.sim.server import RunningSim, running_sim
from tests.sim.helpers import completion_ids, fast_cfg, post_json, post_stream, run, serve, sse_payloads

URL = "/v1/completions"


def greedy(model: SimModel, prompt: list[int], n: int) -> list[int]:
    """The model's own greedy continuation (no engine involved)."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(model.dists([model.context_hash(ids)]).top1[0])
    return ids[len(prompt):]


def body(prompt: Any, n: int = 24, **kw: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
            "logprobs": 2, "return_token_ids": True, **kw}


def ids_and_logprobs(events: list[Any]) -> tuple[list[int], list[float]]:
    lps: list[float] = []
    for e in events:
        if isinstance(e, dict) and e.get("choices"):
            lps.extend(e["choices"][0]["logprobs"]["token_logprobs"])
    return completion_ids(events), lps


def test_same_request_twice_and_on_two_servers_gives_identical_ids_and_logprob_bits() -> None:
    async def collect(cfg: SimConfig, times: int) -> list[tuple[list[int], list[float]]]:
        async with running_sim(cfg) as sim, aiohttp.ClientSession() as s:
            return [ids_and_logprobs((await post_stream(s, sim.url + URL, body("Hello there", 40)))[1])
                    for _ in range(times)]

    a = run(collect(fast_cfg(), 2))
    b = run(collect(fast_cfg(), 1))
    c = run(collect(fast_cfg(seed=7), 1))
    assert a[0] == a[1] == b[0]  # float equality of JSON doubles is equality of the float32 bits
    assert len(a[0][0]) == 40 and a[0][0] != c[0][0]


def test_a_sequence_alone_or_among_32_others_gets_identical_ids_and_logprobs() -> None:
    cfg = fast_cfg(fixed_step_us=2000)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[Any, Any, list[Any]]:
        alone = ids_and_logprobs((await post_stream(s, sim.url + URL, body("The batch test", 48)))[1])
        results = await asyncio.gather(
            post_stream(s, sim.url + URL, body("The batch test", 48)),
            *(post_stream(s, sim.url + URL, body(f"other prompt {i}", 48)) for i in range(32)))
        return alone, ids_and_logprobs(results[0][1]), [sim.truth.records[i] for i in range(1, 34)]

    alone, crowded, recs = serve(cfg, go)
    assert alone == crowded
    target = recs[0]
    first, last = target.chunks[0].send_ns, target.chunks[-1].send_ns
    assert sum(1 for r in recs[1:] if r.chunks[0].send_ns < last and r.chunks[-1].send_ns > first) >= 30


def test_greedy_output_is_the_models_own_continuation_on_every_route() -> None:
    model = SimModel(fast_cfg())
    prompt = model.tokenizer.encode("route check")
    want = greedy(model, prompt, 20)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[list[int]]:
        _, comp = await post_json(s, sim.url + URL, {**body(prompt, 20), "stream": False})
        _, gen = await post_json(s, sim.url + "/generate", {
            "input_ids": prompt, "sampling_params": {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True}})
        _, chat = await post_stream(s, sim.url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "route check"}], "max_tokens": 5, "temperature": 0,
            "stream": True, "return_token_ids": True})
        return [comp["choices"][0]["token_ids"], gen["output_ids"], completion_ids(chat)]

    comp, gen, chat = serve(fast_cfg(), go)
    assert comp == gen == want and len(chat) == 5


def _prompt_hitting_eos(model: SimModel, within: int) -> tuple[list[int], int]:
    rng = random.Random(11)
    for _ in range(3000):
        prompt = [rng.randrange(256, 4000) for _ in range(4)]
        out = greedy(model, prompt, within)
        if model.eos_id in out and out.index(model.eos_id) >= 8:  # after the stop string and stop id
            return prompt, out.index(model.eos_id)
    raise AssertionError("no prompt reaches EOS")


def test_eos_stops_unless_ignore_eos_and_stop_strings_and_ids_stop_with_their_reason() -> None:
    model = SimModel(fast_cfg())
    prompt, at = _prompt_hitting_eos(model, 40)
    cont = greedy(model, prompt, 12)
    stop_text = model.tokenizer.decode(cont[3:5])

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        u = sim.url + URL
        plain = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "return_token_ids": True}
        return [(await post_json(s, u, plain))[1],
                (await post_json(s, u, {**plain, "ignore_eos": True}))[1],
                (await post_json(s, u, {**plain, "prompt": prompt, "stop": [stop_text]}))[1],
                (await post_json(s, u, {**plain, "stop_token_ids": [cont[2]]}))[1],
                (await post_json(s, u, {"prompt": prompt, "temperature": 0}))[1]]

    eos, ignored, stop_str, stop_id, default = serve(fast_cfg(), go)
    c = eos["choices"][0]
    assert c["finish_reason"] == "stop" and c["stop_reason"] is None and c["token_ids"][-1] == model.eos_id
    assert len(c["token_ids"]) == at + 1 and eos["usage"]["completion_tokens"] == at + 1
    assert ignored["choices"][0]["finish_reason"] == "length" and ignored["usage"]["completion_tokens"] == 40
    s = stop_str["choices"][0]
    full = model.tokenizer.decode(cont)
    assert s["finish_reason"] == "stop" and s["stop_reason"] == stop_text
    assert s["text"] == full[:full.index(stop_text)]
    assert stop_id["choices"][0]["stop_reason"] == cont[2] and len(stop_id["choices"][0]["token_ids"]) == 3
    assert default["usage"]["completion_tokens"] <= 16


def test_seeded_sampling_repeats_and_unseeded_sampling_varies() -> None:
    req = {"prompt": "sample me", "max_tokens": 30, "temperature": 1.0, "ignore_eos": True, "return_token_ids": True}

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[list[int]]:
        out = []
        for extra in ({"seed": 5}, {"seed": 5}, {"seed": 6}, {}, {}):
            _, r = await post_json(s, sim.url + URL, {**req, **extra})
            out.append(r["choices"][0]["token_ids"])
        return out

    a, b, c, d, e = serve(fast_cfg(), go)
    assert a == b and a != c and d != e


def test_requests_beyond_max_num_seqs_wait_and_the_gauges_show_it() -> None:
    cfg = fast_cfg(max_num_seqs=2, fixed_step_us=2000)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[Any], set[tuple[int, int]]]:
        tasks = [asyncio.ensure_future(post_stream(s, sim.url + URL, body(f"q{i}", 10))) for i in range(5)]
        seen = set()
        while not all(t.done() for t in tasks):  # poll: no assumption on how fast all 5 arrive
            g = sim.engine.gauges()
            seen.add((g.running, g.waiting))
            await asyncio.sleep(0.001)
        return await asyncio.gather(*tasks), seen

    results, seen = serve(cfg, go)
    assert (2, 3) in seen and max(r for r, _ in seen) == 2  # 2 run, 3 wait; never more than 2 running
    assert all(len(completion_ids(ev)) == 10 for _, ev in results)


@pytest.mark.timing
def test_fixed_steps_pace_chunks_and_concurrent_streams_get_their_tokens_in_the_same_step() -> None:
    cfg = fast_cfg(fixed_step_us=5000)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        await asyncio.gather(*(post_stream(s, sim.url + URL, body(f"pace {i}", 20)) for i in range(8)))
        return sim.truth.records

    recs = serve(cfg, go)
    gaps = [(b.send_ns - a.send_ns) / 1e6 for r in recs for a, b in zip(r.chunks, r.chunks[1:], strict=False)
            if a.kind == b.kind == "tokens"]
    assert 4.0 < statistics.median(gaps) < 6.5
    # the k-th chunk of every stream leaves in the same step: within a fraction of a step (median over
    # steps, so one preemption of the loop on a busy machine does not decide)
    spreads = [(max(ts) - min(ts)) / 1e6 for k in range(3, 15) for ts in [[r.chunks[k].send_ns for r in recs]]]
    assert statistics.median(spreads) < 2.5


@pytest.mark.timing
def test_decode_cost_grows_with_the_batch() -> None:
    cfg = fast_cfg(decode_step_us=2000, decode_us_per_seq=500)

    async def elapsed(sim: RunningSim, s: aiohttp.ClientSession, n: int) -> float:
        t = time.perf_counter()
        await asyncio.gather(*(post_stream(s, sim.url + URL, body(f"cost {i}", 10)) for i in range(n)))
        return time.perf_counter() - t

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[float, float]:
        return await elapsed(sim, s, 1), await elapsed(sim, s, 9)

    one, nine = serve(cfg, go)
    assert 0.016 < one  # 9 decode steps of 2 ms (no upper bound: a busy machine only adds)
    assert nine > one + 0.025  # 9 decode steps of 2 + 8 * 0.5 = 6 ms


def test_the_slowdown_multiplies_every_step_from_after_s_past_the_first_step() -> None:
    cfg = fast_cfg(fixed_step_us=1000.0, slowdown=SlowdownConfig(after_s=2.0, factor=2.5))
    engine = SimEngine(cfg, SimModel(cfg))
    assert [engine.cost_factor(t) for t in (100.0, 101.0, 101.999)] == [1.0] * 3 and engine.slowed_at is None
    assert [engine.cost_factor(t) for t in (102.0, 500.0)] == [2.5, 2.5]
    assert (engine.first_step_at, engine.slowed_at) == (100.0, 102.0)
    off = SimEngine(fast_cfg(), SimModel(fast_cfg()))
    assert [off.cost_factor(t) for t in (0.0, 1e6)] == [1.0, 1.0] and off.slowed_at is None


def test_a_slowed_engine_sleeps_factor_times_each_steps_cost() -> None:
    cfg = fast_cfg(fixed_step_us=2000.0, slowdown=SlowdownConfig(after_s=0.0, factor=3.0))

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[float, Any, Any]:
        t = time.perf_counter()
        await post_stream(s, sim.url + URL, body("slow", 10))
        return time.perf_counter() - t, sim.engine.slowed_at, sim.engine.first_step_at

    elapsed, slowed, first = serve(cfg, go)
    assert elapsed >= 10 * 3 * 0.002  # 10 steps (the prefill's and 9 decodes) of 3 x 2 ms; a busy machine only adds
    assert slowed is not None and slowed == first  # after_s 0: from the very first step


def test_truth_log_matches_what_a_plain_client_received() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[tuple[int, bytes]], Any, list[Any]]:
        got: list[tuple[int, bytes]] = []
        async with s.post(sim.url + URL, json=body("truth check", 30, stream_options={"include_usage": True}),
                          headers={"x-request-id": "rid-1"}) as r:
            assert r.headers["x-request-id"] == "rid-1"
            buf = b""
            async for data in r.content.iter_any():
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    got.append((time.perf_counter_ns(), event))
        _, whole = await post_json(s, sim.url + URL, {**body("truth check", 30), "stream": False},
                                   headers={"x-request-id": "rid-2"})
        async with s.get(sim.url + "/sim/truth") as r:
            lines = [orjson.loads(x) for x in (await r.read()).splitlines()]
        return got, whole, lines

    got, whole, lines = serve(fast_cfg(fixed_step_us=1000), go)
    rec, rec2 = lines
    assert rec["request_id"] == "rid-1" and rec["route"] == URL and rec["stream"] and rec["status"] == 200
    assert rec["faults"] == [] and rec["finish_reason"] == "length" and rec["prompt_tokens"] > 0
    events = [sse_payloads(e + b"\n\n")[0] for _, e in got]
    assert len(rec["chunks"]) == len(events)
    for c, ev, (t_recv, _) in zip(rec["chunks"], events, got, strict=True):
        ids = ev["choices"][0]["token_ids"] if isinstance(ev, dict) and ev["choices"] else []
        assert c["token_ids"] == ids and c["n_tokens"] == len(ids)
        assert rec["arrival_ns"] < c["send_ns"] <= t_recv
    assert [c["kind"] for c in rec["chunks"]][-2:] == ["usage", "done"]
    assert rec["completion_tokens"] == sum(c["n_tokens"] for c in rec["chunks"]) == 30
    assert rec2["request_id"] == "rid-2" and rec2["chunks"][0]["kind"] == "body"
    assert rec2["chunks"][0]["token_ids"] == whole["choices"][0]["token_ids"]


def test_truth_reset_over_http_and_bad_requests_are_recorded() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[int, int, int]:
        status, _ = await post_json(s, sim.url + URL, {"prompt": "", "max_tokens": 2})
        n = len(sim.truth.records)
        async with s.post(sim.url + "/sim/truth/reset") as r:
            assert r.status == 200
        return status, n, len(sim.truth.records)

    status, before, after = serve(fast_cfg(), go)
    assert status == 400 and before == 1 and after == 0


def test_a_failing_engine_step_aborts_the_requests_in_flight_and_the_engine_goes_on() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[Any], list[Any]]:
        model = sim.engine.model
        real = model.dists
        calls = {"n": 0}

        def flaky(hashes: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("injected bug")
            return real(hashes)

        model.dists = flaky  # type: ignore[method-assign]
        _, broken = await post_stream(s, sim.url + URL, body("bug", 10))
        _, fine = await post_stream(s, sim.url + URL, body("no bug", 10))
        return broken, fine

    broken, fine = serve(fast_cfg(), go, timeout=10)
    assert "[DONE]" not in broken and len(completion_ids(broken)) < 10
    assert len(completion_ids(fine)) == 10 and fine[-1] == "[DONE]"


def test_streamed_text_pieces_join_to_the_decoded_text_across_split_utf8_and_stop_strings() -> None:
    from loadgate.sim.sequence import GenParams, Sequence
    from loadgate.sim.tokenizer import Tokenizer

    tk = Tokenizer(4096)
    text = "héllo 😀 wörld, the end. Ünïcode ✓"
    ids = tk.encode(text)
    for stop, want in (((), text), (("end.",), "héllo 😀 wörld, the "), (("😀",), "héllo ")):
        seq = Sequence(GenParams(prompt_ids=(1,), max_tokens=len(ids), stop=stop), tk, 0)
        pieces = []
        for t in ids:
            done = seq.append_token(t, 0.0, None, 0)
            pieces.append(seq.end_step().text)
            if done:
                break
        assert "".join(pieces) == want
        assert seq.finish_reason == ("stop" if stop else "length")


def test_a_client_that_goes_away_aborts_its_sequence() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[int, int]:
        async with s.post(sim.url + URL, json=body("leaving early", 10_000), headers={"x-request-id": "gone"}) as r:
            await r.content.readuntil(b"\n\n")
        for _ in range(200):
            await asyncio.sleep(0.01)
            if sim.engine.counters.success["abort"]:
                break
        return sim.engine.counters.success["abort"], sim.engine.gauges().running

    assert serve(fast_cfg(fixed_step_us=1000), go) == (1, 0)


def test_stopping_the_server_ends_streams_in_flight() -> None:
    async def main() -> list[Any]:
        async with aiohttp.ClientSession() as s:
            async with running_sim(fast_cfg(fixed_step_us=1000)) as sim:
                task = asyncio.ensure_future(post_stream(s, sim.url + URL, body("never ends", 30_000)))
                await asyncio.sleep(0.05)
            try:
                return (await task)[1]
            except aiohttp.ClientPayloadError:
                return ["cut"]

    t = time.perf_counter()
    events = run(main(), timeout=10)
    assert time.perf_counter() - t < 5 and "[DONE]" not in events
