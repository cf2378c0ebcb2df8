"""Memory stays flat over a long run: 100,000 requests through loadgate's real run path (`loadgate.run`, unverified).

The simulator runs in a child process (fixed 1 ms steps, 4 output tokens per request, 16-token
prompts); loadgate runs here at concurrency 64. A thread samples this process's resident set
size every 0.25 s and the number of records written so far, so growth can be read against
progress. Records stream to disk as requests finish; the plan is generated lazily per request.

    python benchmarks/memory_flat.py [--requests 100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loadgate  # noqa: E402
from loadgate.config.profile import Distribution, Load, Output, Profile, Target, Workload  # noqa: E402
from loadgate.config.simconfig import SimConfig  # noqa: E402
from loadgate.sim.process import SimProcess  # noqa: E402


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    proc = psutil.Process()
    samples: list[tuple[float, int, int]] = []  # (seconds, rss bytes, records written)
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        def sampler() -> None:
            t0 = time.perf_counter()
            while not stop.is_set():
                runs = list(Path(tmp).glob("*/records.jsonl"))
                n = count_lines(runs[0]) if runs else 0
                samples.append((time.perf_counter() - t0, proc.memory_info().rss, n))
                stop.wait(0.25)

        cfg = SimConfig(seed=1, fixed_step_us=1000, max_num_seqs=256, near_tie_rate=0.0)
        with SimProcess(cfg) as sim:
            prof = Profile(name="memory", seed=1, target=Target(endpoint=sim.url),
                           workload=Workload(requests=a.requests, input_len=Distribution(dist="fixed", value=16),
                                             output_len=Distribution(dist="fixed", value=4)),
                           load=Load(concurrency=a.concurrency), output=Output(dir=tmp))
            th = threading.Thread(target=sampler, daemon=True)
            th.start()
            t = time.perf_counter()
            run_dir = loadgate.run(prof, unverified=True).run_dir
            wall = time.perf_counter() - t
            stop.set()
            th.join()
            written = count_lines(run_dir / "records.jsonl")
            size = (run_dir / "records.jsonl").stat().st_size
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{written:,} records written in {wall:.1f} s ({written / wall:,.0f} requests/s), "
          f"records.jsonl {size / 1e6:.1f} MB")
    marks = [0.1, 0.25, 0.5, 0.75, 1.0]
    print("RSS of the loadgate process against progress:")
    for m in marks:
        target = m * a.requests
        s = next((x for x in samples if x[2] >= target), samples[-1])
        print(f"  {s[2]:>7,} records ({m:>4.0%}): RSS {s[1] / 2**20:7.1f} MiB at {s[0]:6.1f} s")
    after_10 = [x[1] for x in samples if x[2] >= 0.1 * a.requests]
    if after_10:
        print(f"RSS from 10% to the end: min {min(after_10) / 2**20:.1f} MiB, max {max(after_10) / 2**20:.1f} MiB, "
              f"growth {(after_10[-1] - after_10[0]) / 2**20:+.1f} MiB")


if __name__ == "__main__":
    main()
