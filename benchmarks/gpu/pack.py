"""Pack a GPU validation run into one archive laid out as docs/validation/ is, so that unpacking it
there (`tar -xzf validation.tar.gz -C docs/validation`) puts every file in its place:

  results.json                 validate.py's summary (exit codes, verdicts, comparisons, times)
  <config>-<contract>.txt      loadgate's printed report of each command
  <config>-<contract>/         the JSON files of that run folder (exactness, verdict, comparison, ab,
                               and each A/B run's summary, verdict, health and records under A1 … B5/)
  models.json  gpu.txt  pipeline.log  validate.log

No models, binaries or server logs: what comes back from the machine is limited in size.

    python3 benchmarks/gpu/pack.py --val /tmp/gv/val --models /tmp/gv/models --work /tmp/gv --out OUT.tar.gz
"""

from __future__ import annotations

import argparse
import tarfile
from pathlib import Path

RUN_FILES = ("exactness.json", "verdict.json", "comparison.json", "ab.json", "summary.json")
AB_RUN_FILES = ("summary.json", "verdict.json", "records.jsonl", "health.json")


def members(val: Path, models: Path, work: Path) -> list[tuple[Path, str]]:
    """(file on disk, its name in the archive)."""
    out: list[tuple[Path, str]] = []
    for p, name in ((val / "results.json", "results.json"), (models / "models.json", "models.json"),
                    (work / "gpu.txt", "gpu.txt"), (work / "pipeline.log", "pipeline.log"),
                    (work / "validate.log", "validate.log")):
        if p.exists():
            out.append((p, name))
    for log in sorted((val / "logs").glob("*.txt")):
        out.append((log, log.name))
    for run in sorted(p for p in (val / "work" / "runs").glob("*") if p.is_dir()):
        for f in RUN_FILES:
            if (run / f).exists():
                out.append((run / f, f"{run.name}/{f}"))
        for sub in sorted(p for p in run.glob("[AB][0-9]*") if p.is_dir()):
            for f in AB_RUN_FILES:
                if (sub / f).exists():
                    out.append((sub / f, f"{run.name}/{sub.name}/{f}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--val", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    files = members(a.val, a.models, a.work)
    with tarfile.open(a.out, "w:gz") as tar:
        for path, name in files:
            tar.add(path, arcname=name)
    print(f"{a.out}: {len(files)} files, {a.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
