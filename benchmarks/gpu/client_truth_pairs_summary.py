"""The medians of a `client_truth_pairs.sh` file: per tree, CPU per 1,000 events (window, decoding),
the stamp bound's p99 (median and max) and INVALID runs; per tree against a reference tree, the
median of the per-round ratios (each round runs every tree once, in rotated order).

    python benchmarks/gpu/client_truth_pairs_summary.py pairs.txt OLD
"""

from __future__ import annotations

import re
import statistics
import sys

ROUND = re.compile(r"== (\S+) (\d+)")
# (a run that kept no chunk prints `n/a` for the bound: counted as a run, left out of the bound's figures)
LINE = re.compile(r"stamp-uncertainty p99 (n/a|[0-9.]+) ms.*CPU ([0-9.]+) s/1000 ev \(window ([0-9.]+) \+ decoding "
                  r"([0-9.]+)\)\s+verdict (\w+)")


Run = tuple[float | None, float, float, float, bool]


def read(path: str) -> dict[str, dict[int, Run]]:
    """tree -> round -> (bound p99 ms or None, CPU, window, decoding, INVALID)."""
    runs: dict[str, dict[int, Run]] = {}
    cur: tuple[str, int] | None = None
    with open(path) as f:
        for line in f:
            if m := ROUND.match(line):
                cur = (m.group(1), int(m.group(2)))
            elif (m := LINE.search(line)) and cur is not None:
                b, cpu, win, dec = m.groups()[:4]
                runs.setdefault(cur[0], {})[cur[1]] = (None if b == "n/a" else float(b), float(cpu), float(win),
                                                       float(dec), m.group(5) == "invalid")
    return runs


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        runs, ref = read(sys.argv[1]), sys.argv[2]
    except OSError as e:
        sys.exit(f"{sys.argv[1]}: cannot read: {e.strerror or e}")
    if ref not in runs:
        sys.exit(f"{sys.argv[1]}: no runs of {ref} (trees: {', '.join(runs) or 'none'})")
    med = statistics.median
    for name, r in runs.items():
        v = list(r.values())
        b = [x[0] for x in v if x[0] is not None]
        bound = f"median {med(b):.3f} ms, max {max(b):.3f} ms" if b else "n/a"
        print(f"{name:8s} {len(v)} runs  CPU {med(x[1] for x in v):.4f}  window {med(x[2] for x in v):.4f}  "
              f"decoding {med(x[3] for x in v):.4f}  stamp bound p99 {bound}"
              f"{f' ({len(v) - len(b)} runs without one)' if len(b) < len(v) else ''}  INVALID {sum(x[4] for x in v)} of {len(v)}")
    for name, r in runs.items():
        if name == ref:
            continue
        common = sorted(set(r) & set(runs[ref]))
        for k, label in ((1, "CPU"), (2, "window"), (3, "decoding")):
            q = [r[i][k] / runs[ref][i][k] for i in common]
            print(f"  {name}/{ref} {label:8s} median per-round ratio {med(q):.3f}  "
                  f"({', '.join(f'{x:.2f}' for x in q)})")


if __name__ == "__main__":
    main()
