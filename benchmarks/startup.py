"""Startup cost: how long `loadgate --help` takes, and how long after `loadgate run` starts the
quickstart's first request reaches its engine.

Per round, interleaved (so drift on a busy machine hits each figure alike):
  python -c pass            the interpreter alone, for scale
  loadgate --help           the command line: every command declared, no stage imported
  first request             `loadgate run` on profiles/quickstart.yaml (its engine, check and load;
                            fewer measured requests, since only the start is timed): from just before
                            the process is started to the embedded simulator's arrival stamp of the
                            first request of any route but /health (the fingerprint's GET /v1/models:
                            LOADGATE_SIM_TRUTH_LOG's `.first` file; both are perf_counter_ns, one
                            monotonic clock for every process here). That span holds the parent's
                            imports and the simulator's start in its own process, side by side.
  first generation          the same run's first generation request at any simulator (the check's
                            first case; the quickstart's reference baseline is captured first, by a
                            second simulator with the reference settings).
Prints each figure's median, minimum and maximum over the rounds. loadgate's modules are compiled to
bytecode first (`compileall`), as a normal install or a first import leaves them: an environment
with PYTHONDONTWRITEBYTECODE set (this sandbox) would otherwise compile them on every start.

    python benchmarks/startup.py                 # 20 rounds of --help, 10 of the first request
    python benchmarks/startup.py --help-runs 20 --run-runs 5
    python benchmarks/startup.py --against /tmp/old-checkout   # also time another checkout, interleaved
                                                               # (both as `python -m loadgate`)
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).parent / "loadgate"  # the command the README installs, where it is
LOADGATE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "loadgate"]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - t


def checkout_cmd(root: Path) -> tuple[list[str], dict[str, str]]:
    """`python -m loadgate` importing the package of that checkout (PYTHONPATH comes before the
    editable install's finder)."""
    return [sys.executable, "-m", "loadgate"], {**os.environ, "PYTHONPATH": str(root)}


def first_request(tmp: Path, k: int, cmd: list[str] | None = None,
                  env0: dict[str, str] | None = None) -> tuple[float, float]:
    """Seconds from starting `loadgate run` on the quickstart to its first request of any route,
    and to its first generation request."""
    doc = yaml.safe_load((ROOT / "profiles" / "quickstart.yaml").read_text())
    doc["workload"]["requests"] = 16
    doc["output"] = {"dir": str(tmp / "out"), "run_id": f"r{k}"}
    doc["exactness"]["corpus"] = str(ROOT / "workloads" / "reference.jsonl")
    p = tmp / f"q{k}.yaml"
    p.write_text(yaml.safe_dump(doc))
    env = {**(env0 or os.environ), "LOADGATE_SIM_TRUTH_LOG": str(tmp / f"truth{k}-{{pid}}.jsonl")}
    t0 = time.perf_counter_ns()
    subprocess.run([*(cmd or LOADGATE), "run", "-q", str(p)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   env=env)  # its exit code is not the point here (the truth log is)
    firsts = [int(p.read_text()) for p in tmp.glob(f"truth{k}-*.jsonl.first") if p.read_text() != "None"]
    arrivals = [json.loads(line)["arrival_ns"] for p in tmp.glob(f"truth{k}-*.jsonl")
                for line in p.read_text().splitlines()]
    return (min(firsts) - t0) / 1e9, (min(arrivals) - t0) / 1e9


def show(name: str, xs: list[float]) -> None:
    print(f"  {name:<16} median {statistics.median(xs):.3f} s  min {min(xs):.3f}  max {max(xs):.3f}  ({len(xs)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--help-runs", type=int, default=20)
    ap.add_argument("--run-runs", type=int, default=10)
    ap.add_argument("--against", type=Path, help="another checkout whose first request is timed too, interleaved")
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    compileall.compile_dir(str(ROOT / "loadgate"), quiet=1)
    bare, helps, firsts, gens = [], [], [], []
    mine: list[float] = []
    other: list[float] = []
    if a.against:
        compileall.compile_dir(str(a.against / "loadgate"), quiet=1)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        timed([*LOADGATE, "--help"])  # warm the file cache and bytecode once
        for k in range(max(a.help_runs, a.run_runs)):
            if k < a.help_runs:
                bare.append(timed([sys.executable, "-c", "pass"]))
                helps.append(timed([*LOADGATE, "--help"]))
            if k < a.run_runs:
                first, gen = first_request(tmp, k)
                firsts.append(first)
                gens.append(gen)
                if a.against:  # the two checkouts as `python -m loadgate`, in alternating order
                    pair = [(ROOT, mine), (a.against, other)]
                    for root, out in pair if k % 2 else pair[::-1]:
                        out.append(first_request(tmp, 1000 + 2 * k + (out is other), *checkout_cmd(root))[0])
    show("python -c pass", bare)
    show("loadgate --help", helps)
    show("first request", firsts)
    show("first generation", gens)
    if a.against:
        print(f"interleaved, both as `python -m loadgate`: first request, this checkout vs {a.against}")
        show("this checkout", mine)
        show("other checkout", other)
        ratios = [x / y for x, y in zip(mine, other, strict=True)]
        print(f"  ratio this/other: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
