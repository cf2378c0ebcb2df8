"""The request plan: profile + seed + token pool -> the exact list of requests. Pure: no I/O.

Same profile, seed and pool give the same list, byte for byte. Measured requests use the
profile's seed; warmup requests use a derived seed, so changing the warmup count never changes
the measured requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgate.profile import Load, Profile, Workload
from loadgate.workload.lengths import draw_lengths

_WARMUP_SEED_SALT = 0x5EED_0001


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    i: int
    warmup: bool
    prompt_ids: tuple[int, ...]
    output_len: int
    intended_offset_ns: int | None = None  # open loop: offset from the measured phase's start


def _prompts(w: Workload, n: int, rng: np.random.Generator, pool: np.ndarray,
             base_dir: Path) -> list[tuple[tuple[int, ...], int]]:
    isl = draw_lengths(w.input_len, n, rng, base_dir)
    osl = draw_lengths(w.output_len, n, rng, base_dir)
    prefixes: list[np.ndarray] = []
    if w.shared_prefix is not None:
        prefixes = [rng.choice(pool, size=w.shared_prefix.prefix_len) for _ in range(w.shared_prefix.groups)]
    out = []
    for k in range(n):
        length = int(isl[k])
        if prefixes:
            pre = prefixes[k % len(prefixes)][:length]
            ids = np.concatenate([pre, rng.choice(pool, size=length - len(pre))])
        else:
            ids = rng.choice(pool, size=length)
        out.append((tuple(int(x) for x in ids), int(osl[k])))
    return out


def arrival_offsets_ns(load: Load, n: int, rng: np.random.Generator) -> list[int]:
    """Intended start offsets for an open loop at `load.rate` requests/s.

    poisson: exponential gaps with mean 1/rate; gamma: gamma gaps with shape `burstiness` and
    mean 1/rate (shape < 1 is burstier than Poisson); constant: gaps of exactly 1/rate.
    The first request starts at offset 0.
    """
    assert load.rate is not None
    mean = 1.0 / load.rate
    if load.arrival == "constant":
        gaps = np.full(n, mean)
    elif load.arrival == "gamma":
        gaps = rng.gamma(load.burstiness, mean / load.burstiness, size=n)
    else:
        gaps = rng.exponential(mean, size=n)
    gaps[0] = 0.0
    return [int(x) for x in np.rint(np.cumsum(gaps) * 1e9)]


def build_plan(profile: Profile, token_pool: Sequence[int]) -> list[PlannedRequest]:
    """Warmup requests first (i = 0..W-1), then the measured ones."""
    pool = np.asarray(token_pool, dtype=np.int64)
    if pool.size == 0:
        raise ValueError("empty token pool")
    base_dir = Path(profile.path).parent if profile.path else Path.cwd()
    w, load = profile.workload, profile.load
    rng = np.random.default_rng(profile.seed)
    measured = _prompts(w, w.requests, rng, pool, base_dir)
    offsets: list[int | None] = [None] * w.requests
    if load.rate is not None:
        offsets = list(arrival_offsets_ns(load, w.requests, np.random.default_rng([profile.seed, 1])))
    wrng = np.random.default_rng([profile.seed, _WARMUP_SEED_SALT])
    warm = _prompts(w, load.warmup_requests, wrng, pool, base_dir)
    plan = [PlannedRequest(k, True, ids, osl) for k, (ids, osl) in enumerate(warm)]
    base = len(plan)
    plan += [PlannedRequest(base + k, False, ids, osl, offsets[k]) for k, (ids, osl) in enumerate(measured)]
    return plan
