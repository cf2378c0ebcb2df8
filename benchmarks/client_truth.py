"""Client truth under load: how late loadgate stamps events against a server with a known schedule,
with request churn (short requests starting and ending all the time), and what it costs.

The server is `benchmarks/event_source.py` (one or more processes on one port): each stream's first
chunk 50 ms after the request, then one 3-token chunk per 20 ms tick (50 events/s per stream), 60
tokens per request, so at 256 streams about 640 requests start and end every second. Its send times
are the truth. loadgate runs as a separate process (`loadgate run --unverified`, default health
budgets), pinned to other cores than the server. Per configuration it prints:
  client-added delay   loadgate's recorded arrival - the server's send time, per event (p50/p99/max)
  stamp uncertainty    p99 of the per-event bound loadgate records itself (how far an event's true
                       arrival may lie before its stamp, when one read carried several events)
  CPU / 1000 events    CPU seconds of the whole loadgate process tree (parent and workers, sampled
                       with psutil every 50 ms) over the measured window, plus the decoding of
                       those responses that loadgate defers to after the window (health.json)
  verdict              loadgate's own: valid, or INVALID with the bound it measured
  bound violations     events whose stated earliest arrival (stamp - bound) is later than the server's
                       write had returned: stamp - write returned > bound (must be 0: the bound is sound)
  tight                whether stated bound p99 <= 3 x delay p99 + 0.2 ms
  cause                the share of chunks bounded while loadgate's loop was busy, and the p99 of the
                       others (read in turns that woke from an idle poll)
Events/s is counted from the server's send times. `--burst` is llama-server's shape under
speculation: 4 one-token events per write, every 8 ms (`--events-per-write`, `--tokens-per-chunk`
and `--step-ms` set any other).

    python benchmarks/client_truth.py                             # 64, 256, 512 streams, 3 reps
    python benchmarks/client_truth.py --streams 256 --profile     # where the client's time goes
    python benchmarks/client_truth.py --burst --streams 1 8 64    # llama-server's bursts
    python benchmarks/client_truth.py --workers 1 2 4 8 --scale --server-cpus 0-7 --client-cpus 8-15
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgate.jsonutil import load_json  # noqa: E402
from loadgate.records import read_records  # noqa: E402

READY = "event source listening on "
# `loadgate` under cProfile: the command line's own entry ends with os._exit, which writes no profile
PROFILED = """import cProfile, sys
out = sys.argv.pop(1)
from loadgate.cli import main
prof = cProfile.Profile()
prof.enable()
try:
    main()
finally:
    prof.disable()
    prof.dump_stats(out)
"""


def cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


@contextlib.contextmanager
def event_sources(n: int, server_cpus: list[int], log_dir: Path, shape: tuple[str, ...] = ()) -> Iterator[str]:
    """`n` event-source processes on one port, spread over `server_cpus`; `shape`: their stream options."""
    procs: list[subprocess.Popen[str]] = []
    port = 0
    try:
        for k in range(n):
            cpu = server_cpus[k % len(server_cpus)]
            p = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "event_source.py"), "--port", str(port),
                                  "--log-dir", str(log_dir), "--reuse-port", "--cpu", str(cpu), *shape],
                                 stdout=subprocess.PIPE, text=True)
            procs.append(p)
            line = p.stdout.readline() if p.stdout else ""
            assert line.startswith(READY), line
            url = line[len(READY):].strip()
            port = int(url.rsplit(":", 1)[1])
        yield f"http://127.0.0.1:{port}"
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)


def truth(log_dir: Path) -> tuple[dict[str, list[int]], dict[str, list[int | None]]]:
    """Per request id: each event's time just before its write, and just after it (None: buffered)."""
    out: dict[str, list[int]] = {}
    done: dict[str, list[int | None]] = {}
    for f in log_dir.glob("truth-*.jsonl"):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            out[d["request_id"]] = d["send_ns"]
            done[d["request_id"]] = d.get("done_ns") or [None] * len(d["send_ns"])
    return out, done


def profile_doc(url: str, streams: int, per_stream: int, workers: int, out: Path,
                ray: str | None = None) -> dict[str, Any]:
    """`ray`: a Ray address: `workers` Ray actors of one local worker each (load.distributed) instead."""
    load: dict[str, Any] = {"concurrency": streams, "warmup_requests": streams, "workers": 1 if ray else workers}
    if ray:
        load["distributed"] = {"address": ray, "actors": workers}
    return {"name": "truth", "target": {"endpoint": url, "model": "m", "metrics_url": "http://127.0.0.1:9/metrics"},
            "workload": {"requests": streams * per_stream, "tokenizer": "none",
                         "input_len": {"dist": "fixed", "value": 8}, "output_len": {"dist": "fixed", "value": 60}},
            "load": load, "output": {"dir": str(out), "run_id": "r"}}


class TreeCpu:
    """CPU seconds of a process and all its descendants, sampled every `interval_s` (psutil), so
    the window's share can be read off afterwards."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.root = psutil.Process(pid)
        self.samples: list[tuple[int, float]] = []
        self.seen: dict[int, float] = {}  # pid -> last CPU seen (a finished worker keeps its total)
        self._stop = threading.Event()
        self._interval = interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                for p in [self.root, *self.root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        c = p.cpu_times()
                        self.seen[p.pid] = c.user + c.system
            self.samples.append((time.perf_counter_ns(), sum(self.seen.values())))
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, a_ns: int, b_ns: int) -> float:
        t = np.asarray([x for x, _ in self.samples], dtype=np.float64)
        c = np.asarray([y for _, y in self.samples])
        return float(np.interp(b_ns, t, c) - np.interp(a_ns, t, c))


def one(streams: int, workers: int, per_stream: int, sources: int, server_cpus: list[int], client_cpus: list[int],
        prof: bool = False, shape: tuple[str, ...] = (), ray: str | None = None,
        prof_out: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        (tmp_p / "truth").mkdir()
        with event_sources(sources, server_cpus, tmp_p / "truth", shape) as url:
            p = tmp_p / "p.yaml"
            p.write_text(yaml.safe_dump(profile_doc(url, streams, per_stream, workers, tmp_p / "out", ray)))
            cmd = [sys.executable, "-m", "loadgate", "run", "-q", "--unverified", str(p)]
            if prof:
                cmd = [sys.executable, "-c", PROFILED, str(tmp_p / "prof.out"), "run", "-q", "--unverified", str(p)]
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=lambda: os.sched_setaffinity(0, set(client_cpus)))
            tree = TreeCpu(proc.pid)
            _, err = proc.communicate()
            tree.stop()
            wall = time.perf_counter() - t0
        sent, written = truth(tmp_p / "truth")
        d = tmp_p / "out" / "r"
        if not (d / "summary.json").exists():
            raise SystemExit(f"loadgate exited {proc.returncode} without a summary; its stderr: {err[-3000:]}")
        meta = load_json(d / "meta.json")
        summary = load_json(d / "summary.json")
        verdict = load_json(d / "verdict.json")
        health = load_json(d / "health.json")
        t0_ns = meta["t0_ns"]
        # Ray actors put their records on the driver's time line by each node's measured offset; on
        # one host the clocks are one, so adding the actor's offset back gives its own stamps exactly
        dist = load_json(d / "distributed.json") if (d / "distributed.json").exists() else None
        offset_ns = {a["actor"]: int(a["offset_start_ms"] * 1e6)
                     for a in (dist or {"levels": {}})["levels"].get(str(streams), {}).get("actors", [])}
        delays, bounds = [], []
        violations = unknown = 0
        examples: list[str] = []
        why: dict[str, list[float]] = {"first": [], "middle": [], "last": []}  # bounded chunks: send gap to next
        first, last = None, 0
        records = list(read_records(d / "records.jsonl"))
        # a Ray run: the report's line per actor (its records, stamp bound, clock), shown when not valid
        actors: list[str] = []
        if dist:  # (imported here: the same script runs against older trees, which have no such module)
            from loadgate.analysis.distributed import actor_lines
            actors = actor_lines(dist, records)
        for r in records:
            s = sent.get(f"r-L{streams}-{r.i}")
            if s is None or r.error is not None:
                continue
            actor = getattr(r, "actor", None)  # (records before v10 have none: the script runs against older trees)
            start = t0_ns + r.start_ns + (offset_ns.get(actor, 0) if actor is not None else 0)
            first = start if first is None else min(first, start)
            last = max(last, t0_ns + r.end_ns)
            delays += [(start + got - t) / 1e6 for got, t in zip(r.chunk_ns, s, strict=False)]
            bounds += [b / 1e6 for b in r.chunk_early_ns]
            for got, b, w in zip(r.chunk_ns, r.chunk_early_ns, written[f"r-L{streams}-{r.i}"], strict=False):
                if w is None:
                    unknown += 1
                elif start + got - w > b:  # stated earliest arrival later than the write had returned
                    violations += 1
                    if len(examples) < 8:
                        j = r.chunk_ns.index(got)
                        examples.append(f"request {r.i} chunk {j}/{len(r.chunk_ns)}: bound {b / 1e6:.3f} ms, stamp - "
                                        f"write returned {(start + got - w) / 1e6:.3f} ms, stamp - write began "
                                        f"{(start + got - s[j]) / 1e6:.3f} ms, "
                                        f"{'busy' if r.chunk_busy and j in r.chunk_busy else 'not busy'}")
            for j, b in enumerate(r.chunk_early_ns):
                if b > 0:
                    pos = "first" if j == 0 else "last" if j == len(r.chunk_early_ns) - 1 else "middle"
                    why[pos].append((s[j + 1] - s[j]) / 1e6 if j + 1 < len(s) else float("nan"))
        level = summary["levels"][str(streams)]
        decode_cpu = sum(h.get("decode_cpu_s") or 0.0 for h in health.get(str(streams), []))
        window_cpu = tree.between(first or 0, last)
        measured_sends = [t for rid, s in sent.items() if rid.startswith(f"r-L{streams}-") and "w-" not in rid
                          for t in s]
        span = (max(measured_sends) - min(measured_sends)) / 1e9 if measured_sends else 0.0
        x = np.asarray(delays)
        ev = max(1, x.size)
        if ray:  # the actors are the raylet's children, not loadgate's: their CPU is not in this tree
            window_cpu = decode_cpu = float("nan")
        out = {"streams": streams, "workers": workers, "events": int(x.size), "ray": bool(ray), "rate": len(measured_sends) / span
               if span else 0.0, "p50": float(np.percentile(x, 50)), "p99": float(np.percentile(x, 99)),
               "max": float(x.max()), "bound_p99": float(np.percentile(bounds, 99)) if bounds else None,
               "cpu_per_1k": 1000 * (window_cpu + decode_cpu) / ev, "window_cpu_per_1k": 1000 * window_cpu / ev,
               "decode_cpu_per_1k": 1000 * decode_cpu / ev, "wall": wall, "code": proc.returncode,
               "outcome": verdict["outcome"], "message": verdict.get("message", ""),
               "stated_bound": ((level.get("client_health") or {}).get("stamp_bound") or {}).get("stated_p99_ms"),
               "violations": violations, "unknown": unknown, "examples": examples,
               "busy_fraction": ((level.get("client_health") or {}).get("stamp_bound") or {}).get("busy_fraction"),
               "quiet_p99": ((level.get("client_health") or {}).get("stamp_bound") or {}).get("quiet_p99_ms"),
               "invalid": level.get("invalid") or [], "actors": actors,
               "stderr": err[-300:],
               "bounded": {k: (len(v), float(np.nanmedian(v)) if len(v) and not np.isnan(v).all() else None)
                           for k, v in why.items()}}
        if prof:
            buf = io.StringIO()
            pstats.Stats(str(tmp_p / "prof.out"), stream=buf).sort_stats("tottime").print_stats(24)
            out["profile"] = buf.getvalue()
            if prof_out is not None:  # the whole profile, for pstats or snakeviz
                shutil.copyfile(tmp_p / "prof.out", prof_out)
        return out


def median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[len(runs) // 2])
    for k in ("p50", "p99", "max", "cpu_per_1k", "window_cpu_per_1k", "decode_cpu_per_1k", "rate", "wall"):
        out[k] = float(np.median([r[k] for r in runs]))
    for k in ("bound_p99", "stated_bound"):
        vals = [r[k] for r in runs if r[k] is not None]
        out[k] = float(np.median(vals)) if vals else None
    for k in ("busy_fraction", "quiet_p99"):
        vals = [r[k] for r in runs if r.get(k) is not None]
        out[k] = float(np.median(vals)) if vals else None
    out["outcomes"] = sorted({f"{r['outcome']} (exit {r['code']})" for r in runs})
    out["violations_each"] = [r["violations"] for r in runs]
    out["unknown"] = sum(r["unknown"] for r in runs)
    out["invalid"] = sorted({m for r in runs for m in r["invalid"]})
    out["reps"] = len(runs)
    return out


def show(r: dict[str, Any]) -> None:
    bound = "n/a" if r["bound_p99"] is None else f"{r['bound_p99']:.3f}"
    stated = "n/a" if r["stated_bound"] is None else f"{r['stated_bound']:.3f}"
    print(f"{r['streams']:>4} streams  {r['workers']} worker(s)  {r['rate']:>8,.0f} ev/s  delay p50 {r['p50']:.3f} "
          f"p99 {r['p99']:.3f} max {r['max']:.2f} ms  stamp-uncertainty p99 {bound} ms (stated {stated})  "
          f"CPU {r['cpu_per_1k']:.4f} s/1000 ev (window {r['window_cpu_per_1k']:.4f} + decoding "
          f"{r['decode_cpu_per_1k']:.4f})  verdict {', '.join(r.get('outcomes') or [r['outcome']])}  "
          f"({r['events']:,} events, median of {r['reps']})", flush=True)
    tight = r["stated_bound"] is None or r["stated_bound"] <= 3 * r["p99"] + 0.2
    cause = "n/a" if r.get("busy_fraction") is None else \
        f"{r['busy_fraction']:.2%} of chunks bounded while the loop was busy, the others' p99 {r['quiet_p99']:.3f} ms"
    buffered = f" ({r['unknown']} events left buffered: not judged)" if r.get("unknown") else ""
    print(f"      bound violations (stamp - write returned > bound) per run: {r.get('violations_each')}{buffered}; "
          f"stated p99 <= 3 x delay p99 + 0.2 ms: {'yes' if tight else 'NO'}; cause: {cause}")
    for m in r.get("invalid") or []:
        print(f"      INVALID: {m}")
    if r["code"] not in (0, 11):
        if not r.get("invalid"):  # (a distributed run's own checks are the verdict's, not the level's)
            print(f"      verdict: {r.get('message')}")
        for line in r.get("actors") or []:
            print(f"      {line}")
    for e in r.get("examples") or []:
        print(f"      violation: {e}")
    if r.get("bounded") and any(n for n, _ in r["bounded"].values()):
        print("      chunks given a bound, by position (count, median send gap to the next chunk ms): "
              + ", ".join(f"{k} {n} ({'n/a' if g is None else f'{g:.3f}'})" for k, (n, g) in r["bounded"].items()))


def capacity(a: argparse.Namespace, sc: list[int], cc: list[int], shape: tuple[str, ...]) -> None:
    """The highest events/s each worker count (and each count of Ray actors, with --ray) holds with the
    client-added delay p99 <= 1 ms and a valid verdict, stepping the streams by x1.25; interleaved by
    count (workers, then actors); one run a probe, and up to --retries more where it fails."""
    modes = ([] if a.ray and a.ray_only else [None]) + ([a.ray] if a.ray else [])
    found: dict[str, dict[int, dict[str, Any] | None]] = {"workers": {}, "ray": {}}
    probes: list[dict[str, Any]] = []

    def save() -> None:
        if a.json:
            a.json.write_text(json.dumps({"probes": probes, "found": found}, indent=1, default=str))

    for w in a.workers:
        for ray in modes:
            kind = "ray" if ray else "workers"
            n, best = a.start_streams * w, None
            while n <= a.max_streams:
                for _ in range(1 + a.retries):  # a failing probe is tried again (each try shown and kept)
                    try:
                        r = one(n, w, a.per_stream, a.sources, sc, cc, shape=shape, ray=ray)
                    except SystemExit as e:  # loadgate wrote no summary: a failed try, said as such
                        print(f"{n:>4} streams  {w} worker(s)  {e}", flush=True)
                        probes.append({"streams": n, "workers": w, "ray": ray, "failed": str(e)})
                        save()
                        ok = False
                        continue
                    r["reps"], r["violations_each"] = 1, [r["violations"]]
                    show(r)
                    probes.append({k: r[k] for k in ("streams", "workers", "ray", "rate", "p50", "p99", "max", "code",
                                                     "outcome", "message", "stated_bound", "invalid", "actors",
                                                     "violations", "stderr", "wall")})
                    save()
                    ok = r["p99"] <= 1.0 and r["code"] in (0, 11)
                    if ok:
                        break
                if not ok:
                    break
                best = r
                n = int(n * 1.25 + 0.5)
            found[kind][w] = None if best is None else {"streams": best["streams"], "rate": best["rate"],
                                                         "p99": best["p99"]}
            save()
    print("\ncapacity (events/s at the most streams, x1.25 steps, with delay p99 <= 1 ms and a valid verdict):")
    for kind in ("workers", "ray"):
        base = (found[kind].get(1) or {}).get("rate")
        for w, f in found[kind].items():
            lin = f" = {f['rate'] / base / w:.2f} x {w} x one" if f and base else ""
            what = "load.workers" if kind == "workers" else "Ray actors"
            print(f"  {what} {w}: " + (f"{f['rate']:,.0f} ev/s ({f['streams']} streams, p99 {f['p99']:.3f} ms){lin}"
                                        if f else "none held"))
    save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--workers", type=int, nargs="+", default=[1])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per-stream", type=int, default=12, help="requests per stream (each ~0.45 s)")
    ap.add_argument("--sources", type=int, default=1, help="event-source processes on one port")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--profile", action="store_true", help="profile the client (one run per configuration)")
    ap.add_argument("--profile-out", type=Path, metavar="PATH",
                    help="--profile: also keep each whole profile, as PATH with .STREAMS.prof for its suffix")
    ap.add_argument("--max-streams", type=int, default=8192, help="--scale: stop doubling here")
    ap.add_argument("--scale", action="store_true",
                    help="per worker count, double the streams until delay p99 > 1 ms; report the last rate, "
                         "and the last one loadgate judged valid")
    ap.add_argument("--ray", metavar="ADDRESS", help="--capacity: also with --workers as Ray actors (one local worker "
                    "each) of the cluster at ADDRESS, started beforehand on --client-cpus")
    ap.add_argument("--capacity", action="store_true",
                    help="per worker count: streams from --start-streams per worker, x1.25 each step, until the "
                         "client-added delay p99 passes 1 ms or the verdict is not valid; the last that held both")
    ap.add_argument("--start-streams", type=int, default=64, help="--capacity: streams per worker to start from")
    ap.add_argument("--ray-only", action="store_true", help="--capacity --ray: the Ray actors alone, no local workers")
    ap.add_argument("--retries", type=int, default=0,
                    help="--capacity: a probe that fails is run again up to this many times before the count's "
                         "search ends (every try is shown and kept)")
    ap.add_argument("--json", type=Path, help="--capacity: write every probe and the answers here as they come")
    ap.add_argument("--burst", action="store_true",
                    help="llama-server's shape: 4 one-token events per write every 8 ms")
    ap.add_argument("--events-per-write", type=int, help="events per write (default 1; --burst: 4)")
    ap.add_argument("--tokens-per-chunk", type=int, help="tokens per event (default 3; --burst: 1)")
    ap.add_argument("--step-ms", type=float, help="ms between writes of one stream (default 20; --burst: 8)")
    a = ap.parse_args()
    if a.ray_only and not a.ray:
        ap.error("--ray-only needs --ray ADDRESS")
    if a.retries < 0:
        ap.error("--retries: 0 or more")
    if a.profile_out is not None and not a.profile:
        ap.error("--profile-out needs --profile")
    if a.profile_out is not None and not a.profile_out.resolve().parent.is_dir():
        ap.error(f"--profile-out: {a.profile_out.parent} is not a folder")
    sc, cc = cpus(a.server_cpus), cpus(a.client_cpus)
    per_write = a.events_per_write or (4 if a.burst else 1)
    per_chunk = a.tokens_per_chunk or (1 if a.burst else 3)
    step = a.step_ms or (8.0 if a.burst else 20.0)
    shape = ("--events-per-write", str(per_write), "--tokens-per-chunk", str(per_chunk), "--step-ms", str(step))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"event source(s) {a.sources} on CPUs {sc}, loadgate on CPUs {cc}; a write every {step:g} ms per stream "
          f"carrying {per_write} event(s) of {per_chunk} token(s), 60 tokens per request, "
          f"{a.per_stream} requests per stream")
    if a.profile:
        for n in a.streams:
            r = one(n, a.workers[0], a.per_stream, a.sources, sc, cc, prof=True, shape=shape,
                    prof_out=None if a.profile_out is None else a.profile_out.with_suffix(f".{n}.prof"))
            show({**r, "reps": 1})
            print(r["profile"])
        return
    if a.capacity:
        capacity(a, sc, cc, shape)
        return
    if a.scale:
        figures = []
        for w in a.workers:
            n, best, valid = 64 * w, None, None
            while n <= a.max_streams:
                r = median([one(n, w, a.per_stream, a.sources, sc, cc, shape=shape) for _ in range(a.reps)])
                show(r)
                if r["p99"] > 1.0 or r["code"] not in (0, 11, 30):
                    break
                best = r
                if r["code"] in (0, 11):
                    valid = r
                n *= 2
            figures.append((w, best, valid))
        print("\nscaling (events/s at the largest stream count doubled from 64 per worker):")
        base = figures[0][1]["rate"] if figures and figures[0][1] else None
        base_v = figures[0][2]["rate"] if figures and figures[0][2] else None
        for w, best, valid in figures:
            b = f"{best['rate']:>9,.0f} ev/s ({best['streams']} streams)" if best else "none"
            v = f"{valid['rate']:>9,.0f} ev/s ({valid['streams']} streams)" if valid else "none"
            lin = f" = {best['rate'] / base / w:.2f} x linear" if best and base else ""
            lin_v = f" = {valid['rate'] / base_v / w:.2f} x linear" if valid and base_v else ""
            print(f"  workers {w}: client-added delay p99 <= 1 ms: {b}{lin};  verdict valid (stamp bound "
                  f"within budget): {v}{lin_v}")
        return
    results: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for _ in range(a.reps):  # interleaved: drift hits every configuration alike
        for w in a.workers:
            for n in a.streams:
                results.setdefault((n, w), []).append(one(n, w, a.per_stream, a.sources, sc, cc, shape=shape))
    for runs in results.values():
        show(median(runs))


if __name__ == "__main__":
    main()
