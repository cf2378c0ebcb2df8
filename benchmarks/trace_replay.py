"""A timed Mooncake-style trace replayed against the simulator: how late loadgate starts each request
(the schedule lag), with the client's loop lag beside it, and the trace's own prefix sharing beside
the simulator's hit rate.

The trace, written here from a seed: `--requests` lines over `--span` seconds, arrivals a Poisson
process whose rate swings by +-60 % over 20 s (bursts), inputs log-uniform in 128..2048 tokens,
outputs uniform in 16..256, `hash_ids` in 512-token blocks:
  40 % open with one of 8 shared system prompts (1 block; the popular ones far more often),
  30 % continue an earlier request: its whole blocks first, then blocks of their own,
  30 % share nothing.
The simulator (its own process, prefix cache on in 16-token blocks, room for every block) decodes
a step in 10 ms with up to 512 sequences, speculation on (draft_model, k 4): about 0.5 s a request,
so its modelled capacity is several times the trace's mean rate. loadgate runs `loadgate run
--unverified` with `load.schedule: trace` in its own process (`--workers` of them), pinned apart.

    python benchmarks/trace_replay.py                                  # 10,000 requests, 60 s, x1
    python benchmarks/trace_replay.py --requests 1000 --workers 1      # a smaller run
    python benchmarks/trace_replay.py --sim-cpus 0-3 --client-cpus 4-11 --workers 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.client_truth import cpus  # noqa: E402
from loadgate.config.simconfig import SimConfig, SpeculativeConfig  # noqa: E402
from loadgate.jsonutil import load_json  # noqa: E402
from loadgate.sim.process import SimProcess  # noqa: E402

BLOCK = 512


def write_trace(path: Path, n: int, span_s: float, seed: int) -> dict[str, Any]:
    """The trace (see the module docstring); what it holds, as written."""
    rng = np.random.default_rng(seed)
    # a Poisson process of rate r(t) = mean * (1 + 0.6 sin(2 pi t / 20)), by thinning, cut to n arrivals
    mean = n / span_s
    times: list[float] = []
    t = 0.0
    while len(times) < n:
        t += rng.exponential(1 / (1.6 * mean))
        if rng.random() < (1 + 0.6 * math.sin(2 * math.pi * t / 20)) / 1.6:
            times.append(t)
    times_arr = np.asarray(times) * (span_s / times[-1])  # exactly the span
    popularity = 1 / np.arange(1, 9)
    popularity /= popularity.sum()
    next_id, kinds = 100, {"system": 0, "continued": 0, "own": 0}
    written: list[list[int]] = []
    with open(path, "w") as f:
        for i in range(n):
            length = int(np.exp(rng.uniform(np.log(128), np.log(2048))))
            blocks = -(-length // BLOCK)
            u = rng.random()
            head: list[int] = []
            if u < 0.4:
                head, kind = [int(rng.choice(8, p=popularity))], "system"
            elif u < 0.7 and written:
                prev = written[int(rng.integers(max(0, len(written) - 200), len(written)))]
                head, kind = prev[:blocks - 1], "continued"  # at least one block of its own
            else:
                kind = "own"
            kinds[kind] += 1
            own = list(range(next_id, next_id + blocks - len(head)))
            next_id += len(own)
            ids = (head + own)[:blocks]
            whole = length // BLOCK  # the blocks a later request may continue: whole ones
            written.append(ids[:whole])
            f.write(json.dumps({"timestamp": round(float(times_arr[i]) * 1000, 3), "input_length": length,
                                "output_length": int(rng.integers(16, 257)), "hash_ids": ids}) + "\n")
    return {"requests": n, "span_s": span_s, "mean_rate": n / span_s, "kinds": kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--span", type=float, default=60.0, help="seconds of trace time")
    ap.add_argument("--speed", type=float, default=1.0, help="load.trace_speed")
    ap.add_argument("--workers", type=int, default=1, help="load.workers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sim-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    a = ap.parse_args()
    sim_cpus, client_cpus = cpus(a.sim_cpus), cpus(a.client_cpus)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; simulator on "
          f"CPUs {sim_cpus}, loadgate on CPUs {client_cpus} with {a.workers} worker(s)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        wrote = write_trace(tmp_p / "trace.jsonl", a.requests, a.span, a.seed)
        k = wrote["kinds"]
        print(f"trace: {a.requests:,} requests over {a.span:g} s (mean {wrote['mean_rate']:.1f} req/s, +-60 % swings "
              f"over 20 s), inputs 128-2048 tokens, outputs 16-256; {k['system']:,} open with a shared system "
              f"prompt, {k['continued']:,} continue an earlier request, {k['own']:,} share nothing")
        cfg = SimConfig(max_num_seqs=512, decode_step_us=10_000.0, decode_us_per_seq=0.0, prefill_us_per_token=0.05,
                        prefix_cache_block=16, speculative=SpeculativeConfig(method="draft_model", k=4))
        with SimProcess(cfg, startup_timeout=60) as sim:
            os.sched_setaffinity(sim._proc.pid, set(sim_cpus))  # type: ignore[union-attr]
            profile = {"name": "trace", "target": {"endpoint": sim.url, "api": "openai-completions"},
                       "workload": {"dataset": {"path": str(tmp_p / "trace.jsonl"), "format": "mooncake"}},
                       "load": {"schedule": "trace", "trace_speed": a.speed, "workers": a.workers},
                       "output": {"dir": str(tmp_p / "out"), "run_id": "r"}}
            (tmp_p / "p.yaml").write_text(yaml.safe_dump(profile))
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "loadgate", "run", "-q", "--unverified", str(tmp_p / "p.yaml")],
                                  cwd=ROOT, capture_output=True, text=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, set(client_cpus)))
            wall = time.perf_counter() - t0
        run = tmp_p / "out" / "r"
        if not (run / "summary.json").exists():
            print(proc.stderr[-2000:])
            raise SystemExit(f"loadgate exited {proc.returncode} without a summary")
        s = load_json(run / "summary.json")
        level = next(iter(s["levels"].values()))
        h = level["client_health"]
        sl, ll = h.get("schedule_lag_ms") or {}, h.get("loop_lag_ms") or {}
        sharing = (s.get("trace") or {}).get("sharing") or {}
        pc = level.get("prefix_cache") or {}
        t = level["throughput"]
        print(f"loadgate exit {proc.returncode} ({load_json(run / 'verdict.json')['outcome']}) after {wall:.1f} s; "
              f"{level['requests']:,} requests, {level['failed']} failed; {t['request_throughput']:.1f} req/s, "
              f"{t['output_token_throughput']:,.0f} output tok/s over {t['window_s']:.1f} s")
        print(f"schedule lag (the request's task running - its timestamp): p50 {sl.get('p50', float('nan')):.3f} ms, p99 "
              f"{sl.get('p99', float('nan')):.3f} ms, max {sl.get('max', float('nan')):.3f} ms")
        print(f"loop lag: p50 {ll.get('p50') or float('nan'):.3f} ms, p99 {ll.get('p99') or float('nan'):.3f} ms, "
              f"max {ll.get('max') or float('nan'):.3f} ms; client CPU {h.get('cpu_s') or float('nan'):.1f} s")
        print(f"the trace's own prefix sharing {sharing.get('ratio', float('nan')):.2%} of prompt tokens; the "
              f"simulator's hit rate {pc.get('hit_rate') or float('nan'):.2%} of {int(pc.get('queries') or 0):,} prompt tokens")
        stamps = (h.get("stamp_bound") or {}).get("stated_p99_ms")
        print(f"stamp bound p99 {stamps if stamps is not None else float('nan'):.3f} ms; invalid: {level['invalid'] or 'no'}")


if __name__ == "__main__":
    main()
