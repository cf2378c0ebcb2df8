"""The abort_on_fail watcher process (`loadgate.load.abort_watch`) on hand-written exchange logs:
it judges the measured phase's logs (not the warmup's), names the threshold in abort.json and
raises the flag the parent's poll turns into an abort; after `end`, nothing trips for that phase."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from time import perf_counter_ns

from loadgate.config.profile import Profile, ThresholdSpec
from loadgate.jsonutil import load_json
from loadgate.load.abort_watch import POLL_S, AbortWatch
from loadgate.load.exchanges import Exchange, ExchangeLog
from loadgate.load.stopflag import StopFlag
from loadgate.load.target import Raw

MS = 1_000_000
META = {"api": "openai-completions", "stream": True, "max_event_bytes": 1 << 20, "prompt_overhead": 0}


def profile() -> Profile:
    return Profile(thresholds={"errors": (ThresholdSpec("count == 0", abort_on_fail=True),)})


def failing(i: int, warmup: bool = False) -> Exchange:
    raw = Raw(start_ns=1 * MS, headers_ns=2 * MS, end_ns=3 * MS, status=500, reads=[(3 * MS, b"server on fire")])
    return Exchange(i, warmup, 8, 2, 0, 4, 0, None, raw)


def log(run_dir: Path, tag: str) -> ExchangeLog:
    return ExchangeLog(run_dir / "exchanges" / f"{tag}-records.lgx", META, batch_bytes=1)  # on disk at once


def test_the_measured_phases_failure_trips_it_and_the_warmups_does_not(tmp_path: Path) -> None:
    watch = AbortWatch(profile(), tmp_path)
    try:
        watch.level("run-L4", perf_counter_ns())
        warm = log(tmp_path, "run-L4w")
        warm.add(failing(0, warmup=True))
        time.sleep(6 * POLL_S)
        assert not (tmp_path / "abort.json").exists()  # the warmup's log is not the phase's
        measured = log(tmp_path, "run-L4")
        measured.add(failing(1))
        stop = StopFlag()
        asyncio.run(asyncio.wait_for(watch.poll(stop, now=False), 60))
        assert stop.is_set() and stop.why is not None
        assert stop.why.startswith('threshold errors "count == 0" (abort_on_fail) failed ')
        abort = load_json(tmp_path / "abort.json")
        assert abort["metric"] == "errors" and abort["measured"] == 1.0 and abort["requests"] == 1
        warm.close()
        measured.close()
    finally:
        watch.close()


def test_nothing_trips_for_a_phase_that_ended(tmp_path: Path) -> None:
    watch = AbortWatch(profile(), tmp_path)
    try:
        watch.level("run-L1", perf_counter_ns())
        watch.end()
        measured = log(tmp_path, "run-L1")
        measured.add(failing(0))
        time.sleep(6 * POLL_S)
        assert not (tmp_path / "abort.json").exists() and not watch.tripped.value
        measured.close()
    finally:
        watch.close()


def test_the_watcher_ends_when_the_run_is_killed(tmp_path: Path) -> None:
    """A run killed outright (SIGKILL: a CI job's timeout) runs no `close`: the watcher, which polled
    its inbox for ever, outlived it; it now sees its parent gone and ends within a few polls."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    code = ("import sys, time; from pathlib import Path; from tests.load.test_abort_watch import profile; "
            "from loadgate.load.abort_watch import AbortWatch; "
            f"w = AbortWatch(profile(), Path({str(tmp_path)!r})); print(w.proc.pid, flush=True); time.sleep(600)")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        pid = int(run.stdout.readline())
        watcher = psutil.Process(pid)
        assert watcher.is_running()
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        assert run.stdout is not None
        run.stdout.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if watcher.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(POLL_S)
    else:
        watcher.kill()
        raise AssertionError("the watcher outlived its killed run")
