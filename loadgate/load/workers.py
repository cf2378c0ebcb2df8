"""Run one phase of a plan (warmup or measured, at one load level), in this process or in workers.

One event loop can only stamp so many reads per second before its own lag shows in the figures.
With `load.workers: N` the phase runs in N processes, each with its own loop and connection pool:
- closed loop: the concurrency is split across workers (c // N, the first c % N get one more) and
  all of them draw the next request from one shared counter, so the global order and the global
  number in flight are those of a single closed loop;
- open loop: request k goes to worker k % N, each starting its share at the same absolute
  intended times (`perf_counter_ns` is one system-wide monotonic clock on Linux).
- a ramp (`load.ramp`): each worker ramps its share from the same start time: closed loop, worker j
  opens the level's slots j, j + N, j + 2N, … at their times on the curve, each drawing ramp requests
  j, j + N, … (so the total in flight is one process's); open loop, ramp request k goes to worker k % N.
The workers live for a whole load level (`WorkerGroup`): its warmup and measured phases run in
the same processes on the same connections. The warmup is split k % N instead of by the shared
counter, so each worker gets its share in proportion to its slots and every slot opens its
connection then, however unevenly the workers start (a busy machine). Each worker writes its own part file per phase; the
parent appends the parts to `records.jsonl` after the phase. Workers rebuild the (pure, lazy)
plan from the profile and token pool instead of receiving it, so nothing large crosses process
boundaries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import multiprocessing as mp
import os
import queue
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import loadgate.errors as errors
from loadgate.config.profile import Profile, Ramp
from loadgate.core import ramps
from loadgate.load.exchanges import log_path
from loadgate.load.executors import NEVER, ClosedLoop, Concurrency, LoadLevel, OpenLoop, Rate, StopFlag
from loadgate.load.health import HealthMonitor
from loadgate.load.plan import Plan, PlannedRequest, build_plan
from loadgate.load.recorder import Recorder
from loadgate.load.session_loops import send_conversations
from loadgate.load.target import LiveTarget, TargetSpec, body_for
from loadgate.load.turns import LOOP_TURNS
from loadgate.load.workload.dataset import Prepared
from loadgate.net.connect import run_async
from loadgate.net.http import make_session
from loadgate.records import STEAL_TRUSTED, RecordWriter


@dataclass(frozen=True)
class Phase:
    indices: range  # plan indices sent in this phase
    loop: LoadLevel  # a closed loop's concurrency or an open loop's rate (and cap)
    run_tag: str
    t0_ns: int
    duration_s: float | None = None
    warmup: bool = False  # workers split it k % n (every slot gets one), not by the shared counter
    ramp: Ramp | None = None  # the level's ramp (`load.ramp`): `indices` empty, its requests `plan.ramp_requests`


def _share(total: int, n: int, j: int) -> int:
    return total // n + (1 if j < total % n else 0)


BODY_BUDGET = 256 * 2**20  # request bodies built before a phase: at most this many bytes,
BODY_COUNT = 200_000  # and this many (the rest are built when sent)


def prebuild(target: LiveTarget, plan: Plan, indices: Iterable[int], budget: int = BODY_BUDGET,
             count: int = BODY_COUNT) -> dict[int, bytes]:
    """The phase's request bodies, built before it starts, so the window spends no time
    serializing prompts."""
    out: dict[int, bytes] = {}
    used = 0
    for k in indices:
        if not plan.static(k):  # a later turn of a conversation's actual history: built when it is sent
            continue
        b = body_for(target, plan[k])
        used += len(b)
        if used > budget or len(out) >= count:
            break
        out[k] = b
    return out


def sendable(target: LiveTarget, plan: Plan, k: int) -> PlannedRequest:
    """Request k as the window sends it: without its drawn prompt when its body is built (`Plan.light`)."""
    return plan.light(k) if k in target.bodies else plan[k]


def prepare(target: LiveTarget, plan: Plan, indices: Iterable[int]) -> None:
    """Before a phase: its request bodies built, the heap collected and frozen (what exists now —
    plan, pools, bodies, modules — never needs scanning again). A worker does this before it says
    it is ready, so an open loop's start time is not spent building bodies."""
    target.bodies = prebuild(target, plan, indices)
    gc.collect()
    gc.freeze()


async def _drive(target: LiveTarget, plan: Plan, phase: Phase, recorder: Recorder, *, concurrency: int | None,
                 next_index: Callable[[], int | None] | None, start_ns: int | None,
                 mine: Callable[[int], bool], stop_flag: StopFlag = NEVER, prepared: bool = False,
                 worker: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    """Run one phase with nothing but sending and receiving in the window: bodies built before,
    records decoded and written after (`Recorder`), the garbage collector off during
    it (what exists before is frozen; one collection after). `prepared`: `prepare` already ran.
    `worker`: (j, n), this process's place among the level's workers (a ramp opens its slots j, j + n, …)."""
    if not prepared:
        prepare(target, plan, (k for k in phase.indices if next_index is not None or mine(k)))
    monitor = HealthMonitor()
    monitor.start()
    # the duration counts from the phase's start (a group's workers start at one given moment)
    stop = None if phase.duration_s is None else (start_ns or perf_counter_ns()) + int(phase.duration_s * 1e9)
    gc.disable()
    failed: BaseException | None = None
    try:
        if phase.ramp is not None:
            await _ramp(target, plan, phase, phase.ramp, recorder, start_ns or perf_counter_ns(), mine, stop_flag,
                        worker)
        elif plan.conversations and not phase.warmup:  # conversations: turn after turn (load.session_loops)
            first = phase.indices.start  # the shared counter counts conversations from here
            await send_conversations(
                target, plan, phase.loop, recorder, run_tag=phase.run_tag, t0_ns=phase.t0_ns,
                concurrency=concurrency, start_ns=start_ns, mine=mine, stop_at_ns=stop, stop=stop_flag,
                next_conversation=None if next_index is None else
                lambda: None if (k := next_index()) is None else k - first)
        elif isinstance(phase.loop, Rate):
            await OpenLoop(phase.loop.per_s, start_ns or perf_counter_ns(), phase.loop.max_in_flight, stop,
                           stop_flag).run(target, (sendable(target, plan, k) for k in phase.indices if mine(k)),
                                          recorder,
                                          run_tag=phase.run_tag, t0_ns=phase.t0_ns)
        else:
            def draw() -> Iterator[PlannedRequest]:
                while next_index is not None and (k := next_index()) is not None:
                    yield sendable(target, plan, k)
            src = draw() if next_index is not None else (sendable(target, plan, k) for k in phase.indices if mine(k))
            await ClosedLoop(concurrency or phase.loop.n, phase.loop.n, stop, stop_flag).run(
                target, src, recorder, run_tag=phase.run_tag, t0_ns=phase.t0_ns)
        health = await monitor.stop()
    except BaseException as e:
        failed = e
        raise
    finally:
        gc.enable()
        target.bodies = {}
        cpu = monitor.cpu_s()
        # also when the phase was cut short: what finished is written (then with the host unknown)
        steal = None if failed is not None else health.get("host_steal_fraction")
        try:
            recorder.flush(trust_wakes=steal is not None and steal <= STEAL_TRUSTED)
        except errors.ResultsNotWritten:
            if failed is None:
                raise  # else the first failure is the one to name (the exchange log stays for `report`)
    health["decode_cpu_s"] = monitor.cpu_s() - cpu  # the deferred decoding, after the window
    gc.unfreeze()
    gc.collect()
    return health


async def _ramp(target: LiveTarget, plan: Plan, phase: Phase, ramp: Ramp, recorder: Recorder, start_ns: int,
                mine: Callable[[int], bool], stop_flag: StopFlag, worker: tuple[int, int]) -> None:
    """A level's ramp from `start_ns` (`loadgate.core.ramps`): an open loop sends the ramp's requests `mine`
    at their intended offsets; a closed loop opens its slots over the ramp, this worker's share of them
    (slots j, j + n, … of the level's), each sending the ramp's requests `mine` one after another. No
    request starts after the ramp's duration; those in flight finish."""
    end = start_ns + int(ramp.duration_s * 1e9)
    reqs = plan.ramp_requests(mine)
    if isinstance(phase.loop, Rate):
        await OpenLoop(phase.loop.per_s, start_ns, phase.loop.max_in_flight, end, stop_flag).run(
            target, reqs, recorder, run_tag=phase.run_tag, t0_ns=phase.t0_ns)
        return
    n = phase.loop.n
    j, workers = worker
    delays = ramps.slot_delays_s(ramp.shape, ramps.start_of(ramp.start, n, closed=True), n, ramp.duration_s)
    mine_ns = tuple(int(d * 1e9) for d in delays[j::workers])
    await ClosedLoop(len(mine_ns), n, end, stop_flag, start_ns, mine_ns).run(
        target, reqs, recorder, run_tag=phase.run_tag, t0_ns=phase.t0_ns)


async def run_phase_here(target: LiveTarget, plan: Plan, phase: Phase, writer: RecordWriter,
                         on_done: Callable[[], None] | None = None, stop_flag: StopFlag = NEVER
                         ) -> list[dict[str, Any]]:
    """Run the phase on the current event loop; returns [health]. The caller keeps `target` open
    across a level's phases, so the measured phase reuses the connections its warmup opened."""
    rec = Recorder(target, writer, on_done, log=log_path(writer.path.parent, phase.run_tag, writer.path.stem),
                   stop=None if stop_flag is NEVER else stop_flag)
    return [await _drive(target, plan, phase, rec, concurrency=None,
                         next_index=None, start_ns=None, mine=lambda k: True, stop_flag=stop_flag)]


class WorkerGroup:
    """`n` load worker processes kept for one load level, so its warmup and measured phases run in
    the same processes on the same connections (the warmup opens them; measured requests do not pay
    a connect). Each worker has an inbox; all report on one outbox: parent -> (phase, part file);
    worker -> ("ready", j); parent -> start time; worker -> ("done", j, health) or
    ("error", j, kind, message). None in an inbox ends that worker."""

    def __init__(self, spec: TargetSpec, profile: Profile, pool: list[int], n: int, run_dir: Path,
                 stop_flag: StopFlag = NEVER, round_: int = 0, dataset: Prepared | None = None, *,
                 place: tuple[int, int] | None = None, fed: bool = False) -> None:
        """`place`: (the first worker's index, all workers) among the workers of every host, when this
        group is one Ray actor's share (`loadgate.load.ray_actor`); `fed`: its closed loop draws plan
        indices from `feed` (filled by the actor from the run's shared counter), not from `counter`;
        then the workers keep their exchange logs for the actor to relay (nothing decoded here) and
        die with the actor."""
        self.n, self.run_dir = n, run_dir
        self.stop_flag = stop_flag
        self.failed = False
        ctx = mp.get_context("spawn")
        self.counter, self.done = ctx.Value("q", 0), ctx.Value("q", 0)
        self.stopping = ctx.Value("b", 0)  # set by `stop()`: the workers start no new request
        self.inboxes = [ctx.Queue() for _ in range(n)]
        self.outbox = ctx.Queue()
        self.feed: Any = ctx.Queue() if fed else None
        self.taken: Any = ctx.Semaphore(0) if fed else None  # released once per index a worker takes from `feed`
        first, total = place or (0, n)
        self.procs = [ctx.Process(target=_worker, args=(j, n, spec, profile, pool, self.inboxes[j], self.outbox,
                                                        self.counter, self.done, self.stopping, round_, dataset,
                                                        (first + j, total), self.feed, self.taken),
                                daemon=True)
                      for j in range(n)]
        for p in self.procs:
            p.start()

    async def _collect(self, kind: str, timeout_s: float | None,
                       on_progress: Callable[[int], None] | None = None) -> dict[int, Any]:
        """Wait for one `kind` message from every worker; a worker's error is raised here."""
        got: dict[int, Any] = {}
        seen = 0
        deadline = None if timeout_s is None else perf_counter_ns() + int(timeout_s * 1e9)
        while len(got) < self.n:
            if self.stop_flag.is_set() and not self.stopping.value:
                self.stop()
            try:
                msg = self.outbox.get_nowait()
            except queue.Empty:
                msg = None
            if on_progress and self.done.value > seen:
                on_progress(self.done.value - seen)
                seen = self.done.value
            if msg is None:
                dead = [p.exitcode for j, p in enumerate(self.procs) if j not in got and not p.is_alive()]
                if dead:
                    try:  # a worker that reported its error and exited: its own error, not a generic one
                        msg = self.outbox.get(timeout=0.5)
                    except queue.Empty:
                        raise RuntimeError(f"{len(dead)} load worker(s) ended unexpectedly (exit codes {dead})") \
                            from None
                    if msg[0] != "error":
                        raise RuntimeError(f"{len(dead)} load worker(s) ended unexpectedly (exit codes {dead})")
                    raise _worker_error(msg[1], msg[2], msg[3])
                if deadline is not None and perf_counter_ns() > deadline:
                    raise RuntimeError(f"load workers not {kind} within {timeout_s:g} s")
                await asyncio.sleep(0.05)
                continue
            if msg[0] == "error":
                raise _worker_error(msg[1], msg[2], msg[3])
            got[msg[1]] = msg[2] if len(msg) > 2 else None
        if on_progress and self.done.value > seen:
            on_progress(self.done.value - seen)
        return got

    def parts(self, phase: Phase) -> list[Path]:
        return [self.run_dir / f".part-{phase.run_tag}-{j}.jsonl" for j in range(self.n)]

    async def offer(self, phase: Phase) -> None:
        """Hand the phase to the workers and wait until each has built its bodies (`ready`)."""
        self.counter.value, self.done.value = phase.indices.start, 0
        for j, box in enumerate(self.inboxes):
            box.put((phase, str(self.parts(phase)[j])))
        await self._collect("ready", 120.0)

    def begin(self, start_ns: int) -> None:
        """Every worker is ready: each starts its share at `start_ns` (`perf_counter_ns`)."""
        for box in self.inboxes:
            box.put(start_ns)

    async def run(self, phase: Phase, writer: RecordWriter,
                  on_progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """Run one phase across the workers; append their records to `writer`'s file."""
        try:
            await self.offer(phase)
            self.begin(perf_counter_ns() + 20_000_000)  # every worker is ready: start 20 ms from now
            health = await self._collect("done", None, on_progress)
        except BaseException:
            self.failed = True  # no load after an error: the others stop at once
            self._halt()
            raise
        finally:
            for part in self.parts(phase):  # what was recorded is kept, even when a worker failed
                if part.exists():
                    writer.append_file(part)
                    part.unlink()
        return [health[j] for j in range(self.n)]

    def stop(self) -> None:
        """Start no new request (the requests in flight finish)."""
        self.stopping.value = 1

    def _halt(self, flush_s: float = 5.0) -> None:
        """Stop the workers now: SIGTERM cancels each one's requests and it writes the records of
        those that finished (its `_drive` flushes); one still alive after `flush_s` is killed."""
        for box in self.inboxes:
            box.put(None)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        deadline = perf_counter_ns() + int(flush_s * 1e9)
        for p in self.procs:
            p.join(max(0.0, (deadline - perf_counter_ns()) / 1e9))
            if p.is_alive():
                p.kill()
                p.join(5)

    def close(self) -> None:
        if self.failed:
            self._halt()
            return
        for box in self.inboxes:
            box.put(None)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)


def _worker_error(j: int, kind: str, message: str) -> Exception:
    """A worker's exception, rebuilt in the parent: loadgate's own errors keep their exit code."""
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.LoadgateError):
        return errors.UsageError(message) if issubclass(cls, errors.UsageError) else cls(message)
    return RuntimeError(f"load worker {j}: {kind}: {message}")


def pin(j: int, n: int) -> int | None:
    """Worker `j` of `n` to a core of its own, when the CPUs this process may use are at least `n`
    (the scheduler otherwise moves workers onto one core now and then, and their streams wait).
    Returns the core, or None where that is not possible (fewer cores, no affinity on this OS)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if n < 2 or len(cores) < n:
        return None
    core = cores[len(cores) - n + j]  # the last n: the parent and the rest of the system keep the first
    try:
        os.sched_setaffinity(0, {core})
    except OSError:
        return None
    return core


def die_with_parent() -> None:
    """Linux: this process is killed when the one that started it dies (a Ray actor killed with its
    node must take its client processes along, or they would go on sending)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the call
            os._exit(1)


def _worker(j: int, n: int, spec: TargetSpec, profile: Profile, pool: list[int], inbox: Any, outbox: Any,
            counter: Any, done: Any, stopping: Any, round_: int = 0, dataset: Prepared | None = None,
            place: tuple[int, int] | None = None, feed: Any = None, taken: Any = None) -> None:
    # The parent handles signals and tells the workers to stop (or kills them); a Ctrl-C reaching
    # the whole process group must not cut their requests short before that.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if feed is not None:
        die_with_parent()
    # under Ray, a core by the worker's place among every host's where this host has that many (the
    # actors of one host then take a core each), else none; on one host, by its place in the group
    if place is None or pin(*place) is None:
        if feed is None:  # (under Ray, actors sharing a host would each pin their worker j to one core)
            pin(j, n)
    try:
        run_async(_worker_main(*(place or (j, n)), spec, profile, pool, inbox, outbox, counter, done, stopping,
                               round_, dataset, feed, taken, j))
    except BaseException as e:  # reported to the parent, which prints one line; no traceback here
        msg = e.message if isinstance(e, errors.LoadgateError) else str(e)
        outbox.put(("error", j, type(e).__name__, msg))  # (j: this host's index)


async def _worker_main(j: int, n: int, spec: TargetSpec, profile: Profile, pool: list[int], inbox: Any,
                       outbox: Any, counter: Any, done: Any, stopping: Any, round_: int = 0,
                       dataset: Prepared | None = None, feed: Any = None, taken: Any = None,
                       local: int | None = None) -> None:
    """Worker `j` of `n` (of every host's, under Ray; `local`: its index in this host's group, which
    names it in the outbox)."""
    me = j if local is None else local
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    if main is not None:  # SIGTERM from the parent: cancel, so the phase writes what finished
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    plan = build_plan(profile, pool, round_, dataset)

    def on_done() -> None:
        with done.get_lock():
            done.value += 1
        LOOP_TURNS.after_blocking()  # a lock shared with the other processes may have slept

    ssl_context = spec.tls.context() if spec.base_url.startswith("https:") else None
    async with make_session(spec.headers, ssl_context) as session:
        target = LiveTarget(spec, session)  # one pool for every phase this worker runs
        try:
            while (msg := await loop.run_in_executor(None, inbox.get)) is not None:
                phase, part = msg
                end = phase.indices.stop
                if plan.conversations and not phase.warmup:  # the counter draws conversations, not requests
                    end = phase.indices.start + len(plan.conversations)

                def next_index(end: int = end) -> int | None:
                    if feed is not None:  # the run's shared counter, drawn ahead by the actor
                        got = feed.get()
                        if got is not None:
                            taken.release()
                        LOOP_TURNS.after_blocking()
                        return None if got is None else int(got)
                    with counter.get_lock():
                        k = counter.value
                        if k < end:
                            counter.value = k + 1
                    LOOP_TURNS.after_blocking()  # a lock shared with the other processes may have slept
                    return None if k >= end else int(k)

                closed = isinstance(phase.loop, Concurrency)
                shared = closed and not phase.warmup  # drawn from the shared counter: any k
                prepare(target, plan, (k for k in phase.indices if shared or k % n == j))
                outbox.put(("ready", me))
                start_ns = await loop.run_in_executor(None, inbox.get)
                if start_ns is None:  # the parent gave up before the start: send nothing
                    gc.unfreeze()
                    return
                conc = _share(phase.loop.n, n, j) if isinstance(phase.loop, Concurrency) else None
                p = phase  # an open loop's cap is shared out too
                if isinstance(phase.loop, Rate) and phase.loop.max_in_flight:
                    p = dataclasses.replace(phase, loop=Rate(phase.loop.per_s,
                                                             max(1, _share(phase.loop.max_in_flight, n, j))))
                health: dict[str, Any] = {}
                with RecordWriter(Path(part)) as writer:
                    if conc != 0:
                        flag = StopFlag(stopping)  # the workers' shared one: a breaker that trips stops them all
                        rec = Recorder(target, writer, on_done,
                                       log=log_path(writer.path.parent, phase.run_tag, writer.path.stem), stop=flag,
                                       keep_log=feed is not None)
                        health = await _drive(target, plan, p, rec,
                                              concurrency=conc,
                                              next_index=next_index if shared else None,
                                              start_ns=start_ns, mine=lambda k: k % n == j,
                                              stop_flag=flag, prepared=True, worker=(j, n))
                    else:  # no share of this phase: undo `prepare`
                        target.bodies = {}
                        gc.unfreeze()
                outbox.put(("done", me, health))
        finally:
            target.close()
