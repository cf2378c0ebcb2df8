"""Thresholds with `abort_on_fail` watched while a measured level runs, in a process of their own.

The receive loop decodes nothing during a phase (`loadgate.load.recorder`): each finished exchange
reaches the phase's exchange log in the run folder within about a second, in batches. The watcher
process tails those logs (the measured phase's own: one per client process), decodes the new
exchanges into records, and judges the thresholds on the level's requests so far
(`loadgate.analysis.so_far`) every `POLL_S`. A threshold that fails trips the abort once: its words
go to `abort.json` in the run folder (as the circuit breaker's do, `loadgate.load.recorder.Breaker`;
the first to write it names the trigger) and a shared flag; the parent's `AbortWatch.poll`, a task
that reads the flag every `POLL_S`, stops the run through the same stop flag as the breaker
(`StopFlag.abort`: no new request, those in flight cut after `load.grace_s` and kept as errors of
kind `aborted`; with worker processes those in flight finish, as after the breaker). Nothing is
added to the receive loop but that task's wake every `POLL_S`; the watcher runs at a lower priority
(`NICE`), so that on a machine short of cores the receive loop is not the one that waits.

The watcher ends when the parent sends its end (`AbortWatch.close`) or, a run killed outright, when it
sees the parent gone (within a poll). A level's watch ends when its measured phase does (`AbortWatch.end`, under the flag's lock): a
threshold that fails only on the level's last requests is judged at its end, like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson

from loadgate.analysis.so_far import SoFar, Trip, Watched
from loadgate.config.profile import Profile
from loadgate.jsonutil import clean
from loadgate.load.exchanges import Tail
from loadgate.load.recorder import exchange_record, read_abort
from loadgate.load.stopflag import StopFlag
from loadgate.load.target import decode

POLL_S = 0.25  # the watcher reads the logs, and the parent its flag, this often
NICE = 10  # the watcher's lower priority
READY_S = 60.0  # the longest the watcher may take to start (a busy machine's imports)


def watched(profile: Profile) -> list[Watched]:
    """The profile's thresholds with `abort_on_fail`, with their delays."""
    return [Watched(t, delay) for t, delay in profile.aborting_thresholds()]


class AbortWatch:
    """The parent's side of the watcher process, kept for a whole run: `level` starts watching a
    measured phase, `poll` (a task for the phase) stops the run when it trips, `end` ends the phase's
    watch, `close` ends the process."""

    def __init__(self, profile: Profile, run_dir: Path) -> None:
        self.run_dir = run_dir
        ctx = mp.get_context("spawn")
        self.active = ctx.Value("q", 0)  # the level being watched (its number in this run), 0 for none
        self.tripped = ctx.RawValue("b", 0)  # set by the watcher under `active`'s lock
        ready = ctx.RawValue("b", 0)
        self.inbox: Any = ctx.Queue()
        self.count = 0
        self.proc = ctx.Process(target=_watch, daemon=True, args=(
            watched(profile), profile.load.stream, str(run_dir), self.inbox, self.active, self.tripped, ready))
        self.proc.start()
        # started before the first level, and awaited: its start (imports) is no part of a window
        deadline = perf_counter_ns() + int(READY_S * 1e9)
        while not ready.value and self.proc.is_alive() and perf_counter_ns() < deadline:
            time.sleep(0.01)
        if not ready.value:
            self.close()
            raise RuntimeError(f"the abort_on_fail watcher process did not start within {READY_S:g} s")

    def level(self, tag: str, start_ns: int) -> None:
        """Watch the measured phase `tag` (its exchange logs), begun at `start_ns`."""
        self.count += 1
        with self.active.get_lock():
            self.active.value = self.count
        self.inbox.put((self.count, tag, start_ns))

    def end(self) -> None:
        """The phase ended: nothing trips for it from now on (a trip before is in abort.json)."""
        with self.active.get_lock():
            self.active.value = 0

    async def poll(self, stop: StopFlag, now: bool) -> None:
        """Until cancelled: once the watcher trips, abort through `stop` (`now`: cut the requests in
        flight after the grace, as the breaker in this process does; else they finish)."""
        while not self.tripped.value:  # one byte, read whole
            await asyncio.sleep(POLL_S)
        stop.abort(read_abort(self.run_dir) or "a threshold with abort_on_fail failed", now=now)

    def close(self) -> None:
        """End the process and let go of what it shared (a run cut short keeps the heap frozen,
        `loadgate.load.workers.prepare`: dropped here, the shared locks are not left to exit)."""
        self.end()
        with contextlib.suppress(OSError, ValueError):
            self.inbox.put(None)
            self.inbox.close()
            self.inbox.join_thread()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        del self.inbox, self.active, self.tripped


@contextlib.contextmanager
def watching(profile: Profile, run_dir: Path) -> Iterator[AbortWatch | None]:
    """The run's watcher process while the block runs, when the profile has thresholds with
    `abort_on_fail` (else None and no process)."""
    if not watched(profile):
        yield None
        return
    watch = AbortWatch(profile, run_dir)
    try:
        yield watch
    finally:
        watch.close()


class _Level:
    """One measured phase being watched: its logs as they grow, and its figures so far."""

    def __init__(self, number: int, tag: str, start_ns: int, ws: list[Watched], stream: bool,
                 run_dir: Path) -> None:
        self.number, self.tag, self.start_ns, self.dir = number, tag, start_ns, run_dir / "exchanges"
        self.so_far = SoFar(ws, stream)
        self.tails: dict[Path, Tail] = {}

    def step(self) -> Trip | None:
        """Read what the logs gained and judge the thresholds on the level so far."""
        from loadgate.engine.adapters import adapter_for

        for path in sorted(self.dir.glob(f"{self.tag}-*.lgx")):  # the warmup's logs are {tag}w-*
            tail = self.tails.setdefault(path, Tail(path))
            for x in tail.new():
                m = tail.meta
                if x.warmup or m is None:
                    continue
                d = decode(adapter_for(str(m["api"])), bool(m["stream"]), x.raw, int(m["max_event_bytes"]))
                self.so_far.add(exchange_record(x, d, m.get("prompt_overhead")))
        return self.so_far.check((perf_counter_ns() - self.start_ns) / 1e9)

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()


def _watch(ws: list[Watched], stream: bool, run_dir_s: str, inbox: Any, active: Any, tripped: Any,
           ready: Any) -> None:
    """The watcher process (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends this process
    with contextlib.suppress(OSError):  # on a machine short of cores the client's loop comes first
        os.nice(NICE)
    import numpy  # noqa: F401 - imported now, while the parent waits, not at the first judgement

    from loadgate.engine.adapters import adapter_for  # noqa: F401 - (the same)

    run_dir = Path(run_dir_s)
    parent = mp.parent_process()  # a run killed outright (SIGKILL) never sends the end: its death ends this
    ready.value = 1
    level: _Level | None = None
    while True:
        try:
            msg = inbox.get(timeout=POLL_S)
        except queue.Empty:
            msg = ()
        if msg is None or (parent is not None and not parent.is_alive()):
            break
        if msg:
            if level is not None:
                level.close()
            level = _Level(msg[0], msg[1], msg[2], ws, stream, run_dir)
        if level is None:
            continue
        if active.value != level.number:  # its phase ended
            level.close()
            level = None
            continue
        trip = level.step()
        if trip is not None:
            _trip(trip, level.number, run_dir, active, tripped)
    if level is not None:
        level.close()


def _trip(trip: Trip, number: int, run_dir: Path, active: Any, tripped: Any) -> None:
    """Name the trigger in abort.json (unless the breaker already did) and raise the flag, while the
    level is still the one watched."""
    with active.get_lock():
        if active.value != number:
            return
        with contextlib.suppress(OSError), open(run_dir / "abort.json", "x") as f:
            f.write(orjson.dumps(clean({"trigger": trip.words, **trip.to_json()})).decode())
        tripped.value = 1
