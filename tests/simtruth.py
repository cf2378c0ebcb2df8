"""Helpers for truth tests: run loadgate against a simulator child process and line up what the
client recorded with what the simulator says it sent (its ground-truth log)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import loadgate
from loadgate.config.profile import Distribution, Load, Output, Profile, Target, Workload
from loadgate.jsonutil import load_json
from loadgate.records import Record, read_records
from tests.profiles import LAX_BUDGETS


def profile_for(url: str, tmp: Path, *, requests: int, concurrency: int | None = None, rate: float | None = None,
                isl: int = 32, osl: int = 32, warmup: int = 0, api: str = "openai-completions", **load: Any) -> Profile:
    return Profile(
        name="truth", seed=7,
        target=Target(endpoint=url, api=api),
        workload=Workload(requests=requests, input_len=Distribution(dist="fixed", value=isl),
                          output_len=Distribution(dist="fixed", value=osl)),
        load=Load(concurrency=concurrency, rate=rate, warmup_requests=warmup, **load),
        health=LAX_BUDGETS, output=Output(dir=str(tmp)))


def run(profile: Profile) -> tuple[Path, list[Record], dict[str, Any]]:
    run_dir = loadgate.run(profile, unverified=True).run_dir
    return run_dir, list(read_records(run_dir / "records.jsonl", include_warmup=True)), load_json(run_dir / "meta.json")


def truth_records_like_loadgate(records: list[Record], truth: list[dict[str, Any]], meta: dict[str, Any],
                                run_tag_prefix: str, stamp: str = "send_ns") -> list[Record]:
    """For each successful measured record, a copy whose chunk times are the simulator's send times
    (relative to the client's start, same clock), so the same metric functions apply to both.
    `stamp`: which of the simulator's times (`send_ns`, `write_begin_ns`, `write_end_ns`)."""
    by_id = {t["request_id"]: t for t in truth}
    t0 = meta["t0_ns"]
    out = []
    for r in records:
        if r.warmup or r.error is not None:
            continue
        t = by_id[f"{run_tag_prefix}-{r.i}"]
        start_abs = t0 + r.start_ns
        chunks = [c for c in t["chunks"] if c["kind"] in ("tokens", "reasoning", "body") and c["n_tokens"] > 0]
        out.append(dataclasses.replace(r, chunk_ns=[c[stamp] - start_abs for c in chunks],
                                       chunk_tokens=[c["n_tokens"] for c in chunks], end_ns=t["end_ns"] - t0))
    return out
