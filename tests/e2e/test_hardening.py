"""Hardening: what a hostile server sends, signals, disks, limits, secrets, TLS and names cannot make
loadgate hang, grow without bound, leave processes or half lines behind, or write a secret.

Servers here are raw asyncio servers on loopback (`tests.hostile`), the simulator, or the simulator
over TLS; every limit is the default unless a test says otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
import yaml

from loadgate.cli import main
from loadgate.engine.adapters.base import Decoded
from loadgate.jsonutil import load_json
from loadgate.load.target import LiveTarget, TargetSpec, decode, fetch
from loadgate.load.transport import Limits
from loadgate.net.http import make_session
from loadgate.records import read_records
from tests import hostile
from tests.fixtures_path import REPO
from tests.profiles import LAX_HEALTH


def fetch_once(url: str, *, timeout_s: float = 10.0, limits: Limits | None = None, streams: int = 1
               ) -> tuple[list[Decoded], float, float]:
    """POST `streams` requests at once with loadgate's own transport; (decoded, seconds, peak RSS
    growth in MB measured every 10 ms in a thread)."""
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    th = threading.Thread(target=sample, daemon=True)
    th.start()

    async def go() -> list[Decoded]:
        async with make_session() as session:
            t = LiveTarget(TargetSpec(url, "openai-completions", "m", timeout_s, limits=limits or Limits()), session)
            raws = await asyncio.gather(*(fetch(t, b'{"prompt": "x"}', f"r{k}") for k in range(streams)))
            out = [decode(t.adapter, True, raw) for raw in raws]
            assert t.pool is not None
            t.pool.close()
            return out

    t0 = time.perf_counter()
    try:
        decoded = asyncio.run(go())
    finally:
        stop.set()
        th.join()
    return decoded, time.perf_counter() - t0, (peak[0] - base) / 2**20


def test_an_endless_fast_response_is_cut_by_the_response_limit_with_memory_bounded():
    with hostile.HostileServer(hostile.endless_fast) as srv:
        (d,), seconds, grew_mb = fetch_once(srv.url, timeout_s=10)
    assert d.error is not None and d.error.kind == "response_too_large", d.error
    assert seconds < 10 and grew_mb < 100, (seconds, grew_mb)


def test_many_endless_responses_together_are_cut_by_the_memory_budget():
    """Each under its own limit, all together over the budget: the budget cuts them."""
    limits = Limits(max_response_bytes=1 << 30, memory_budget_bytes=48 << 20)
    with hostile.HostileServer(hostile.endless_fast) as srv:
        decoded, seconds, grew_mb = fetch_once(srv.url, timeout_s=20, limits=limits, streams=6)
    kinds = {d.error.kind for d in decoded if d.error is not None}
    assert "memory_budget" in kinds and kinds <= {"memory_budget", "response_too_large"}, kinds
    assert seconds < 20 and grew_mb < 200, (seconds, grew_mb)


@pytest.mark.parametrize("behaviour", ["endless_fast", "endless_tiny"])
def test_a_64_mb_budget_holds_20_endless_streams_within_128_mb_of_rss(tmp_path, behaviour):
    """`loadgate run` with `memory_budget_mb: 64` against 20 streams that never end, of large events
    and of tiny ones (a read's objects cost more than its bytes): the process's RSS grows by at most
    128 MB, and the budget, not the timeout, ends every request (a timeout no busy machine reaches:
    in CI, beside a compile and a training, the tiny events took over 60 s to fill 64 MB)."""
    with hostile.HostileServer(getattr(hostile, behaviour)) as srv:
        prof = tmp_path / "mem.yaml"
        prof.write_text(yaml.safe_dump({
            "name": "mem", "target": {"endpoint": srv.url, "model": "m", "timeout_s": 900,  # the budget ends them
                                      "limits": {"memory_budget_mb": 64, "max_response_mb": 4096}},
            "workload": {"requests": 20, "tokenizer": "none", "input_len": {"dist": "fixed", "value": 4},
                         "output_len": {"dist": "fixed", "value": 2}},
            "load": {"concurrency": 20}, "health": LAX_HEALTH, "output": {"dir": str(tmp_path / "out"), "run_id": "r"}}))
        p = loadgate_proc("run", "-q", "--unverified", str(prof))
        proc = psutil.Process(p.pid)
        try:
            assert srv.posted.wait(60), "no request arrived"
            deadline = time.monotonic() + 120  # the base once every stream is open: the client's own
            while srv.connections < 20 and time.monotonic() < deadline:  # start-up is not a buffer
                time.sleep(0.02)
            base = peak = proc.memory_info().rss
            while p.poll() is None:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, proc.memory_info().rss)
                time.sleep(0.02)
            p.wait(90)
        finally:
            if p.poll() is None:
                p.kill()
    grew_mb = (peak - base) / 2**20
    print(f"{behaviour}: RSS grew by {grew_mb:.0f} MB")
    assert grew_mb <= 128, f"RSS grew by {grew_mb:.0f} MB"
    recs = list(read_records(tmp_path / "out" / "r" / "records.jsonl"))
    assert len(recs) == 20 and {r.error.kind for r in recs if r.error} == {"memory_budget"}, \
        {r.error.kind if r.error else None for r in recs}


def test_a_memory_budget_above_half_the_machine_is_refused_in_one_line(tmp_path):
    prof = sim_profile(tmp_path, requests=10)
    doc = yaml.safe_load(prof.read_text())
    doc["target"]["limits"] = {"memory_budget_mb": 100_000}
    prof.write_text(yaml.safe_dump(doc))
    p = subprocess.run([sys.executable, "-m", "loadgate", "run", "-q", "--unverified", str(prof)],
                       cwd=REPO, capture_output=True, timeout=120)
    err = p.stderr.decode().strip()
    assert p.returncode == 2 and "\n" not in err, err
    assert err.startswith(f"loadgate: {prof}: target.limits.memory_budget_mb: 100000 MiB is more than half"), err
    assert "give at most" in err and not (tmp_path / "out").exists()


def test_an_endless_slow_response_ends_at_the_request_timeout():
    with hostile.HostileServer(hostile.endless_slow) as srv:
        (d,), seconds, _ = fetch_once(srv.url, timeout_s=1.5)
    assert d.error is not None and d.error.kind == "timeout" and 1.4 < seconds < 6, (d.error, seconds)


def test_a_header_block_that_never_ends_is_cut_at_the_header_limit_within_a_second():
    with hostile.HostileServer(hostile.header_flood) as srv:
        (d,), seconds, _ = fetch_once(srv.url, timeout_s=30)
    assert d.error is not None and d.error.kind == "header_too_large", d.error
    assert seconds < 1.0, seconds


def test_interim_1xx_responses_are_skipped_and_the_request_succeeds():
    with hostile.HostileServer(hostile.interim_then_stream) as srv:
        (d,), _, _ = fetch_once(srv.url)
    assert d.error is None and d.text == " a b" and d.finish_reason == "length"


def test_an_idle_timeout_ends_a_response_that_goes_quiet():
    async def quiet(reader: Any, writer: Any, body: bytes) -> None:
        writer.write(hostile.SSE_HEAD + hostile.sse(hostile.COMPLETION))
        await writer.drain()
        await asyncio.sleep(30)

    from loadgate.load.target import LiveTarget as _T  # noqa: F401  (the same transport as above)

    with hostile.HostileServer(quiet) as srv:
        async def go() -> Any:
            async with make_session() as session:
                t = LiveTarget(TargetSpec(srv.url, "openai-completions", "m", 30.0, idle_timeout_s=0.5), session)
                raw = await fetch(t, b"{}", "q")
                assert t.pool is not None
                t.pool.close()
                return decode(t.adapter, True, raw)

        t0 = time.perf_counter()
        d = asyncio.run(go())
        seconds = time.perf_counter() - t0
    assert d.error is not None and d.error.kind == "idle_timeout" and seconds < 5, (d.error, seconds)


# --- the command line against hostile servers: Ctrl-C takes effect within 2 s ---------------------

def hostile_profile(tmp: Path, url: str, **load: Any) -> Path:
    p = tmp / "hostile.yaml"
    p.write_text(yaml.safe_dump({
        "name": "hostile", "target": {"endpoint": url, "model": "m", "timeout_s": 60},
        "workload": {"requests": 1000, "tokenizer": "none", "input_len": {"dist": "fixed", "value": 4},
                     "output_len": {"dist": "fixed", "value": 2}},
        "load": {"concurrency": 2, **load}, "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": "r"}}))
    return p


_PROCS: list[subprocess.Popen[bytes]] = []


def loadgate_proc(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:
    """`python -m loadgate ARGS` with its output kept; ended and its pipes closed after the test."""
    p = subprocess.Popen([sys.executable, "-m", "loadgate", *args], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, **kw)
    _PROCS.append(p)
    return p


@pytest.fixture(autouse=True)
def _no_process_or_pipe_left() -> Iterator[None]:
    yield
    while _PROCS:
        p = _PROCS.pop()
        if p.poll() is None:
            p.kill()
        p.wait(30)
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.parametrize("behaviour", ["endless_fast", "endless_slow", "header_flood", "interim_then_stream"])
def test_ctrl_c_takes_effect_within_two_seconds_against_a_hostile_server(tmp_path, behaviour):
    with hostile.HostileServer(getattr(hostile, behaviour)) as srv:
        p = loadgate_proc("run", "-q", "--unverified", str(hostile_profile(tmp_path, srv.url)))
        try:
            assert srv.posted.wait(60), "no request arrived"
            time.sleep(0.3)  # requests in flight: the signal lands mid-stream
            t0 = time.perf_counter()
            p.send_signal(signal.SIGINT)
            p.wait(30)
            seconds = time.perf_counter() - t0
        finally:
            if p.poll() is None:
                p.kill()
    err = p.stderr.read().decode() if p.stderr else ""
    assert p.returncode == 130 and seconds < 2.0, (p.returncode, seconds, err)
    assert "Traceback" not in err and "interrupted by SIGINT" in err
    assert load_json(tmp_path / "out" / "r" / "summary.json")["interrupted"] is True


# --- signals mid-run: no child process left, the summary says interrupted -----------------------

def sim_profile(tmp: Path, *, requests: int = 3000, workers: int = 1, warmup: int = 0, **extra: Any) -> Path:
    doc = {"name": "sig", "target": {"endpoint": "embedded", "sim": {"decode_step_us": 3000}},
           "workload": {"requests": requests, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 32}},
           "load": {"concurrency": 4, "workers": workers, "warmup_requests": warmup}, "health": LAX_HEALTH,
           "output": {"dir": str(tmp / "out"), "run_id": "r"}}
    doc.update(extra)
    p = tmp / "sig.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def served(url: str) -> int:
    """Requests the simulator finished, from its ground-truth log."""
    with urllib.request.urlopen(url + "/sim/truth", timeout=10) as r:
        return sum(1 for line in r.read().splitlines() if line)


def until_served(run: Path, n: int, timeout_s: float = 90) -> str:
    """Wait until the run's embedded simulator (its URL from meta.json) finished `n` requests."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (run / "meta.json").exists():
        time.sleep(0.05)
    url = load_json(run / "meta.json")["engine_url"]
    while time.monotonic() < deadline and served(url) < n:
        time.sleep(0.05)
    return str(url)


@pytest.mark.parametrize("sig,workers", [(signal.SIGTERM, 2), (signal.SIGINT, 1)])
def test_a_signal_mid_run_leaves_no_child_process_and_a_summary_marked_interrupted(tmp_path, sig, workers):
    p = loadgate_proc("run", "-q", "--unverified", str(sim_profile(tmp_path, workers=workers, warmup=8)))
    me = psutil.Process(p.pid)
    try:
        until_served(tmp_path / "out" / "r", 8 + 8)  # the warmup and some measured requests
        children = me.children(recursive=True)
        assert len(children) >= 1 + (workers if workers > 1 else 0), children  # the simulator (+ workers)
        # this run's simulator, and its config file when it was started with one (`--config PATH`;
        # the early start reads the profile itself); other tests' simulators come and go meanwhile
        sims = [c.cmdline() for c in children if "loadgate.sim" in c.cmdline()]
        assert len(sims) == 1, sims
        configs = [Path(a[a.index("--config") + 1]) for a in sims if "--config" in a]
        assert all(c.exists() for c in configs), configs
        p.send_signal(sig)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [c.pid for c in alive]
    s = load_json(tmp_path / "out" / "r" / "summary.json")
    assert s["interrupted"] is True and 0 < s["levels"]["4"]["requests"] < 3000
    assert not list((tmp_path / "out" / "r").glob(".part-*"))
    assert not [c for c in configs if c.exists()]  # the simulator's config file is removed with it
    assert main(["report", str(tmp_path / "out" / "r")]) == 128 + sig


def test_a_run_interrupted_during_its_check_names_only_the_files_it_wrote(tmp_path):
    """SIGINT while the exactness check runs (slow steps: the check takes many seconds): exit 130,
    and the closing lines name the verdict it wrote, not records or a summary it never wrote."""
    from tests.profiles import tiny_corpus

    doc = yaml.safe_load(sim_profile(tmp_path, requests=20).read_text())
    doc["target"]["sim"] = {"decode_step_us": 60000}
    doc["exactness"] = {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp_path))}
    prof = tmp_path / "check.yaml"
    prof.write_text(yaml.safe_dump(doc))
    p = loadgate_proc("run", str(prof))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tmp_path / "out" / "r").exists():
            time.sleep(0.05)
        time.sleep(1.0)  # the check is under way (its three cases take seconds at 60 ms a step)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    text = out.decode()
    assert p.returncode == 130, (text, err.decode())
    assert "records:" not in text and "summary:" not in text and "plots:" not in text, text
    assert f"verdict: {tmp_path / 'out' / 'r' / 'verdict.json'}" in text, text
    assert not (tmp_path / "out" / "r" / "records.jsonl").exists()


def test_report_says_interrupted(tmp_path, capsys):
    p = loadgate_proc("run", "-q", "--unverified", str(sim_profile(tmp_path)))
    try:
        while not (tmp_path / "out" / "r" / "records.jsonl").exists():
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert main(["report", str(tmp_path / "out" / "r")]) == 130
    out = capsys.readouterr().out
    assert "INTERRUPTED: a signal stopped the run" in out and "outcome: INTERRUPTED (exit 130" in out


# --- damaged records ------------------------------------------------------------------------------

def small_run(tmp: Path) -> Path:
    assert main(["run", "-q", "--unverified", str(sim_profile(tmp, requests=12))]) == 11
    return tmp / "out" / "r"


def test_a_corrupt_or_truncated_records_file_is_reported_damaged_with_its_line_numbers(tmp_path, capsys):
    run = small_run(tmp_path)
    lines = (run / "records.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = b'{"v": 2, "i": "garbage"}\n'
    lines[5] = b"not json at all\n"
    (run / "records.jsonl").write_bytes(b"".join(lines[:-1]) + lines[-1][:20])  # the last line cut short
    capsys.readouterr()
    assert main(["report", str(run)]) == 5
    captured = capsys.readouterr()
    assert "DAMAGED: 2 corrupt line(s) in records.jsonl (line 3, 6)" in captured.out
    assert f"records.jsonl line {len(lines)} cut short" in captured.out
    assert "run folder damaged" in captured.err and "\n" not in captured.err.strip()
    assert main(["report", "--format", "json", str(run)]) == 5
    assert orjson.loads(capsys.readouterr().out)["outcome"]["outcome"] == "damaged"


# --- full disks ---------------------------------------------------------------------------------

def _kept(out: str) -> int:
    """The measured requests a report says an incomplete run kept."""
    m = re.search(r"; (\d+) of \d+ measured requests kept", out)
    assert m, out
    return int(m.group(1))


def test_a_disk_full_mid_phase_stops_the_run_at_that_batch_with_exit_4_and_report_says_incomplete(
        tmp_path, capsys, monkeypatch):
    """The phase's exchange log meets ENOSPC at its third batch: the run stops there (exit 4, one
    line naming the log), not at the end of its 3,000 requests; the whole frames before the failure
    become records; `report` judges the folder INCOMPLETE with the run's own code, 4."""
    real_write, batches = os.write, [0]

    def write(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".lgx"):
            batches[0] += 1
            if batches[0] > 3:  # the file's header, two batches: then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    code = main(["run", "-q", "--unverified", str(sim_profile(tmp_path, requests=3000))])
    monkeypatch.setattr(os, "write", real_write)
    err = capsys.readouterr().err.strip()
    assert code == 4 and "\n" not in err and "No space left on device" in err and ".lgx" in err, err
    run = tmp_path / "out" / "r"
    data = (run / "records.jsonl").read_bytes()
    assert data.endswith(b"\n") and all(orjson.loads(line) for line in data.splitlines())
    assert main(["report", str(run)]) == 4
    out = capsys.readouterr().out
    assert "outcome: INCOMPLETE (exit 4: results could not be written)" in out, out
    assert "no summary.json or verdict.json" in out
    assert 0 < _kept(out) == len(data.splitlines()) < 1500  # stopped at the batch, far from the end


def test_a_full_tmpfs_gives_exit_4_and_no_half_line(tmp_path, capsys):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root); the simulated write error above covers the path")
    try:
        prof = sim_profile(tmp_path, requests=4000, output={"dir": str(mnt), "run_id": "r"})
        p = subprocess.run([sys.executable, "-m", "loadgate", "run", "-q", "--unverified", str(prof)],
                           cwd=REPO, capture_output=True, timeout=300)
        err = p.stderr.decode().strip()
        assert p.returncode == 4 and "No space left on device" in err and "Traceback" not in err, err
        data = (mnt / "r" / "records.jsonl").read_bytes()
        assert not data or data.endswith(b"\n")
        assert all(orjson.loads(line) for line in data.splitlines())
        assert main(["report", str(mnt / "r")]) == 4
        out = capsys.readouterr().out
        assert "INCOMPLETE (exit 4" in out and 0 < _kept(out) < 4000, out  # the log's whole frames, decoded
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _gone(proc: psutil.Process, within: float = 30.0) -> bool:
    try:
        proc.wait(within)
        return True
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False


def test_a_sigkill_mid_phase_keeps_all_but_the_last_batch_and_report_says_incomplete(tmp_path, capsys):
    """SIGKILL (no handler runs) in the middle of a 3,000-request phase: every request the
    simulator had finished more than a batch's age before the kill is in the folder (its exchange
    log, decoded by `report`), and `report` judges the folder INCOMPLETE, exit 5."""
    from loadgate.load.exchanges import BATCH_S
    from loadgate.load.recorder import recover

    truth_file = tmp_path / "truth-{pid}.jsonl"  # the simulator writes its truth there when it stops
    p = loadgate_proc("run", "-q", "--unverified", str(sim_profile(tmp_path)),
                      env={"LOADGATE_SIM_TRUTH_LOG": str(truth_file)})
    me = psutil.Process(p.pid)
    children: list[psutil.Process] = []
    try:
        until_served(tmp_path / "out" / "r", 150)
        time.sleep(BATCH_S + 0.5)  # so that the 150 served are a batch's age old when the kill comes
        children = me.children(recursive=True)
        kill_ns = time.perf_counter_ns()
        p.kill()
        p.wait(30)
        # the simulator outlives no command that started it: it stops on its own (and writes its truth)
        assert all(_gone(c) for c in children), "a child outlived the SIGKILLed command"
        logs = list(tmp_path.glob("truth-*.jsonl"))
        assert len(logs) == 1, logs
        truth = [orjson.loads(line) for line in logs[0].read_bytes().splitlines() if line]
    finally:
        if p.poll() is None:
            p.kill()
        for c in children:
            with contextlib.suppress(psutil.Error):
                c.kill()
    run = tmp_path / "out" / "r"
    assert (run / "state.json").exists() and not (run / "summary.json").exists()
    recovered, logs = recover(run)
    assert logs and recovered
    kept = {r.i for r in recovered}
    settled = kill_ns - int((BATCH_S + 0.5) * 1e9)  # finished this long before the kill: its batch was written
    due = {int(t["request_id"].rsplit("-", 1)[1]) for t in truth if t["end_ns"] and t["end_ns"] < settled}
    assert len(due) >= 100 and due <= kept, sorted(due - kept)[:10]
    assert main(["report", str(run)]) == 5
    out = capsys.readouterr().out
    assert "outcome: INCOMPLETE (exit 5: run folder damaged or cut short)" in out, out
    assert "the run never finished (killed, or still running as pid" in out
    assert _kept(out) == len(kept) and "decoded from the exchange logs it left" in out


# --- open files -----------------------------------------------------------------------------------

def test_too_few_open_files_for_the_concurrency_is_a_preflight_error(tmp_path):
    prof = sim_profile(tmp_path, requests=10, load={"concurrency": 300})
    p = subprocess.run(["bash", "-c", f"ulimit -n 256 && exec {sys.executable} -m loadgate run -q --unverified {prof}"],
                       cwd=REPO, capture_output=True, timeout=120)
    err = p.stderr.decode().strip()
    assert p.returncode == 3 and "ulimit -n" in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()  # nothing was started


# --- names ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,why", [("../x", "no slashes"), ("..", "not . or .."), ("a\x00b", "control character"),
                                      ("a\nb", "control character"), ("-rf", "starting with '-'")])
def test_run_names_that_would_leave_the_output_folder_or_hold_control_characters_are_refused(tmp_path, capsys,
                                                                                             name, why):
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"name": name}))
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert why in err and "name" in err and "\n" not in err.strip()
