"""Executors of conversations (`workload.sessions`): `SessionLoop` (closed loop: `concurrency`
conversations in flight) and `SessionArrivals` (open loop: conversations start on a schedule, at
`load.rate` a second, at most `max_in_flight` at once).

Within a conversation a turn starts when the reply before it has ended and its think time has
passed; the reply is decoded then, at the turn's end, not in the receive loop's reads (the exchange
log already holds the bytes). A turn that fails ends its conversation: its record keeps the error,
and the turns after it are not sent (they have no record; the summary counts them from `turns`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter_ns

from loadgate.load.executors import NEVER, LoadLevel, Rate, StopFlag, at_their_times, sleep_until
from loadgate.load.plan import Plan
from loadgate.load.recorder import Recorder
from loadgate.load.target import LiveTarget, Raw, body_for, decode, fetch
from loadgate.load.turns import LOOP_TURNS
from loadgate.load.workload.sessions import Conversation, Part


@dataclass(frozen=True)
class TurnSender:
    """What every conversation of a phase shares: where to send, the plan, how to record."""

    t: LiveTarget
    plan: Plan
    recorder: Recorder
    header: str  # the session header's name ("": none)
    level: float | int
    run_tag: str
    t0_ns: int
    stopping: Callable[[], bool]
    stop: StopFlag = NEVER

    async def converse(self, conv: Conversation, intended_ns: int | None = None) -> None:
        """Send `conv` turn after turn. `intended_ns`: an open loop's intended start of turn 1 (its
        latency counts from there); a later turn's start is set by the reply before it."""
        t, plan = self.t, self.plan
        actual = plan.history == "actual"
        headers = {self.header: conv.session_id} if self.header else None
        recorded = plan.recorded(conv)
        replies: list[Part] = []
        for turn in range(1, conv.turns + 1):
            pause = conv.think_s[turn - 1]
            if pause > 0:
                await sleep_until(perf_counter_ns() + int(pause * 1e9), self.stop)
            ready = perf_counter_ns()
            if self.stopping():
                return
            i = plan.n_warmup + conv.first + turn - 1
            req = plan.turn(conv, turn, replies) if actual and turn > 1 else plan[i]
            body = t.bodies.pop(i, None) or body_for(t, req)
            raw = await fetch(t, body, f"{self.run_tag}-{i}", headers, t.endpoint_of(i, conv.index))
            self.recorder.submit(req, raw, t0_ns=self.t0_ns, level=self.level, ready_ns=ready,
                                 intended_ns=intended_ns if turn == 1 else None)
            LOOP_TURNS.touch()
            if turn == conv.turns:
                return
            reply = reply_of(t, raw, ids=not t.adapter.chat and t.spec.pool_text is None)
            if reply is None:
                return  # failed: the later turns are not sent
            replies.append(reply if actual else recorded[turn - 1])


def reply_of(t: LiveTarget, raw: Raw, ids: bool) -> Part | None:
    """A finished turn's reply: its output ids where the next turn sends ids (`ids`: a completions API
    that takes them), else its text (a chat API, or a text-only one: the ids of a reply need not be among
    the pool's, whose text is known). None when the turn failed, or when the next turn needs the reply's
    ids and the engine gave none."""
    d = decode(t.adapter, t.spec.stream, raw, t.spec.max_event_bytes)
    if d.error is not None or (ids and d.output_ids is None):
        return None
    return Part(tuple(d.output_ids or ()), None) if ids else Part(None, d.text)


def _stopping(stop_at_ns: int | None, stop: StopFlag) -> Callable[[], bool]:
    return lambda: (stop_at_ns is not None and perf_counter_ns() >= stop_at_ns) or stop.is_set()


@dataclass(frozen=True)
class SessionLoop:
    """Conversations in a closed loop: `concurrency` slots, each running one conversation turn after
    turn, then taking the next conversation."""

    concurrency: int
    header: str  # the session header's name ("": none)
    level: int | None = None
    stop_at_ns: int | None = None
    stop: StopFlag = NEVER

    async def run(self, t: LiveTarget, plan: Plan, convs: Iterable[Conversation], recorder: Recorder, *,
                  run_tag: str, t0_ns: int) -> None:
        it: Iterator[Conversation] = iter(convs)
        stopping = _stopping(self.stop_at_ns, self.stop)
        turns = TurnSender(t, plan, recorder, self.header, self.level or self.concurrency, run_tag, t0_ns, stopping,
                      self.stop)

        async def slot() -> None:
            for conv in it:
                if stopping():
                    return
                await turns.converse(conv)

        await asyncio.gather(*(slot() for _ in range(self.concurrency)))


@dataclass(frozen=True)
class SessionArrivals:
    """Conversations in an open loop: conversation c starts at `start_ns + offsets[c]` (the plan's
    arrival schedule at `rate` a second); turn 1's latency counts from then. With `max_in_flight`, a
    conversation that finds no free slot waits (its wait stays in turn 1's latency)."""

    rate: float
    start_ns: int
    offsets: list[int]
    header: str
    max_in_flight: int | None = None
    stop_at_ns: int | None = None
    stop: StopFlag = NEVER

    async def run(self, t: LiveTarget, plan: Plan, convs: Iterable[Conversation], recorder: Recorder, *,
                  run_tag: str, t0_ns: int) -> None:
        stopping = _stopping(self.stop_at_ns, self.stop)
        turns = TurnSender(t, plan, recorder, self.header, self.rate, run_tag, t0_ns, stopping, self.stop)

        def job(conv: Conversation) -> tuple[int, Callable[[int], Awaitable[None]]]:
            return self.offsets[conv.index], lambda intended: turns.converse(conv, intended)

        await at_their_times(self.start_ns, (job(c) for c in convs), max_in_flight=self.max_in_flight,
                             stop_at_ns=self.stop_at_ns, stop=self.stop)


async def send_conversations(t: LiveTarget, plan: Plan, loop: LoadLevel, recorder: Recorder, *, run_tag: str,
                             t0_ns: int, concurrency: int | None, start_ns: int | None, mine: Callable[[int], bool],
                             next_conversation: Callable[[], int | None] | None, stop_at_ns: int | None,
                             stop: StopFlag) -> None:
    """A phase's conversations, in this process or as one worker's share (`loadgate.load.workers`):
    closed loop, `concurrency` slots (this worker's share of the level's) drawing conversations from
    `next_conversation` (a counter the workers share; None: every conversation); open loop, the
    conversations `mine` says are this worker's, at their planned arrival times from `start_ns`."""
    header = t.spec.sessions_header
    convs = plan.conversations
    if isinstance(loop, Rate):
        assert plan.offsets is not None
        await SessionArrivals(loop.per_s, start_ns or perf_counter_ns(), plan.offsets, header, loop.max_in_flight,
                              stop_at_ns, stop).run(t, plan, (c for c in convs if mine(c.index)), recorder,
                                                    run_tag=run_tag, t0_ns=t0_ns)
        return

    def draw() -> Iterator[Conversation]:
        while next_conversation is not None and (c := next_conversation()) is not None:
            yield convs[c]

    await SessionLoop(concurrency or loop.n, header, loop.n, stop_at_ns, stop).run(
        t, plan, draw() if next_conversation is not None else iter(convs), recorder, run_tag=run_tag, t0_ns=t0_ns)
