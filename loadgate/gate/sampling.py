"""The sampling contracts against a live engine (`exactness.sampling`; definitions and statistics
in `loadgate.exactness.sampling`).

  seeded-replay            the first `replay_cases` short cases, sampled at `temperature` with a
                           fixed seed each, are each sent `replays` times, one request at a time
                           (round by round); every send of a case must give the same ids (text
                           where the API gives none)
  distribution-preserving  at the first `prefixes` short completion cases, `samples` seeded
                           requests of 3 tokens each on the candidate (seeds from 1,000,000 up)
                           against as many captured on the baseline engine with other seeds
                           (0 up, stored in the baseline file), tested per prefix and
                           Holm-corrected; with the share of candidate samples that showed draft
                           activity, and the smallest total-variation distance the sample size
                           detects

Many seeded requests rather than `n`: every engine takes a seed, not every one serves `n` (the
simulator does not; vLLM and llama.cpp treat `n` differently under speculation).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from loadgate.config.profile import SamplingContract
from loadgate.engine.adapters import identify
from loadgate.engine.adapters.base import Decoded
from loadgate.errors import UsageError
from loadgate.exactness.corpus import Case, Corpus
from loadgate.exactness.drift import first_difference
from loadgate.exactness.replay import CaseSender
from loadgate.exactness.sampling import distribution_result, pair_label, prefix_test

CANDIDATE_SEED_BASE = 1_000_000  # the candidate's samples use other seeds than the baseline's
REPLAY_SEED_BASE = 4242
SAMPLE_TOKENS = 3  # the first token from prefill, the second the first a verify step can give


def seed_claim(fp: dict[str, Any]) -> str:
    """What the engine says about per-request seeds, from its fingerprint (the report states it):
    the words of the engine family the fingerprint identifies."""
    eng = fp.get("engine") or {}
    family = identify(eng)
    if family is not None:
        return family.seeds(eng)
    return "unknown whether the engine takes per-request seeds (tested as if it did)"


def short_cases(corpus: Corpus, kind: str | None = None) -> list[Case]:
    return [c for c in corpus.cases if "long" not in c.tags and (kind is None or c.kind == kind)]


def _output(d: Decoded) -> tuple[Any, ...]:
    return tuple(d.output_ids) if d.output_ids is not None else (d.text,)


async def seeded_replay(sender: CaseSender, corpus: Corpus, cfg: SamplingContract, tag: str,
                        claim: str) -> dict[str, Any]:
    """The seeded-replay contract: each case twice with one seed (see the module docstring)."""
    cases = short_cases(corpus)[:cfg.replay_cases]
    outs: list[list[Decoded]] = [[] for _ in cases]
    for rep in range(cfg.replays):  # round by round: a case's sends are apart in time, as replays are
        for k, case in enumerate(cases):
            sampling = dataclasses.replace(sender.sampling, temperature=cfg.temperature, seed=REPLAY_SEED_BASE + k)
            outs[k].append(await sender.decoded(case, f"{tag}-seeded-{rep}-{k}", sampling=sampling))
    lost = [c.id for c, sends in zip(cases, outs, strict=True) if any(d.error is not None for d in sends)]
    differ = []
    for c, sends in zip(cases, outs, strict=True):
        if c.id in lost:
            continue
        first = _output(sends[0])
        others = [_output(d) for d in sends[1:] if _output(d) != first]
        if others:
            differ.append({"case": c.id, "first_divergence": min(first_difference(first, o) or 0 for o in others),
                           "differing_sends": len(others), "versions": len({first, *others})})
    return {"passed": not differ and not lost and bool(cases), "temperature": cfg.temperature, "cases": len(cases),
            "replays": cfg.replays, "differ": differ, "failed_requests": lost, "engine_seeds": claim,
            "seeds": [REPLAY_SEED_BASE, REPLAY_SEED_BASE + len(cases) - 1] if cases else []}


def sampling_params(sender: CaseSender, cfg: SamplingContract) -> dict[str, Any]:
    """Every sampling parameter the samples are drawn with (the seed aside): baseline and candidate
    must agree on them, or their distributions differ for that reason alone."""
    d = dataclasses.asdict(dataclasses.replace(sender.sampling, temperature=cfg.temperature))
    d.pop("seed")
    return {**d, "tokens": SAMPLE_TOKENS}


async def draw(sender: CaseSender, case: Case, cfg: SamplingContract, seed_base: int, tag: str,
               n: int | None = None) -> tuple[list[str], list[bool], int]:
    """`n` (default `cfg.samples`) seeded samples of `case`: (their category labels, whether each
    request showed draft activity, how many requests failed or gave no token ids)."""
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(i: int) -> Decoded:
        async with sem:
            sampling = dataclasses.replace(sender.sampling, temperature=cfg.temperature, seed=seed_base + i)
            return await sender.decoded(case, f"{tag}-{i}", sampling=sampling, max_tokens=SAMPLE_TOKENS,
                               logprobs=None, stop=(), ignore_eos=True)

    got = await asyncio.gather(*(one(i) for i in range(cfg.samples if n is None else n)))
    ok = [d for d in got if d.error is None and d.output_ids is not None]  # categories are token ids
    labels = [pair_label(d.output_ids or ()) for d in ok]
    drafted = [bool(d.spec is not None and (d.spec.draft_tokens or 0) > 0) for d in ok]
    return labels, drafted, len(got) - len(ok)


async def baseline_samples(sender: CaseSender, corpus: Corpus, cfg: SamplingContract, tag: str) -> dict[str, Any]:
    """The baseline's side of the distribution test, as the baseline file keeps it."""
    out: dict[str, Any] = {"temperature": cfg.temperature, "seed_base": 0, "tokens": SAMPLE_TOKENS,
                           "params": sampling_params(sender, cfg), "samples": cfg.samples, "prefixes": {}}
    cases = short_cases(corpus, "completion")[:cfg.prefixes]
    if not cases:
        raise UsageError("exactness.sampling.distribution_preserving: the corpus has no short completion case to "
                         "sample at (its prefixes)")
    for case in cases:
        labels, _, failed = await draw(sender, case, cfg, 0, f"{tag}-{case.id}")
        if failed:  # a baseline must be complete (as its greedy cases must)
            raise UsageError(f"baseline not written: {failed} of {cfg.samples} sample requests at {case.id} failed "
                             "or gave no token ids")
        out["prefixes"][case.id] = {"labels": labels}
    return out


async def distribution_preserving(sender: CaseSender, corpus: Corpus, cfg: SamplingContract,
                                  base: dict[str, Any] | None, tag: str) -> dict[str, Any]:
    """The distribution-preserving contract against the baseline's stored samples."""
    def refused(reason: str) -> dict[str, Any]:
        return {"passed": False, "established": False, "reason": reason}

    if not base or not base.get("prefixes"):
        return refused("the baseline holds no samples: capture it again (`loadgate baseline`) with this profile's "
                       "exactness.sampling.distribution_preserving")
    want = sampling_params(sender, cfg)
    if base.get("params", {"temperature": base.get("temperature"), **{k: v for k, v in want.items()
                                                                       if k != "temperature"}}) != want:
        return refused(f"the baseline's samples were drawn with other sampling parameters ({base.get('params')}) "
                       f"than this profile's ({want}): capture it again")
    cases = [c for c in short_cases(corpus, "completion") if c.id in base["prefixes"]][:cfg.prefixes]
    if not cases:
        return refused("none of the baseline's sampled prefixes is a short completion case of this corpus")
    level = cfg.alpha / len(cases)  # Holm's strictest level, for the power statement
    tests, failed = [], 0
    for case in cases:
        stored = base["prefixes"][case.id]
        if not stored.get("labels"):
            return refused(f"the baseline's samples at {case.id} are incomplete: capture it again")
        labels, drafted, lost = await draw(sender, case, cfg, CANDIDATE_SEED_BASE, f"{tag}-{case.id}",
                                           n=len(stored["labels"]))
        failed += lost
        share = sum(drafted) / len(drafted) if drafted else None
        tests.append(prefix_test(case.id, stored["labels"], labels, level, share))
    out = distribution_result(tests, cfg.alpha)
    untestable = [t.case for t in tests if t.df == 0]
    out.update({"temperature": cfg.temperature, "samples": len(base["prefixes"][cases[0].id]["labels"]),
                "failed_requests": failed, "established": failed == 0 and not untestable,
                "sampling": "many seeded requests of 3 tokens; category = the first two sampled token ids"})
    if failed:
        out["reason"] = f"{failed} sample request(s) failed or gave no token ids"
    elif untestable:
        out["reason"] = (f"at {', '.join(untestable)} the samples fell into fewer than 2 categories after pooling: "
                         "nothing can be told apart there; raise exactness.sampling.samples")
    return out
