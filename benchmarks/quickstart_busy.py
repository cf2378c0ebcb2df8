"""The quickstart on a busy machine: `loadgate run profiles/quickstart.yaml` N times in a row, with
the profile's default validity budget, while a CPU burner (`python3 -c 'while True: pass'`) runs
beside it. Prints each run's exit code, the stamp bound loadgate stated, its loop-lag p99 and any
warnings, then how many passed.

    python benchmarks/quickstart_busy.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgate.jsonutil import load_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--no-burner", action="store_true")
    a = ap.parse_args()
    burner = None if a.no_burner else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"burner: {'none' if burner is None else 'python3 -c while True: pass'}")
    passed = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            doc = yaml.safe_load((ROOT / "profiles" / "quickstart.yaml").read_text())
            for k in range(a.runs):
                doc["output"] = {"dir": tmp, "run_id": f"q{k}"}
                p = Path(tmp) / f"q{k}.yaml"
                p.write_text(yaml.safe_dump(doc))
                r = subprocess.run([sys.executable, "-m", "loadgate", "run", "-q", str(p)], cwd=ROOT,
                                   capture_output=True, text=True)
                d = Path(tmp) / f"q{k}"
                line = f"run {k + 1:>2}: exit {r.returncode}"
                if (d / "summary.json").exists():
                    for lv, s in load_json(d / "summary.json")["levels"].items():
                        h = s["client_health"]
                        sb = h.get("stamp_bound") or {}
                        line += (f"  level {lv}: stamps within {sb.get('stated_p99_ms', float('nan')):.3f} ms at p99, "
                                 f"{sb.get('shared_read_fraction', 0):.2%} of chunks shared a read; loop lag p99 "
                                 f"{h['loop_lag_ms']['p99'] or 0:.1f} ms, CPU {h['client_cpu_fraction'] or 0:.0%}"
                                 + (f"; warnings: {'; '.join(h['warnings'])}" if h.get("warnings") else ""))
                if r.returncode != 0:
                    line += f"\n  {r.stderr.strip()[-400:]}"
                print(line, flush=True)
                passed += r.returncode == 0
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    print(f"{passed} of {a.runs} runs passed (exit 0)")


if __name__ == "__main__":
    main()
