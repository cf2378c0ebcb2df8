"""loadgate, unchanged, against llama-server on a GPU: the configurations of the validation plan.

Starts each configuration of `llama-server` (built with CUDA), runs loadgate's own commands
against it, and keeps their reports:
  baseline      f16 target, 1 slot, one request at a time -> `loadgate baseline`
  restart       the baseline configuration, server restarted   -> check solo (bit-exact)
  slots8        f16, 8 slots, 8 requests in flight             -> check concurrent:8
  spec-solo     draft-model speculation, 1 slot, solo          -> check solo
  spec-slots8   draft-model speculation, 8 slots, 8 in flight  -> check concurrent:8
Each check uses the `near-tie-tolerant` contract (gap 0.3 nats) and the speculative ones are also
checked under `bit-exact`, which loadgate must refuse on the positions where llama-server returned
placeholder logprobs. Then the performance phase (`loadgate run` with an `ab` section, the
baseline configuration as A) runs for every configuration whose check passed.

    python3 benchmarks/gpu/validate.py --server BUILD/bin/llama-server --models MODELS --out OUT
    (--ngl 0 --quick for a dry run on the CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "engines"))
from common import Server, free_port  # noqa: E402

from loadgate.load.workload.text import filler_text  # noqa: E402


def corpus(path: Path, n: int, max_tokens: int) -> Path:
    """n prompts (prose of varying length and code-like text), max_tokens each, as a corpus file."""
    cases = []
    for k in range(n):
        if k % 3 == 2:
            prompt = f"def step_{k}(items, limit):\n    total = 0\n    for i, x in enumerate(items):\n"
        else:
            prompt = filler_text(40 + 12 * k, seed=1000 + k) + f"\n\nPart {k}:"
        cases.append({"id": f"gpu-{k:02d}", "kind": "completion", "prompt": prompt, "max_tokens": max_tokens,
                      "tags": ["short"]})
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def server_argv(binary: Path, models: Path, port: int, *, slots: int, spec: bool, ngl: int, dtype: str) -> list[str]:
    g = models / "gguf"
    argv = [str(binary), "-m", str(g / f"target-{dtype}.gguf"), "--host", "127.0.0.1", "--port", str(port),
            "-np", str(slots), "-c", str(4096 * slots), "--metrics", "--alias", "tiny", "--no-webui"]
    if ngl:
        argv += ["-ngl", str(ngl)]
    if spec:
        argv += ["-md", str(g / f"draft-{dtype}.gguf"), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
        if ngl:
            argv += ["-ngld", str(ngl)]
    return argv


def declared(name: str, slots: int, spec: bool, dtype: str) -> dict[str, str]:
    d = {"engine": "llama.cpp llama-server (CUDA)", "config": name, "dtype": dtype, "slots": str(slots),
         "speculative": "draft-simple" if spec else "none"}
    if spec:
        d["spec_draft_n_max"] = "8"
    return d


def stamps(ab_dir: Path) -> dict[str, Any]:
    """Each A/B side's stamp bound from its runs' summaries: the worst stated p99 and the share of
    chunks that shared a read (min and max over the runs)."""
    out: dict[str, Any] = {}
    for side in ("A", "B"):
        sbs = []
        for d in sorted(ab_dir.glob(f"{side}[0-9]*")):
            if (d / "summary.json").exists():
                for lv in json.loads((d / "summary.json").read_text())["levels"].values():
                    if (lv.get("client_health") or {}).get("stamp_bound"):
                        sbs.append(lv["client_health"]["stamp_bound"])
        if sbs:
            out[side] = {"stated_p99_ms_worst": max(sb["stated_p99_ms"] for sb in sbs),
                         "shared_read_fraction": [min(sb["shared_read_fraction"] for sb in sbs),
                                                  max(sb["shared_read_fraction"] for sb in sbs)],
                         "runs": len(sbs)}
    return out


def exit_line(name: str, r: dict[str, Any]) -> str:
    """One configuration's exit codes, e.g. `spec-solo: near-tie-tolerant exit 0, bit-exact exit 10,
    performance exit 21 (regressed); 61.2 s`."""
    parts = []
    for step in ("near-tie-tolerant", "bit-exact", "performance"):
        if step in r:
            verdict = r[step].get("verdict")
            parts.append(f"{step} exit {r[step]['exit']}" + (f" ({verdict})" if verdict else ""))
    st = (r.get("performance") or {}).get("stamps") or {}
    words = "".join(f"; {('baseline', 'candidate')[k == 'B']} stamps p99 <= {v['stated_p99_ms_worst']:.3f} ms, "
                    f"{v['shared_read_fraction'][0]:.1%}-{v['shared_read_fraction'][1]:.1%} of chunks shared a read"
                    for k, v in st.items())
    return f"{name}: {', '.join(parts)}{words}; {r.get('s', 0):.1f} s"


def loadgate(*args: str, log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, "-m", "loadgate", *args], stdout=f, stderr=subprocess.STDOUT,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}).returncode


def profile(path: Path, url: str, decl: dict[str, str], exactness: dict[str, Any], *, ab_url: str | None = None,
            ab_decl: dict[str, str] | None = None, out: Path, name: str, requests: int, osl: int) -> Path:
    doc: dict[str, Any] = {
        "name": name, "target": {"endpoint": url, "api": "llamacpp", "model": "tiny", "declared": decl},
        "workload": {"requests": requests, "input_len": {"dist": "uniform", "min": 64, "max": 512},
                     "output_len": {"dist": "fixed", "value": osl}},
        "load": {"concurrency": 8, "warmup_requests": 8},
        "exactness": exactness, "output": {"dir": str(out), "run_id": name},
        "health": {"loop_lag_p99_ms": 50.0},
    }
    if ab_url:
        doc["ab"] = {"baseline": {"endpoint": ab_url, "api": "llamacpp", "model": "tiny", "declared": ab_decl},
                     "pairs": 5}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--quick", action="store_true", help="few short cases (a CPU dry run)")
    a = ap.parse_args()
    work = a.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    n, mt = (6, 24) if a.quick else (24, 256)
    corp = corpus(work / "corpus.jsonl", n, mt)
    results: dict[str, Any] = {"cases": n, "max_tokens": mt, "dtype": a.dtype, "configs": {}}
    configs = {"restart": (1, False, {"solo": True}), "slots8": (8, False, {"solo": False, "concurrent": 8}),
               "spec-solo": (1, True, {"solo": True}), "spec-slots8": (8, True, {"solo": False, "concurrent": 8})}
    logs = a.out / "logs"
    logs.mkdir(exist_ok=True)

    def start(slots: int, spec: bool) -> Server:
        port = free_port()
        return Server(server_argv(a.server, a.models, port, slots=slots, spec=spec, ngl=a.ngl, dtype=a.dtype),
                      port=port, log_path=logs / f"server-{slots}-{'spec' if spec else 'plain'}-{port}.log",
                      ready_timeout_s=300)

    t0 = time.monotonic()
    base_decl = declared("baseline", 1, False, a.dtype)
    with start(1, False) as base:
        ex0 = {"baseline": "sim-reference", "corpus": str(corp), "contract": {"tier": "bit-exact"},
               "scenarios": {"solo": True}}
        p = profile(work / "baseline.yaml", base.url, base_decl, ex0, out=work / "runs", name="baseline",
                    requests=8, osl=16)
        code = loadgate("baseline", str(p), "--out", str(work / "baselines"), log=logs / "baseline.txt")
        bfile = (logs / "baseline.txt").read_text().strip().splitlines()[-1]
        results["baseline"] = {"exit": code, "file": bfile, "s": round(time.monotonic() - t0, 1)}
        print(f"baseline: exit {code}; {results['baseline']['s']:.1f} s", flush=True)
        if code != 0:
            raise SystemExit(f"baseline failed: {(logs / 'baseline.txt').read_text()[-2000:]}")
        for name, (slots, spec, scen) in configs.items():
            t = time.monotonic()
            decl = declared(name, slots, spec, a.dtype)
            r: dict[str, Any] = {"slots": slots, "speculation": spec, "scenarios": scen}
            with start(slots, spec) as cand:
                for tier in ("near-tie-tolerant", "bit-exact"):
                    contract = {"tier": tier, "gap": 0.3} if tier == "near-tie-tolerant" else {"tier": tier}
                    ex = {"baseline": bfile, "corpus": str(corp), "contract": contract, "scenarios": scen}
                    run_id = f"{name}-{tier}"
                    p = profile(work / f"{run_id}.yaml", cand.url, decl, ex, out=work / "runs", name=run_id,
                                requests=8, osl=16)
                    r[tier] = {"exit": loadgate("check", str(p), log=logs / f"{run_id}.txt")}
                    rep = work / "runs" / run_id / "exactness.json"
                    if rep.exists():
                        j = json.loads(rep.read_text())
                        r[tier].update(verdicts=j["verdicts"], positions=j["positions"], reasons=j["reasons"],
                                       speculation=j["speculation"], non_identical=j["non_identical"])
                if r["near-tie-tolerant"]["exit"] == 0:
                    ex = {"baseline": bfile, "corpus": str(corp), "contract": {"tier": "near-tie-tolerant", "gap": 0.3},
                          "scenarios": scen}
                    run_id = f"{name}-performance"
                    p = profile(work / f"{run_id}.yaml", cand.url, decl, ex, ab_url=base.url, ab_decl=base_decl,
                                out=work / "runs", name=run_id, requests=24 if a.quick else 32,
                                osl=32 if a.quick else 96)
                    r["performance"] = {"exit": loadgate("run", "-q", str(p), log=logs / f"{run_id}.txt")}
                    r["performance"]["stamps"] = stamps(work / "runs" / run_id)
                    comp = work / "runs" / run_id / "comparison.json"
                    if comp.exists():
                        c = json.loads(comp.read_text())
                        r["performance"].update(verdict=c["verdict"], figures={
                            k: {x: v[x] for x in ("ratio", "interval", "decision", "baseline_runs", "candidate_runs")}
                            for k, v in next(iter(c["levels"].values()))["figures"].items()})
            r["s"] = round(time.monotonic() - t, 1)
            results["configs"][name] = r
            (a.out / "results.json").write_text(json.dumps(results, indent=2))
            print(exit_line(name, r), flush=True)
    results["total_s"] = round(time.monotonic() - t0, 1)
    (a.out / "results.json").write_text(json.dumps(results, indent=2))
    broken = [f"{name} {step}" for name, r in results["configs"].items() for step, v in r.items()
              if isinstance(v, dict) and v.get("exit") in (1, 2)]
    if broken:  # loadgate itself failed (an internal or usage error), not the engine: the pipeline failed
        raise SystemExit(f"loadgate failed (exit 1 or 2) in: {', '.join(broken)}; see logs/")


if __name__ == "__main__":
    main()
