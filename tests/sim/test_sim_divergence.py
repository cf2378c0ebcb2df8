"""Each divergence knob changes exactly what it says, only at near-tie positions, and nothing when off."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

from loadgate.config.simconfig import DivergenceConfig, SimConfig, SpeculativeConfig
from loadgate.sim.model import SimModel
from loadgate.sim.server import RunningSim
from tests.sim.helpers import completion_ids, fast_cfg, post_stream, serve, ulp

URL = "/v1/completions"
N = 48


@dataclass
class Reference:
    ids: list[int]
    near: list[bool]
    runner_up: list[int]
    lp1: list[float]
    lp2: list[float]


def reference(model: SimModel, prompt: list[int], n: int) -> Reference:
    """Greedy decoding by the model alone, with the facts at each position."""
    ctx = list(prompt)
    ref = Reference([], [], [], [], [])
    for _ in range(n):
        d = model.dists([model.context_hash(ctx)])
        ref.ids.append(d.top1[0])
        ref.near.append(d.near[0])
        ref.runner_up.append(d.top2[0])
        ref.lp1.append(d.lp1[0])
        ref.lp2.append(d.lp2[0])
        ctx.append(d.top1[0])
    return ref


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def req(prompt: list[int], n: int = N, **kw: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
            "return_token_ids": True, "logprobs": 2, **kw}


def prompts(model: SimModel, k: int) -> list[list[int]]:
    return [model.tokenizer.encode(f"divergence prompt number {i}") for i in range(k)]


def check_flip_at_near_tie(ref: Reference, got: list[int]) -> int:
    """The first divergence is a near-tie of the reference and emits its runner-up; returns it."""
    i = first_divergence(ref.ids, got)
    assert i is not None
    assert ref.near[i], f"divergence at {i} is not a near-tie"
    assert got[i] == ref.runner_up[i]
    return i


def run_alone_and_crowded(cfg: SimConfig, prompt: list[int]) -> tuple[list[int], list[int]]:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[list[int], list[int]]:
        alone = completion_ids((await post_stream(s, sim.url + URL, req(prompt)))[1])
        crowd = await asyncio.gather(post_stream(s, sim.url + URL, req(prompt)),
                                     *(post_stream(s, sim.url + URL, req([300 + i, 7, 9])) for i in range(16)))
        return alone, completion_ids(crowd[0][1])

    return serve(cfg, go)


def test_batch_variant_flips_only_in_batched_steps_and_only_at_near_ties() -> None:
    cfg = fast_cfg(near_tie_rate=0.2, fixed_step_us=2000, divergence=DivergenceConfig(batch_variant=True))
    model = SimModel(cfg)
    prompt = prompts(model, 1)[0]
    ref = reference(model, prompt, N)
    assert any(ref.near)
    alone, crowded = run_alone_and_crowded(cfg, prompt)
    assert alone == ref.ids
    check_flip_at_near_tie(ref, crowded)


def test_with_every_knob_off_a_crowded_run_equals_the_reference() -> None:
    cfg = fast_cfg(near_tie_rate=0.2, fixed_step_us=2000)
    model = SimModel(cfg)
    prompt = prompts(model, 1)[0]
    assert run_alone_and_crowded(cfg, prompt) == (reference(model, prompt, N).ids,) * 2


def test_spec_variant_needs_speculation_and_flips_verify_tokens_at_near_ties() -> None:
    div = DivergenceConfig(spec_variant=True)
    plain = fast_cfg(near_tie_rate=0.2, divergence=div)
    spec = fast_cfg(near_tie_rate=0.2, divergence=div, speculative=SpeculativeConfig(method="draft_model"))
    model = SimModel(plain)
    ps = prompts(model, 4)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[list[int]]:
        return [completion_ids((await post_stream(s, sim.url + URL, req(p)))[1]) for p in ps]

    assert serve(plain, go) == [reference(model, p, N).ids for p in ps]
    got = serve(spec, go)
    for p, ids in zip(ps, got, strict=True):
        ref = reference(model, p, N)
        if any(ref.near[1:]):
            assert check_flip_at_near_tie(ref, ids) >= 1  # the prefill token never comes from a verify pass
        if not ref.near[0]:
            assert ids[0] == ref.ids[0]


def test_run_to_run_flips_about_the_stated_share_of_repeated_requests_once_at_the_first_near_tie() -> None:
    cfg = fast_cfg(divergence=DivergenceConfig(run_to_run=0.3))
    model = SimModel(cfg)
    prompt = next(p for p in prompts(model, 50) if any(reference(model, p, 24).near[:12]))
    ref = reference(model, prompt, 24)
    first_near = ref.near.index(True)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[list[int]]:
        return [completion_ids((await post_stream(s, sim.url + URL, req(prompt, 24)))[1]) for _ in range(200)]

    runs = serve(cfg, go, timeout=60)
    differing = [r for r in runs if r != ref.ids]
    assert 0.17 < len(differing) / len(runs) < 0.43  # 4 sd (0.032 for 200 draws) around 0.3: 6e-5 false failures
    for r in differing:
        assert first_divergence(ref.ids, r) == first_near and r[first_near] == ref.runner_up[first_near]
    assert serve(fast_cfg(), go, timeout=60) == [ref.ids] * 200


def test_logprob_jitter_keeps_ids_and_moves_every_logprob_by_exactly_n_ulps() -> None:
    cfg = fast_cfg(divergence=DivergenceConfig(logprob_jitter=3))
    model = SimModel(cfg)
    prompt = prompts(model, 1)[0]
    ref = reference(model, prompt, N)

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[Any]:
        return (await post_stream(s, sim.url + URL, req(prompt, return_tokens_as_token_ids=True)))[1]

    events = [e for e in serve(cfg, go) if isinstance(e, dict) and e["choices"]]
    assert completion_ids(events) == ref.ids
    lps = [x for e in events for x in e["choices"][0]["logprobs"]["token_logprobs"]]
    tops = [t for e in events for t in e["choices"][0]["logprobs"]["top_logprobs"]]
    assert [ulp(a, b) for a, b in zip(lps, ref.lp1, strict=True)] == [3] * N
    for top, lp2, runner in zip(tops, ref.lp2, ref.runner_up, strict=True):
        assert ulp(top[f"token_id:{runner}"], lp2) == 3


def test_long_context_flips_only_beyond_the_threshold() -> None:
    model = SimModel(fast_cfg(near_tie_rate=0.2))
    prompt = next(p for p in prompts(model, 50) if any(reference(model, p, N).near[21:]))
    threshold = len(prompt) + 20  # positions 0..20 have context <= threshold
    ref = reference(model, prompt, N)
    cfg = fast_cfg(near_tie_rate=0.2, divergence=DivergenceConfig(long_context=threshold))

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> list[int]:
        return completion_ids((await post_stream(s, sim.url + URL, req(prompt)))[1])

    got = serve(cfg, go)
    assert check_flip_at_near_tie(ref, got) == ref.near.index(True, 21)
    far = fast_cfg(near_tie_rate=0.2, divergence=DivergenceConfig(long_context=10_000))
    assert serve(far, go) == ref.ids
