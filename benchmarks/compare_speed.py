"""How long the exactness comparison takes for 1,000,000 token positions (ids and logprobs).

Builds 4,000 baseline/candidate sequence pairs of 250 tokens each (with logprobs and top-2 lists),
where 1 in 10 candidates diverges somewhere and 1 in 10 has logprobs a few ULPs off, then times
`compare` + `verdict` over all of them. Prints the median of 5 repetitions.

    python benchmarks/compare_speed.py [--sequences 4000] [--length 250] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from loadgate.exactness.compare import SeqOutput, compare
from loadgate.exactness.contract import verdict


def make(n_seq: int, length: int, seed: int = 0) -> list[tuple[SeqOutput, SeqOutput]]:
    rng = np.random.default_rng(seed)
    pairs = []
    for k in range(n_seq):
        ids = rng.integers(0, 32000, size=length)
        lps = rng.uniform(-8, 0, size=length).astype(np.float32).astype(np.float64)
        top = tuple(((int(i), float(v)), (int(i) + 1, float(v) - 0.5)) for i, v in zip(ids, lps, strict=True))
        base = SeqOutput(tuple(ids.tolist()), tuple(lps.tolist()), top, "length")
        cids, clps = ids.copy(), lps.copy()
        if k % 10 == 1:
            cids[rng.integers(0, length):] += 1
        if k % 10 == 2:
            clps = np.nextafter(clps.astype(np.float32), np.float32(0)).astype(np.float64)
        pairs.append((base, SeqOutput(tuple(cids.tolist()), tuple(clps.tolist()), None, "length")))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=4000)
    ap.add_argument("--length", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    pairs = make(a.sequences, a.length)
    times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        verdicts = [verdict(compare(b, c), 0.3) for b, c in pairs]
        times.append(time.perf_counter() - t)
    positions = a.sequences * a.length
    counts = {v: verdicts.count(v) for v in sorted(set(verdicts))}
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    print(f"positions compared: {positions:,} ({a.sequences:,} sequences x {a.length})")
    print(f"verdicts: {counts}")
    print(f"time: median {statistics.median(times):.3f} s, min {min(times):.3f} s over {a.repeat} runs "
          f"({positions / statistics.median(times) / 1e6:.2f} M positions/s)")


if __name__ == "__main__":
    main()
