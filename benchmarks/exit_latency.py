"""How long `loadgate run` takes to exit after the last response of its measured phase.

The last response's end is read from the run's own records (`meta.json` t0_ns + the latest
`end_ns`, CLOCK_MONOTONIC, the same clock as this process's `perf_counter_ns`); the exit is when
`waitpid` returns here. The run folder is then checked complete (records, summary, verdict, no
temporary file left). Runs are interleaved when several commands are compared.

    python benchmarks/exit_latency.py                      # the quickstart, 5 runs, median
    python benchmarks/exit_latency.py --runs 5 --also-html # and the same with --html, interleaved
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgate.jsonutil import load_json  # noqa: E402
from loadgate.records import read_records  # noqa: E402


def one(profile: Path, out: Path, run_id: str, extra: list[str]) -> tuple[float, float]:
    """(seconds from the last response to the exit, whole command's seconds)."""
    doc = yaml.safe_load(profile.read_text())
    doc["output"] = {"dir": str(out), "run_id": run_id}
    p = out / f"{run_id}.yaml"
    p.write_text(yaml.safe_dump(doc))
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen([sys.executable, "-m", "loadgate", "run", "-q", *extra, str(p)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status = os.waitpid(proc.pid, 0)
    exited = time.perf_counter_ns()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    d = out / run_id
    assert proc.returncode == 0, (proc.returncode, err[-500:])
    for name in ("records.jsonl", "summary.json", "verdict.json", "meta.json"):
        assert (d / name).exists(), f"{name} missing at exit"
    left = [f.name for f in d.iterdir() if f.name.startswith(".")]
    assert not left, f"temporary files left: {left}"
    t0_ns = load_json(d / "meta.json")["t0_ns"]
    last = max(t0_ns + r.end_ns for r in read_records(d / "records.jsonl"))
    return (exited - last) / 1e9, (exited - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=str(ROOT / "profiles" / "quickstart.yaml"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--also-html", action="store_true", help="also time `loadgate run --html`, interleaved")
    a = ap.parse_args()
    variants = {"loadgate run": []} | ({"loadgate run --html": ["--html"]} if a.also_html else {})
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"profile {Path(a.profile).name}, {a.runs} runs each")
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.runs):
            for name, extra in variants.items():
                r = one(Path(a.profile), Path(tmp), f"{name.replace(' ', '_').replace('-', '')}{k}", extra)
                got[name].append(r)
                print(f"  {name:<22} run {k + 1}: exit {r[0] * 1000:7.1f} ms after the last response "
                      f"(command {r[1]:.2f} s)", flush=True)
    for name, rs in got.items():
        x = np.asarray([r[0] for r in rs]) * 1000
        print(f"{name:<22} exit after the last response: median {np.median(x):.1f} ms "
              f"(min {x.min():.1f}, max {x.max():.1f}; {len(x)} runs)")


if __name__ == "__main__":
    main()
