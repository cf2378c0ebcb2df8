"""False alarms and detection power of the A/B decision, on the simulator, over many seeds.

For each seed: an A/A comparison (baseline and candidate are the same simulated engine
configuration, each its own process) and an A/B comparison where the candidate is made 10 %
slower (every step cost x 1.1), each with 5 interleaved pairs of runs of 120 requests at
concurrency 8 through loadgate's real A/B path (exactness checks skipped: they are not what is
measured here). Prints the verdict counts and the rates.

    python benchmarks/ab_false_alarm.py [--seeds 20] [--pairs 5]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loadgate  # noqa: E402
from loadgate.config.profile import AB, Distribution, Load, Output, Profile, Target, Workload  # noqa: E402
from loadgate.config.simconfig import SimConfig  # noqa: E402

BASE = {"decode_step_us": 2000.0, "decode_us_per_seq": 60.0, "prefill_us_per_token": 4.0}


def verdict(seed: int, slowdown: float, pairs: int, tmp: Path) -> str:
    base = SimConfig(seed=seed, **BASE)
    cand = SimConfig(seed=seed, **{k: v * slowdown for k, v in BASE.items()})
    prof = Profile(name=f"s{seed}-{slowdown}", seed=seed, target=Target(endpoint="embedded", sim=cand),
                   workload=Workload(requests=120, input_len=Distribution(dist="uniform", min=32, max=96),
                                     output_len=Distribution(dist="fixed", value=48)),
                   load=Load(concurrency=8, warmup_requests=4),
                   ab=AB(baseline=Target(endpoint="embedded", sim=base), pairs=pairs, order_seed=seed),
                   output=Output(dir=str(tmp)))
    decision = loadgate.run(prof, unverified=True).judgement.verdict.ab_decision
    assert decision is not None
    return decision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=5)
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{a.seeds} seeds, {a.pairs} pairs of runs each, decided on {', '.join(AB().decide_on)} "
          f"(practical change {AB().practical:.0%}, alpha {AB().alpha})")
    results: dict[str, collections.Counter[str]] = {"A/A": collections.Counter(), "10% slower": collections.Counter()}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(a.seeds):
            aa = verdict(seed, 1.0, a.pairs, Path(tmp))
            ab_ = verdict(seed, 1.1, a.pairs, Path(tmp))
            results["A/A"][aa] += 1
            results["10% slower"][ab_] += 1
            print(f"  seed {seed:>2}: A/A {aa:<13} 10% slower {ab_}", flush=True)
    aa, slow = results["A/A"], results["10% slower"]
    print(f"\nA/A: {dict(aa)}; false alarms (improved or regressed): "
          f"{(aa['improved'] + aa['regressed']) / a.seeds:.0%} of {a.seeds} seeds; 'no change' in "
          f"{aa['no change'] / a.seeds:.0%}")
    print(f"10% slower: {dict(slow)}; reported regressed in {slow['regressed'] / a.seeds:.0%} of {a.seeds} seeds")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
