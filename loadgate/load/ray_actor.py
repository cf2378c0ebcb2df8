"""One Ray actor of a distributed run (`load.distributed`): its share of the plan, sent from its node.

The actor is a coordinator, not a client: it starts `load.workers` local worker processes
(`loadgate.load.workers.WorkerGroup`, the same receive path as a run on one host, single-threaded
processes whose stamps `loadgate.load.turns` can bound), hands them each phase, and meanwhile relays
what they log: every poll of the driver takes the whole frames appended to the workers' exchange logs
since the last one (`exchanges.ByteTail`), so a node that is lost takes at most its last second or so
of exchanges with it. The driver appends them to the run folder and decodes them after the phase.

Its place among every host's workers is (actor × workers + j, actors × workers): an open loop sends
request k from worker k mod that total, all at the same intended times on the driver's time line
(each node's wall-clock offset to the driver is measured and folded into its start and origin);
a closed loop draws the next plan index from the run's one counter (an `IndexCounter` actor), fetched ahead
by a thread here (an index waiting for each slot, drawn a quarter of the slots at a time; the number in
flight stays the level's).

Secrets never travel: the driver sends the profile as written (`${NAME}` references, the name of
`target.api_key_env`) and a target spec with no headers; each actor reads the values from its own
node's environment, as a run on that node would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from loadgate.config.profile import Profile
from loadgate.core.clocks import perf_at, wall_ns
from loadgate.errors import LoadgateError
from loadgate.load.exchanges import ByteTail
from loadgate.load.executors import Concurrency, StopFlag
from loadgate.load.recorder import read_abort
from loadgate.load.target import TargetSpec
from loadgate.load.workers import Phase, WorkerGroup, _share
from loadgate.load.workload.dataset import Prepared
from loadgate.net.connect import run_async
from loadgate.net.http import session_settings
from loadgate.secrets import registered

COUNTER_S = 60.0  # a draw from the shared counter not answered within this: the phase is cut short, and said


ACTOR_NICE = 10  # the actor's own threads, below its workers (the measuring processes) on a shared core


def yield_to_workers() -> None:
    """Every thread of this process (the actor's and Ray's own: its RPC and heartbeat threads; those it
    starts later inherit it) at nice `ACTOR_NICE` or above, once the workers are started (they keep
    theirs): a worker woken by a socket then gets its core from them at once instead of waiting out
    their slice, so the actor's coordination does not hold up its stamps. Only ever raised (a thread
    already nicer stays so; raising needs no privilege); where it fails nothing changes. Threads that
    appear meanwhile (one not yet reniced may start another) are taken in a second pass."""
    done: set[int] = set()
    for _ in range(5):
        try:
            tids = {int(t) for t in os.listdir("/proc/self/task")} - done
        except (OSError, ValueError):
            return
        if not tids:
            return
        for tid in tids:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, max(ACTOR_NICE, os.getpriority(os.PRIO_PROCESS, tid)))
        done |= tids


class IndexCounter:
    """The run's shared counter of a closed loop's plan indices (a Ray actor): `take(m)` hands out the
    next `m` (fewer at the end of the phase's range)."""

    def __init__(self) -> None:
        self.next, self.end = 0, 0

    def reset(self, start: int, end: int) -> None:
        self.next, self.end = start, end

    def take(self, m: int) -> list[int]:
        got = list(range(self.next, min(self.end, self.next + m)))
        self.next += len(got)
        return got


def node_env_spec(spec: TargetSpec, profile: Profile) -> TargetSpec:
    """The driver's spec with this node's headers and `extra_body` (`${NAME}` and `api_key_env` read
    from this node's environment); a missing variable raises the same UsageError as on one host."""
    settings = session_settings(profile.target, Path)
    return dataclasses.replace(spec, headers=dict(settings.headers), extra_body=dict(settings.extra_body),
                               secrets=registered())


class LoadActor:
    """Actor `a` of `actors`, with `workers` local processes (see the module docstring)."""

    def __init__(self, a: int, actors: int, workers: int, spec: TargetSpec, profile: Profile, pool: list[int],
                 round_: int, dataset: Prepared | None, counter: Any) -> None:
        self.a, self.actors, self.workers, self.counter = a, actors, workers, counter
        self.dir = Path(tempfile.mkdtemp(prefix="loadgate-actor-"))
        self.stop_flag = StopFlag()
        self.init_error: tuple[str, str] | None = None  # (kind, one line): told by `info`, not a dead actor
        try:
            here = node_env_spec(spec, profile)
        except LoadgateError as e:  # a key this node's environment lacks: the run's own one-line error
            self.init_error = (type(e).__name__, e.message)
            return
        self.group = WorkerGroup(here, profile, pool, workers, self.dir, self.stop_flag,
                                 round_, dataset, place=(a * workers, actors * workers), fed=True)
        yield_to_workers()
        self.tails: dict[str, ByteTail] = {}
        self.health: list[dict[str, Any]] | None = None
        self.error: str | None = None
        self.runner: threading.Thread | None = None
        self.relay: threading.Thread | None = None
        self.relay_stop = threading.Event()
        self.relay_error: str | None = None

    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        return {"actor": self.a, "node": ctx.get_node_id(), "host": socket.gethostname(), "ip": ip,
                "pid": os.getpid(), "workers": self.workers, "error": self.init_error}

    def clock(self) -> int:
        return wall_ns()

    def ready(self, phase: Phase, t0_wall: int, offset_ns: int) -> bool:
        assert self.init_error is None
        """Hand `phase` (its origin `t0_wall`, the driver's wall clock) to the workers; True once they
        are ready. The closed loop's draws start being fetched here."""
        here = dataclasses.replace(phase, t0_ns=perf_at(t0_wall + offset_ns))  # the origin on this host's clock
        self.health, self.error, self.relay_error = None, None, None
        self.stop_flag = StopFlag()
        self.group.stop_flag = self.stop_flag
        self.group.stopping.value = 0
        run_async(self.group.offer(here))
        if isinstance(phase.loop, Concurrency) and not phase.warmup and phase.ramp is None:
            total = self.actors * self.workers
            depth = sum(_share(phase.loop.n, total, self.a * self.workers + j) for j in range(self.workers))
            if depth:  # (an actor with no slot of this level draws nothing)
                self.relay_stop.clear()
                self.relay = threading.Thread(target=self._relay, args=(depth,), daemon=True)
                self.relay.start()
        return True

    def _relay(self, depth: int) -> None:
        """Keep a drawn index waiting for each slot: `depth` at first (every slot starts at once and
        takes one), as many again, then, each time the workers have taken a batch (a quarter of the
        slots, at least one), as many more in one call of the counter. The indices waiting plus those
        taken and not yet drawn again are always `depth`, so a slot that frees finds one waiting unless
        a whole batch was taken while the last draw was on its way; and the counter is called once a
        batch instead of once a request (234 slots of ~0.4 s requests would call it ~585 times a second,
        each a Ray RPC on the cores its worker measures on; an actor of fewer than 8 slots still draws
        one at a time). The workers' end marks follow once the counter has no more, the phase ended, or the
        counter failed. An index drawn and not sent when the phase ends early is not sent (as on one
        host, where the counter passed it)."""
        import ray

        feed, taken = self.group.feed, self.group.taken
        batch = max(1, depth // 4)
        want = depth
        try:
            while not self.relay_stop.is_set():
                try:
                    got = ray.get(self.counter.take.remote(want), timeout=COUNTER_S)
                except Exception as e:  # the counter lost or silent: the phase cannot be whole (told by `poll`)
                    self.relay_error = f"the shared counter did not answer: {type(e).__name__}"
                    self.stop_flag.set()
                    self.group.stop()
                    return
                for k in got:
                    feed.put(k)
                if len(got) < want:
                    break
                want = 0
                while want < batch and not self.relay_stop.is_set():
                    if taken.acquire(timeout=0.1):
                        want += 1
                        while taken.acquire(False):
                            want += 1
        finally:
            for _ in range(self.workers):
                feed.put(None)

    def go(self, start_wall: int, offset_ns: int) -> bool:
        """Start the phase at `start_wall` (the driver's wall clock); returns at once."""
        self.group.begin(perf_at(start_wall + offset_ns))

        def wait() -> None:
            try:
                got = run_async(self.group._collect("done", None))
                self.health = [got[j] for j in range(self.workers)]
            except BaseException as e:  # told to the driver by `poll`
                self.error = f"{type(e).__name__}: {e}"
                self.group.failed = True
                self.group._halt()
            finally:
                self._end_relay()

        self.runner = threading.Thread(target=wait, daemon=True)
        self.runner.start()
        return True

    def _end_relay(self) -> None:
        relay, self.relay = self.relay, None  # (the phase's thread and `close` may both get here)
        if relay is not None:
            self.relay_stop.set()
            relay.join(30)
            with contextlib.suppress(queue.Empty, OSError, ValueError):  # what was drawn but not sent
                while True:
                    self.group.feed.get(timeout=0.05)

    def _logs(self, whole: bool = False) -> dict[str, bytes]:
        """The new whole frames of each log; `whole`: the phase is over, so all of them (the logs are
        removed next)."""
        out = {}
        folder = self.dir / "exchanges"
        for path in sorted(folder.glob("*.lgx")) if folder.is_dir() else []:
            tail = self.tails.setdefault(path.name, ByteTail(path))
            parts = []
            while data := tail.new():
                parts.append(data)
                if not whole:
                    break
            if parts:
                out[path.name] = b"".join(parts)
        return out

    def poll(self) -> dict[str, Any]:
        """What happened since the last poll: the logs' new whole frames by file name, requests done,
        and once the phase is over its health (or error). The finished phase's logs are removed after
        their last frames went out."""
        finished = self.runner is not None and not self.runner.is_alive()
        logs = self._logs(whole=finished)
        out = {"logs": logs, "done": int(self.group.done.value), "finished": finished, "health": None,
               "error": None, "abort": read_abort(self.dir)}
        if finished:
            out["health"], out["error"] = self.health, self.error or self.relay_error
            for name in list(self.tails):
                with contextlib.suppress(OSError):
                    (self.dir / "exchanges" / name).unlink()
                del self.tails[name]
            with contextlib.suppress(OSError):
                (self.dir / "abort.json").unlink()
            self.runner = None
        return out

    def stop(self) -> bool:
        """Start no new request (those in flight finish)."""
        self.stop_flag.set()
        self.group.stop()
        return True

    def close(self) -> bool:
        if self.init_error is None:
            self._end_relay()
            self.group.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return True

