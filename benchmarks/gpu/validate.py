"""loadgate, unchanged, against llama-server on a GPU: the seed's whole table of configuration changes.

Starts each configuration of `llama-server` (built with CUDA) and runs loadgate's own commands
against it (`baseline`, `check`, `run`), keeping every report. All from a solo f16 baseline
without speculation (1 slot, flash attention on, KV cache f16, no LoRA), 24 prompts of 256 greedy
tokens, under `near-tie-tolerant` (gap 0.3 nats), so every divergence is listed with its first
position and the baseline's top-2 gap:

  rows (check)     restart (control, also bit-exact) · speculation on · --parallel 32 with one
                   request at a time · --parallel 8 with 8 in flight · --parallel 32 with 32 in
                   flight · flash attention off · KV cache q8_0 · speculation with KV q8_0 (against
                   both baselines: the 2 x 2) · a LoRA loaded unapplied · forced rejection (a
                   random-weight draft) · speculation with 8 in flight · long prompts (>= 8k
                   tokens; control and speculation)
  drift            1,200 requests (24 prompts x 50) in batches of 8 with `contract.stable`:
                   8 slots, 8 slots with speculation, 1 slot (the control)
  speed and cost   single-stream decode for short, ~2k and long prompts, speculation off and on;
                   A/B of speculation at 8 and 32 in flight; GPU memory and joules per output
                   token from loadgate's NVML reader (`target.gpu`)

Every slot holds the longest prompt plus 256 tokens: `-c` is slots x the per-slot context (no
unified KV cache). The LoRA row reads `GET /lora-adapters` and sets the scale to 0 with `POST` when
a build left it at 1 (llama.cpp #28674). The forced-rejection row reads the server's
`llamacpp:spec_decode_*` counters around the check. Results: OUT/results.json (each step's exit
code, seconds and figures), OUT/logs/ (each loadgate command's printed report), OUT/work/runs/
(each run folder).

    python3 benchmarks/gpu/validate.py --server BUILD/bin/llama-server --models MODELS --out OUT
    (--ngl 0 --quick: a dry run on the CPU with small settings)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "engines"))
from common import Server, free_port  # noqa: E402

from loadgate.load.workload.text import filler_text  # noqa: E402

GAP = 0.3  # near-tie-tolerant's gap, nats
TIE = {"tier": "near-tie-tolerant", "gap": GAP}
LONG = {"solo": False, "long": True}  # the corpus's cases tagged `long`, one at a time


@dataclass(frozen=True)
class Config:
    """One llama-server configuration: what the operator changed."""

    slots: int = 1
    spec: str | None = None  # "draft" (the trained draft) or "random" (the untrained one: forced rejection)
    fa: str = "on"
    kv: str = "f16"
    lora: bool = False

    def declared(self, name: str) -> dict[str, str]:
        d = {"engine": "llama.cpp llama-server (CUDA)", "config": name, "dtype": "f16", "slots": str(self.slots),
             "speculative": "none" if self.spec is None else "draft-simple",
             "attention_backend": "flash" if self.fa == "on" else "default", "kv_dtype": self.kv,
             "lora": "loaded, scale 0" if self.lora else "none"}
        if self.spec:
            d.update(spec_draft_n_max="8", draft_model=f"{'draft' if self.spec == 'draft' else 'draft-random'}-f16")
        return d


BASE = Config()
CONFIGS: dict[str, Config] = {
    "base": BASE, "base-q8": Config(kv="q8_0"), "spec": Config(spec="draft"), "parallel32": Config(slots=32),
    "parallel8": Config(slots=8), "fa-off": Config(fa="off"), "spec-q8": Config(spec="draft", kv="q8_0"),
    "lora": Config(lora=True), "reject": Config(spec="random"), "spec8": Config(slots=8, spec="draft"),
    "spec32": Config(slots=32, spec="draft"),
}


def server_argv(binary: Path, models: Path, port: int, c: Config, *, ngl: int, per_slot: int) -> list[str]:
    g = models / "gguf"
    argv = [str(binary), "-m", str(g / "target-f16.gguf"), "--host", "127.0.0.1", "--port", str(port),
            "-np", str(c.slots), "-c", str(per_slot * c.slots), "--metrics", "--alias", "tiny", "--no-webui",
            "-fa", c.fa, "-ctk", c.kv, "-ctv", c.kv]
    if ngl:
        argv += ["-ngl", str(ngl)]
    if c.lora:
        argv += ["--lora", str(g / "lora-f16.gguf"), "--lora-init-without-apply"]
    if c.spec:
        draft = "draft-f16.gguf" if c.spec == "draft" else "draft-random-f16.gguf"
        argv += ["-md", str(g / draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
        if ngl:
            argv += ["-ngld", str(ngl)]
    return argv


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


def counters(url: str) -> dict[str, float]:
    """The server's `llamacpp:` counters and gauges, by name without the prefix."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {s.name.removeprefix("llamacpp:"): s.value for m in text_string_to_metric_families(text)
            for s in m.samples if s.name.startswith("llamacpp:")}


def write_corpus(path: Path, prompts: list[str], max_tokens: int, tag: str) -> Path:
    path.write_text("".join(json.dumps({"id": f"{tag}-{k:02d}", "kind": "completion", "prompt": p,
                                        "max_tokens": max_tokens, "tags": [tag]}) + "\n"
                            for k, p in enumerate(prompts)))
    return path


def short_prompts(n: int) -> list[str]:
    """n prompts: prose of growing length, every third one code-like (as in the earlier runs)."""
    return [f"def step_{k}(items, limit):\n    total = 0\n    for i, x in enumerate(items):\n" if k % 3 == 2
            else filler_text(40 + 12 * k, seed=1000 + k) + f"\n\nPart {k}:" for k in range(n)]


def long_prompts(url: str, n: int, tokens: int) -> tuple[list[str], list[int]]:
    """n prose prompts of at least `tokens` tokens each, sized with the server's own /tokenize."""
    out, counts = [], []
    for k in range(n):
        words = tokens // 2
        while True:
            text = filler_text(words, seed=5000 + k) + f"\n\nSummary {k}:"
            got = len(post(url + "/tokenize", {"content": text})["tokens"])
            if got >= tokens:
                break
            words = math.ceil(words * tokens / max(got, 1) * 1.02)
        out.append(text)
        counts.append(got)
    return out, counts


def loadgate(*args: str, log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, "-m", "loadgate", *args], stdout=f, stderr=subprocess.STDOUT,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}).returncode


def profile(path: Path, url: str, decl: dict[str, str], exactness: dict[str, Any] | None, *, out: Path, name: str,
            workload: dict[str, Any] | None = None, load: dict[str, Any] | None = None,
            ab: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {
        "name": name,
        "target": {"endpoint": url, "api": "llamacpp", "model": "tiny", "declared": decl,
                   "gpu": {"telemetry": "auto", "interval_s": 0.25}},
        "workload": workload or {"requests": 8, "input_len": {"dist": "uniform", "min": 64, "max": 512},
                                 "output_len": {"dist": "fixed", "value": 16}},
        "load": load or {"concurrency": 1, "warmup_requests": 1},
        "output": {"dir": str(out), "run_id": name},
        "health": {"loop_lag_p99_ms": 50.0},
    }
    if exactness:
        doc["exactness"] = exactness
    if ab:
        doc["ab"] = ab
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def summarize_check(rep: Path) -> dict[str, Any]:
    """A check's figures for the table: prompts whose tokens diverge (with first divergence and the
    baseline's top-2 gap there), prompts with the same tokens and other logprobs, the verdicts."""
    if not rep.exists():
        return {}
    j = json.loads(rep.read_text())
    ni = j["non_identical"]
    div = [{"case": x["case"], "scenario": x["scenario"], "at": x["first_divergence"],
            "gap": x["baseline_top2_gap"], "verdict": x["verdict"]} for x in ni if x["first_divergence"] is not None]
    cases = {x["case"] for x in ni}
    return {"passed": j["passed"], "verdicts": j["verdicts"], "positions": j["positions"],
            "speculation": j["speculation"], "reasons": j["reasons"], "fingerprint_hash": j["fingerprint_hash"],
            "prompts_diverging": len({d["case"] for d in div}), "prompts_logprobs_only": len(
                cases - {d["case"] for d in div}), "sequences_not_identical": len(ni), "divergences": div,
            "drift": j.get("drift") or None}


def level_figures(run: Path) -> dict[str, Any]:
    """A single run's speed and cost from its summary: TTFT, TPOT and ITL p50, decode tokens/s of
    one stream (1000 / TPOT p50), output tokens/s of the window, and from the NVML reader each GPU's
    most memory in use (and the engine process's), the window's energy and joules per output token."""
    s = run / "summary.json"
    if not s.exists():
        return {}
    lv = next(iter(json.loads(s.read_text())["levels"].values()))
    m = lv.get("metrics") or {}
    out: dict[str, Any] = {"requests": lv.get("requests"), "succeeded": lv.get("succeeded")}
    for key in ("ttft", "tpot", "itl"):
        if isinstance(m.get(key), dict):
            out[f"{key}_p50_ms"] = m[key].get("p50")
    if out.get("tpot_p50_ms"):
        out["decode_tokens_per_s"] = 1000.0 / out["tpot_p50_ms"]
    out["output_token_throughput"] = (lv.get("throughput") or {}).get("output_token_throughput")
    gpu = lv.get("gpu") or {}
    if gpu:
        out["energy_j"] = gpu.get("energy_j")
        out["joules_per_output_token"] = gpu.get("joules_per_output_token")
        out["gpus"] = {k: {x: v.get(x) for x in ("name", "mem_used_bytes_max", "process_mem_bytes_max", "power_w",
                                                 "util_pct", "energy_source")}
                       for k, v in (gpu.get("gpus") or {}).items()}
    return out


def comparison(run: Path) -> dict[str, Any]:
    comp = run / "comparison.json"
    if not comp.exists():
        return {}
    c = json.loads(comp.read_text())
    return {"verdict": c["verdict"], "figures": {
        k: {x: v.get(x) for x in ("ratio", "interval", "decision", "baseline_runs", "candidate_runs")}
        for k, v in next(iter(c["levels"].values()))["figures"].items()}}


class Matrix:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work = a.out / "work"
        self.logs = a.out / "logs"
        self.runs = self.work / "runs"
        for d in (self.work, self.logs, self.runs):
            d.mkdir(parents=True, exist_ok=True)
        self.quick = a.quick
        self.n, self.mt = (6, 24) if a.quick else (24, 256)
        self.per_slot = 4096 if a.quick else 16384
        self.long_tokens = 700 if a.quick else 8192
        self.t0 = time.monotonic()
        self.results: dict[str, Any] = {"cases": self.n, "max_tokens": self.mt, "per_slot_context": self.per_slot,
                                        "gap": GAP, "configs": {k: asdict(v) for k, v in CONFIGS.items()},
                                        "baselines": {}, "rows": {}, "drift": {}, "speed": {}, "ab": {},
                                        "lora": {}, "steps": []}
        self.corpora: dict[str, Path] = {}
        self.baselines: dict[str, str] = {}

    def save(self) -> None:
        self.results["total_s"] = round(time.monotonic() - self.t0, 1)
        (self.a.out / "results.json").write_text(json.dumps(self.results, indent=2))

    def step(self, name: str, t: float, line: str) -> None:
        s = round(time.monotonic() - t, 1)
        self.results["steps"].append({"step": name, "s": s, "at_s": round(time.monotonic() - self.t0, 1)})
        print(f"[{time.monotonic() - self.t0:6.0f}s] {name}: {line}; {s:.1f} s", flush=True)
        self.save()

    @contextmanager
    def server(self, name: str) -> Iterator[Server]:
        c = CONFIGS[name]
        port = free_port()
        t = time.monotonic()
        with Server(server_argv(self.a.server, self.a.models, port, c, ngl=self.a.ngl, per_slot=self.per_slot),
                    port=port, log_path=self.logs / f"server-{name}-{port}.log", ready_timeout_s=300) as s:
            self.results.setdefault("server_start_s", {}).setdefault(name, []).append(round(time.monotonic() - t, 1))
            if c.lora:
                self.lora_scale_zero(s.url)
            yield s

    def lora_scale_zero(self, url: str) -> None:
        """`--lora-init-without-apply` must leave the adapter at scale 0; some builds leave 1.0."""
        before = get(url + "/lora-adapters")
        fixed = False
        if any(x.get("scale", 0) != 0 for x in before):
            post(url + "/lora-adapters", [{"id": x["id"], "scale": 0.0} for x in before])
            fixed = True
        self.results["lora"] = {"before": before, "set_to_zero": fixed, "after": get(url + "/lora-adapters")}
        assert all(x.get("scale", 0) == 0 for x in self.results["lora"]["after"]), self.results["lora"]

    def baseline(self, key: str, url: str, config: str, corpus: str) -> None:
        t = time.monotonic()
        ex = {"baseline": "sim-reference", "corpus": str(self.corpora[corpus]), "contract": {"tier": "bit-exact"},
              "scenarios": LONG if corpus == "long" else {"solo": True}}
        p = profile(self.work / f"baseline-{key}.yaml", url, CONFIGS[config].declared(config), ex,
                    out=self.runs, name=f"baseline-{key}")
        log = self.logs / f"baseline-{key}.txt"
        code = loadgate("baseline", str(p), "--out", str(self.work / "baselines"), log=log)
        if code != 0:
            raise SystemExit(f"baseline {key} failed (exit {code}): {log.read_text()[-2000:]}")
        self.baselines[key] = log.read_text().strip().splitlines()[-1]
        self.results["baselines"][key] = {"exit": code, "file": Path(self.baselines[key]).name, "config": config,
                                          "corpus": corpus}
        self.step(f"baseline {key}", t, f"exit {code}")

    def check(self, row: str, url: str, config: str, corpus: str, base: str, scenarios: dict[str, Any],
              contract: dict[str, Any] | None = None, *, spec_counters: bool = False) -> dict[str, Any]:
        t = time.monotonic()
        contract = contract or TIE
        ex = {"baseline": self.baselines[base], "corpus": str(self.corpora[corpus]), "contract": contract,
              "scenarios": scenarios}
        p = profile(self.work / f"{row}.yaml", url, CONFIGS[config].declared(config), ex, out=self.runs, name=row)
        before = counters(url) if spec_counters else {}
        code = loadgate("check", str(p), log=self.logs / f"{row}.txt")
        r: dict[str, Any] = {"exit": code, "config": config, "corpus": corpus, "baseline": base,
                             "scenarios": scenarios, "contract": contract,
                             **summarize_check(self.runs / row / "exactness.json")}
        if spec_counters:
            after = counters(url)
            d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in
                 ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                  "spec_decode_num_accepted_tokens_total")}
            drafted, accepted = d["spec_decode_num_draft_tokens_total"], d["spec_decode_num_accepted_tokens_total"]
            r["server_counters"] = {**d, "accepted_fraction": None if not drafted else accepted / drafted}
        r["s"] = round(time.monotonic() - t, 1)
        self.results["rows"][row] = r
        self.step(f"check {row}", t, f"exit {code}, {r.get('prompts_diverging')} of {self.n if corpus != 'long' else 3} "
                  f"prompts diverge, {r.get('prompts_logprobs_only')} with other logprobs only")
        return r

    def speed(self, row: str, url: str, config: str, input_len: int, requests: int) -> None:
        t = time.monotonic()
        ex = {"baseline": self.baselines["short"], "corpus": str(self.corpora["short"]), "contract": TIE,
              "scenarios": {"solo": True}}
        wl = {"requests": requests, "input_len": {"dist": "fixed", "value": input_len},
              "output_len": {"dist": "fixed", "value": self.mt}}
        p = profile(self.work / f"{row}.yaml", url, CONFIGS[config].declared(config), ex, out=self.runs, name=row,
                    workload=wl, load={"concurrency": 1, "warmup_requests": 1})
        code = loadgate("run", "-q", str(p), log=self.logs / f"{row}.txt")
        r = {"exit": code, "config": config, "input_len": input_len, "output_len": self.mt, "requests": requests,
             **level_figures(self.runs / row)}
        r["s"] = round(time.monotonic() - t, 1)
        self.results["speed"][row] = r
        self.step(f"speed {row}", t, f"exit {code}")

    def ab(self, row: str, url: str, config: str, base_url: str, base_config: str, in_flight: int) -> None:
        t = time.monotonic()
        if self.quick:  # a dry run on a few CPU cores: the flow, not the load
            in_flight = min(in_flight, 4)
        ex = {"baseline": self.baselines["short"], "corpus": str(self.corpora["short"]), "contract": TIE,
              "scenarios": {"solo": False, "concurrent": in_flight}}
        wl = {"requests": 4 * in_flight, "input_len": {"dist": "uniform", "min": 64, "max": 512},
              "output_len": {"dist": "fixed", "value": 24 if self.quick else 128}}
        abd = {"baseline": {"endpoint": base_url, "api": "llamacpp", "model": "tiny",
                            "declared": CONFIGS[base_config].declared(base_config)}, "pairs": 2 if self.quick else 3}
        p = profile(self.work / f"{row}.yaml", url, CONFIGS[config].declared(config), ex, out=self.runs, name=row,
                    workload=wl, load={"concurrency": in_flight, "warmup_requests": in_flight}, ab=abd)
        code = loadgate("run", "-q", str(p), log=self.logs / f"{row}.txt")
        r = {"exit": code, "config": config, "baseline_config": base_config, "in_flight": in_flight,
             **comparison(self.runs / row)}
        for side in ("A1", "B1"):
            r[f"{side}_figures"] = level_figures(self.runs / row / side)
        r["s"] = round(time.monotonic() - t, 1)
        self.results["ab"][row] = r
        self.step(f"A/B {row}", t, f"exit {code}, {r.get('verdict')}")

    def drift(self, row: str, url: str, config: str, stable_expected: bool) -> None:
        t = time.monotonic()
        repeat = self.n * (4 if self.quick else 50)
        ex = {"baseline": self.baselines["drift"], "corpus": str(self.corpora["drift"]),
              "contract": {**TIE, "stable": True}, "scenarios": {"solo": False, "repeat": repeat, "repeat_batch": 8}}
        p = profile(self.work / f"{row}.yaml", url, CONFIGS[config].declared(config), ex, out=self.runs, name=row)
        code = loadgate("check", str(p), log=self.logs / f"{row}.txt")
        r = {"exit": code, "config": config, "requests": repeat, "stable_expected": stable_expected,
             **summarize_check(self.runs / row / "exactness.json")}
        text = (self.logs / f"{row}.txt").read_text()
        r["drift_lines"] = [ln for ln in text.splitlines() if ln.startswith("run-to-run drift")]
        r["s"] = round(time.monotonic() - t, 1)
        self.results["drift"][row] = r
        self.step(f"drift {row}", t, f"exit {code}; {' '.join(r['drift_lines'])[:200]}")

    def attribution(self) -> None:
        """The 2 x 2 of speculation and KV q8_0: which prompts diverge under which factor."""
        rows = self.results["rows"]

        def div(name: str) -> set[str]:
            return {d["case"] for d in rows.get(name, {}).get("divergences", [])}

        spec, q8, both, both_vs_q8 = div("spec"), div("kv-q8"), div("spec-q8"), div("spec-q8-vs-q8")
        self.results["attribution"] = {
            "speculation_alone": sorted(spec), "kv_q8_alone": sorted(q8), "both_vs_f16_baseline": sorted(both),
            "speculation_under_q8 (vs the q8 baseline)": sorted(both_vs_q8),
            "in_both_only_where_speculation_alone_diverges": sorted(both & spec - q8),
            "in_both_only_where_q8_alone_diverges": sorted(both & q8 - spec),
            "in_both_where_both_alone_diverge": sorted(both & spec & q8),
            "in_both_where_neither_alone_diverges": sorted(both - spec - q8)}
        self.save()

    def run(self) -> None:
        self.corpora["short"] = write_corpus(self.work / "short.jsonl", short_prompts(self.n), self.mt, "short")
        self.corpora["drift"] = write_corpus(self.work / "drift.jsonl", short_prompts(self.n),
                                             16 if self.quick else 128, "drift")
        # the solo f16 baseline (1 slot, flash attention on, KV f16): the corpora's baselines, the
        # restart control, long prompts, the drift control and the single-stream speed rows
        with self.server("base") as base:
            prompts, counts = long_prompts(base.url, 3, self.long_tokens)
            self.corpora["long"] = write_corpus(self.work / "long.jsonl", prompts, self.mt, "long")
            self.results["long_prompt_tokens"] = counts
            for key, corpus in (("short", "short"), ("long", "long"), ("drift", "drift")):
                self.baseline(key, base.url, "base", corpus)
        with self.server("base") as base:  # restarted: the control rows
            self.check("restart", base.url, "base", "short", "short", {"solo": True})
            self.check("restart-bit-exact", base.url, "base", "short", "short", {"solo": True}, {"tier": "bit-exact"})
            self.check("long-restart", base.url, "base", "long", "long", LONG)
            self.drift("drift-1slot", base.url, "base", True)
            for label, n in (("short", 64), ("2k", 2048), ("long", self.long_tokens)):
                self.speed(f"speed-{label}", base.url, "base", n, 4 if self.quick else 8)
        with self.server("spec") as s:
            self.check("spec", s.url, "spec", "short", "short", {"solo": True}, spec_counters=True)
            self.check("long-spec", s.url, "spec", "long", "long", LONG, spec_counters=True)
            for label, n in (("short", 64), ("2k", 2048), ("long", self.long_tokens)):
                self.speed(f"speed-{label}-spec", s.url, "spec", n, 4 if self.quick else 8)
        with self.server("parallel32") as s:
            self.check("parallel32-solo", s.url, "parallel32", "short", "short", {"solo": True})
            self.check("parallel32-32", s.url, "parallel32", "short", "short", {"solo": False, "concurrent": 32})
            with self.server("spec32") as sp:
                self.ab("ab-spec-32", sp.url, "spec32", s.url, "parallel32", 32)
        with self.server("parallel8") as s:
            self.check("parallel8-8", s.url, "parallel8", "short", "short", {"solo": False, "concurrent": 8})
            self.drift("drift-8slots", s.url, "parallel8", False)
            with self.server("spec8") as sp:
                self.check("spec8-8", sp.url, "spec8", "short", "short", {"solo": False, "concurrent": 8},
                           spec_counters=True)
                self.drift("drift-8slots-spec", sp.url, "spec8", False)
                self.ab("ab-spec-8", sp.url, "spec8", s.url, "parallel8", 8)
        with self.server("fa-off") as s:
            self.check("fa-off", s.url, "fa-off", "short", "short", {"solo": True})
        with self.server("base-q8") as s:
            self.baseline("short-q8", s.url, "base-q8", "short")
            self.check("kv-q8", s.url, "base-q8", "short", "short", {"solo": True})
        with self.server("spec-q8") as s:
            self.check("spec-q8", s.url, "spec-q8", "short", "short", {"solo": True}, spec_counters=True)
            self.check("spec-q8-vs-q8", s.url, "spec-q8", "short", "short-q8", {"solo": True})
        self.attribution()
        with self.server("lora") as s:
            self.check("lora", s.url, "lora", "short", "short", {"solo": True})
        with self.server("reject") as s:
            self.check("forced-rejection", s.url, "reject", "short", "short", {"solo": True}, spec_counters=True)
        self.save()
        broken = [f"{kind} {name}" for kind in ("rows", "drift", "speed", "ab")
                  for name, r in self.results[kind].items() if r.get("exit") in (1, 2)]
        if broken:  # loadgate itself failed (an internal or usage error), not the engine: the pipeline failed
            raise SystemExit(f"loadgate failed (exit 1 or 2) in: {', '.join(broken)}; see logs/")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--quick", action="store_true", help="few short cases and small contexts (a CPU dry run)")
    Matrix(ap.parse_args()).run()


if __name__ == "__main__":
    main()
