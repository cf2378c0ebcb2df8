"""Loop turns: for every socket read on the hot path, the earliest moment its data can have arrived.

A read is stamped by the kernel when its last packet arrived (packets that queued together are
merged and keep the newest one's time), so when one read carries several events, the earlier ones
may have arrived before the stamp. How much earlier is bounded by what the client's event loop was
doing, which this module records. Written by hand because no event loop exposes its poll.

A *turn* is one wake-up from the poll and the reader callbacks it ran. The first read of a turn
creates its `Turn`; a marker scheduled with `call_soon` from that read runs after the turn's reader
callbacks and before the next poll, so the next read after it begins a new turn. (This holds on
uvloop, which runs reader callbacks inside libuv's poll phase and `call_soon` ones before the next
poll; asyncio's own loop runs the marker after the poll it precedes, so there no turn narrows
anything.)

Two kinds of turn, two floors:
- **busy** (the thread did not sleep since the last marker): the poll is level-triggered, so data
  that was readable when the previous poll began was read in the previous turn (or after an earlier
  read on its socket, which the caller bounds). The last known moment before that poll (the marker,
  moved later by `touch` past task work that runs after it) is a floor for everything read now; and
  so is the floor of the last quiet turn, since everything read after it arrived after that turn's
  poll began to sleep.
- **quiet** (the turn woke from an idle poll): the thread slept since the marker (its count of
  voluntary switches moved: a preemption does not move it, and a poll that did not sleep gives no
  floor at the marker; a clock gap is no proof, since a hypervisor's steal time is in no clock of
  the guest), and the process has no other thread that could have held the interpreter lock (a
  thread waiting for the lock sleeps too; see `no_other_threads`). It sleeps only in the poll, and
  a level-triggered poll sleeps only while no socket has data, so once the first byte read in this
  turn had arrived the thread did not sleep again: until the wake it ran (its CPU time since the
  marker) or waited for a CPU (its run-queue delay, `/proc/thread-self/schedstat`, counted from the
  last quiet turn's wake: the file is read once a quiet turn, and the wait before the marker only
  moves the estimate earlier). So everything read in this turn arrived after the wake less that
  time (`estimate`). Time the hypervisor holds the virtual CPU (a halted virtual CPU's wake, steal)
  is in neither figure; it shows where the earliest kernel stamp among the turn's reads
  (`first_stamp`: the first data to arrive wakes the poll) lies before the estimate. That much is
  taken off the floor again, and a turn whose wake was held up by more than `HOST_TOLERANCE_NS` (seen
  on a shared 2-core virtual machine: 5-12 ms now and then) is not narrowed at all: its floor is the
  poll's start, as for a busy turn. `WAKE_SLACK_NS` covers the clocks' offset and the usual wake of a
  halted virtual CPU, which no clock of the guest shows either.
A server that writes several events at once (llama-server sends a verify step's accepted tokens as
one event each) then gets a bound of tens of microseconds in a quiet turn, instead of the whole gap
since the stream's previous read. Not covered: sleeps outside the poll that nobody reported with
`after_blocking`; a wake the host held up where the turn's reads are of several segments (their
stamps are their last segments', so the held-up first one does not show): no guest clock times
that, so where the host took a share of the CPU during the phase (`records.STEAL_TRUSTED`) such
reads keep the poll's start (`target.finish_socket`); and packets stamped long before they became readable (delivery held up by the
kernel or the hypervisor: seen on a shared 2-core virtual machine, where a whole engine step's
packets for 8 streams were read 8.6 ms after their stamps, together with the next step's). No
client can tell those from a server that paused and then sent two writes at once; a rule that
widened such reads made every speculative run against llama-server at 8 slots invalid (its steps
are irregular), so there is none. `benchmarks/client_truth.py` counts the chunks
whose bound an independent server's write times contradict. Without the schedstat file no turn is
quiet, and the bounds stay the busy ones.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from resource import RUSAGE_THREAD, getrusage
from time import perf_counter_ns, thread_time_ns

QUIET_MIN_NS = 20_000  # a turn this soon after the last marker did not wake from a sleep worth telling apart
WAKE_SLACK_NS = 150_000  # off a quiet turn's floor: the clocks' offset, and a virtual CPU's wake (50-150 µs on the 2-core VM)
HOST_TOLERANCE_NS = 200_000  # a quiet turn whose first read waited longer than its wake explains by this: distrusted
NEVER_STAMPED = 1 << 62


def _run_delay_reader() -> Callable[[], int] | None:
    """This thread's run-queue wait so far in ns (`/proc/thread-self/schedstat`, second field: time
    spent runnable but not running), as a function; None where the kernel gives no such file or the
    file does not move (a sandbox that fakes it: its third field, the count of times the thread got a
    CPU, stays put across a sleep)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        before = os.pread(fd, 128, 0).split()
        time.sleep(0.0005)  # one voluntary switch: a real file counts it
        after = os.pread(fd, 128, 0).split()
        ok = len(before) >= 3 and len(after) >= 3 and int(after[2]) > int(before[2])
    except (OSError, ValueError):
        ok = False
    if not ok:
        os.close(fd)
        return None
    pread = os.pread

    def run_delay() -> int:
        return int(pread(fd, 128, 0).split(None, 2)[1])

    return run_delay


def no_other_threads() -> bool:
    """Whether this thread is the process's only Python thread but for the event loop's executor
    threads (`asyncio_N`: idle during a phase, waiting on their queue without the interpreter lock).
    Another thread may hold the lock, and this one's wait for it is a sleep outside the poll. Neither
    CPU clock tells: the kernel adds another thread's running slice to the process's time only at a
    tick or a switch (a thread that held the lock for 30 ms showed 0.12 ms)."""
    n = threading.active_count()
    if n != _THREADS[0]:  # the answer is recomputed only when the number of threads changed
        main = threading.current_thread()
        _THREADS[:] = [n, all(t is main or t.name.startswith("asyncio_") for t in threading.enumerate())]
    return bool(_THREADS[1])


_THREADS: list[int | bool] = [0, False]  # (thread count, whether they were all the loop's executor's)


class Turn:
    """One loop turn, shared by every read it ran (see the module docstring). `floor()` is final
    once the turn is over, which it is before any task sees a response that ended in it."""

    __slots__ = ("wake", "quiet", "base", "estimate", "first_stamp", "after", "_floor")

    def __init__(self, wake: int, quiet: bool, base: int, estimate: int = 0, after: Turn | None = None) -> None:
        self.wake = wake  # when its first read began
        self.quiet = quiet  # it woke from an idle poll
        self.base = base  # the floor known without the wake: the last moment before the poll that preceded it
        self.estimate = estimate  # quiet: the wake less the CPU and run-queue time since the marker, less slack
        self.first_stamp = NEVER_STAMPED  # the earliest kernel stamp among its reads
        self.after = after  # busy: the last quiet turn before it (its floor holds here too)
        self._floor: int | None = None

    def unexplained(self) -> int:
        """Quiet: the part of the first read's wait that CPU and run-queue time do not explain (the host)."""
        return max(0, self.estimate + WAKE_SLACK_NS - self.first_stamp)

    def narrowed(self) -> bool:
        """Quiet, and its wake was not held up: its floor is the measured wake, not the poll's start."""
        return self.quiet and self.unexplained() <= HOST_TOLERANCE_NS

    def floor(self) -> int:
        """The earliest any byte read in this turn can have arrived (kept once computed: it is asked
        only once the turn is over)."""
        if self._floor is None:
            if not self.quiet:
                self._floor = self.base if self.after is None else max(self.base, self.after.floor())
            elif not self.narrowed():  # the wake was held up: no narrowing past the poll's start
                self._floor = self.base
            else:
                self._floor = max(self.base, min(self.estimate, self.first_stamp - WAKE_SLACK_NS) - self.unexplained())
        return self._floor


class LoopTurns:
    """The turns of this thread's event loop: `enter` at each read, `touch` and `after_blocking`
    from task code."""

    __slots__ = ("current", "pending", "loop", "exact", "marker", "ended", "ended_before", "marker_cpu",
                 "marker_rd", "marker_sleeps", "run_delay", "last_quiet")

    def __init__(self) -> None:
        self.current: Turn | None = None
        self.pending = False  # a turn is open: its marker has not run yet
        self.loop: asyncio.AbstractEventLoop | None = None
        self.exact = False
        self.marker = self.ended = self.ended_before = self.marker_cpu = self.marker_rd = self.marker_sleeps = 0
        self.run_delay: Callable[[], int] | None = None
        self.last_quiet: Turn | None = None

    def enter(self, begin_ns: int, loop: asyncio.AbstractEventLoop) -> Turn:
        """The turn of a read that begins at `begin_ns` (a new one unless this turn's marker is still to run)."""
        if self.pending and loop is self.loop and self.current is not None:
            return self.current
        if loop is not self.loop:  # a new loop (another run in this process): its own turns
            self.loop, self.marker, self.ended, self.ended_before, self.last_quiet = loop, 0, 0, 0, None
            self.exact = type(loop).__module__.startswith("uvloop")
            self.run_delay = _run_delay_reader() if self.exact else None
            self.marker_rd = self.run_delay() if self.run_delay is not None else 0
        rd = self.run_delay
        turn: Turn
        quiet, busy = False, 0
        if rd is not None and self.marker and begin_ns - self.ended > QUIET_MIN_NS:
            # It slept since the marker, in the poll: it left the CPU of its own accord (a voluntary
            # switch; a preemption is none, and then the poll may not have slept at all: the marker
            # is no floor), with no other thread that could have held the interpreter lock.
            if getrusage(RUSAGE_THREAD).ru_nvcsw > self.marker_sleeps and no_other_threads():
                # The run-queue wait is counted from the last quiet turn's wake, not the marker (one
                # read of the file per quiet turn instead of two): the wait in between is added to
                # this turn's, which only moves its estimate earlier.
                waited = rd()
                busy = (thread_time_ns() - self.marker_cpu) + (waited - self.marker_rd)
                self.marker_rd = waited
                quiet = True
        if quiet:
            turn = self.last_quiet = Turn(begin_ns, True, self.marker, begin_ns - busy - WAKE_SLACK_NS)
        else:
            turn = Turn(begin_ns, False, self.ended_before if self.exact else 0, after=self.last_quiet)
        self.current, self.pending = turn, True
        loop.call_soon(self._turn_over)
        return turn

    def touch(self) -> None:
        """Called from task code (never from a transport's callback): the loop's next poll has not
        begun yet. Moves the busy floor of the turn after next past work that runs after the marker
        (request completions, the next request's send), to the poll itself."""
        if not self.pending and self.ended:
            self.ended = perf_counter_ns()

    def after_blocking(self) -> None:
        """Called after anything in the loop's thread that may sleep outside the poll (a lock shared
        with other processes, a file write): that sleep is no proof of an idle poll."""
        if self.run_delay is not None:
            self.marker_sleeps = getrusage(RUSAGE_THREAD).ru_nvcsw

    def _turn_over(self) -> None:
        self.pending = False
        now = perf_counter_ns()
        self.ended_before, self.ended, self.marker = self.ended, now, now
        if self.run_delay is not None:
            # thread_time_ns, not the schedstat file's CPU time: that leaves out the running slice
            self.marker_cpu, self.marker_sleeps = thread_time_ns(), getrusage(RUSAGE_THREAD).ru_nvcsw


LOOP_TURNS = LoopTurns()


def resolved(read_begin: list[tuple[int, Turn | None, bool]]) -> list[tuple[int, int, int, bool, bool, int]]:
    """Each read's (when it began, when its turn woke, the earliest its data can have arrived,
    whether that floor is its turn's measured wake (quiet and not held up), whether its bytes came in
    one TCP segment, the floor without the wake: the last moment before its poll), once its turns
    are over (a read outside the turns: no floor)."""
    return [(b, b, 0, False, one, 0) if turn is None
            else (b, turn.wake, turn.floor(), turn.narrowed(), one, turn.base)
            for b, turn, one in read_begin]
