"""The request plan: profile + seed + token pool -> the exact list of requests. Pure: no I/O.

Same profile, seed and pool give the same list, byte for byte. Measured requests use the
profile's seed; warmup requests use a derived seed, so changing the warmup count never changes
the measured requests. A ramp's requests (`load.ramp`) are drawn like warmup requests, from their
own salt, as many as the ramp sends (plan indices from `len(plan)` on); an open loop's ramp has its
intended times from the integrated rate curve (`loadgate.core.ramps`), from its own random stream.

Rounds (`workload.cache: fresh`, the default): each load level of a sweep and each A/B pair is a
round with its own prompt token ids, drawn from `(seed, salt, round, k)`; the lengths, the
arrival times and any declared shared prefix stay the same, and round 0 is exactly the plan
without rounds. So no level or pair replays prompts an earlier one left in the engine's prefix
cache, both sides of an A/B pair send the same prompts, and `cache: warm` keeps one round.
A run also salts its rounds (`workload.prompt_salt`, drawn per run unless the profile sets it), so
a second run of one profile does not meet the first one's prompts either.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from loadgate.config.profile import DatasetFields, Load, Profile, Workload
from loadgate.core import ramps
from loadgate.engine.adapters import is_chat
from loadgate.errors import UsageError
from loadgate.load.workload.dataset import has_trace, open_rows, row_stamps
from loadgate.load.workload.lengths import draw_lengths
from loadgate.load.workload.sessions import (
    Conversation,
    Conversations,
    Part,
    all_ids,
    check_conversations,
    conversations,
    history,
)
from loadgate.load.workload.timing import Window
from loadgate.load.workload.trace import TraceRequests

if TYPE_CHECKING:
    import numpy as np

    from loadgate.load.workload.dataset import Prepared

_WARMUP_SEED_SALT = 0x5EED_0001
_MEASURED_SALT = 0x5EED_0000
_RAMP_SALT = 0x5EED_0002 << 32  # plus the block's number: never one of the salts above
RAMP_BLOCK = 256  # a ramp's requests are drawn this many at a time


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request. The prompt is token ids (exact length) unless a trace or dataset gave text or
    messages. `counted_len`: a dataset prompt's whole token count by the tokenizer source (a chat
    prompt's with its template), what the server should report."""

    i: int
    warmup: bool
    prompt_ids: tuple[int, ...] | None
    output_len: int
    intended_offset_ns: int | None = None  # open loop: offset from the measured phase's start
    prompt_text: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    counted_len: int | None = None
    category: str | None = None
    session: tuple[int, int, int] | None = None  # a conversation's turn: (conversation, turn 1-based, turns)
    exchange: tuple[Part, ...] | None = None  # a conversation's history and new turn, sent as messages or text
    ramp: bool = False  # a request of the level's ramp (`load.ramp`), outside every figure
    # a request whose body was built before the phase (`Plan.light`): its drawn prompt's length, the
    # ids themselves not carried (no body can be built from it: `target.body_for` refuses it)
    drawn_len: int | None = None

    @property
    def prompt_len(self) -> int | None:
        """Planned prompt tokens when known (ids, a trace's `input_len`, a dataset's count)."""
        if self.counted_len is not None:
            return self.counted_len
        return self.drawn_len if self.prompt_ids is None else len(self.prompt_ids)


class _Requests:
    """Requests of one kind (warmup or measured), materialized on access so memory stays flat:
    lengths are drawn up front (two int64 arrays); each prompt comes from its own RNG stream
    `(seed, salt, k)`, so request k is the same whoever asks and in whatever order."""

    def __init__(self, w: Workload, n: int, seed: int, salt: int, pool: np.ndarray, base_dir: Path,
                 key: tuple[int, ...] = ()) -> None:
        import numpy as np

        rng = np.random.default_rng([seed, salt])
        self.isl = draw_lengths(w.input_len, n, rng, base_dir)
        self.osl = draw_lengths(w.output_len, n, rng, base_dir)
        self.prefixes: list[np.ndarray] = []
        if w.shared_prefix is not None:
            prng = np.random.default_rng([seed, salt, 0xF1E1D])
            self.prefixes = [prng.choice(pool, size=w.shared_prefix.prefix_len)
                             for _ in range(w.shared_prefix.groups)]
        self.seed, self.salt, self.pool, self.key = seed, salt, pool, key

    def __len__(self) -> int:
        return len(self.isl)

    def prompt(self, k: int) -> tuple[int, ...]:
        import numpy as np

        length = int(self.isl[k])
        rng = np.random.default_rng([self.seed, self.salt, k] if not self.key else
                                    [self.seed, self.salt, 0xCAC4E, *self.key, k])
        if self.prefixes:
            pre = self.prefixes[k % len(self.prefixes)][:length]
            ids = np.concatenate([pre, rng.choice(self.pool, size=length - len(pre))])
        else:
            ids = rng.choice(self.pool, size=length)
        return tuple(ids.tolist())


class _RampRequests:
    """A ramp's requests, as many as asked for (a closed loop's ramp sends as many as the server
    finishes): block b of `RAMP_BLOCK` is drawn from `(seed, ramp salt + b)`, so request k is the same
    whoever asks and in whatever order."""

    def __init__(self, w: Workload, seed: int, pool: np.ndarray, base_dir: Path, key: tuple[int, ...]) -> None:
        self.args = w, seed, pool, base_dir, key
        self.blocks: dict[int, _Requests] = {}

    def get(self, k: int) -> tuple[tuple[int, ...], int]:
        """Request k's prompt ids and output length."""
        w, seed, pool, base_dir, key = self.args
        b, j = divmod(k, RAMP_BLOCK)
        block = self.blocks.get(b)
        if block is None:
            block = self.blocks[b] = _Requests(w, RAMP_BLOCK, seed, _RAMP_SALT + b, pool, base_dir, key)
        return block.prompt(j), int(block.osl[j])


def _unit_gaps(load: Load, n: int, mean: float, rng: np.random.Generator) -> np.ndarray:
    """`n` gaps of mean `mean` of the arrival process (`arrival_offsets_ns`)."""
    import numpy as np

    if load.arrival == "constant":
        return np.full(n, mean)
    if load.arrival == "gamma":
        return rng.gamma(load.burstiness, mean / load.burstiness, size=n)
    return rng.exponential(mean, size=n)


def ramp_offsets_ns(load: Load, rng: np.random.Generator) -> list[int]:
    """An open loop's ramp to `load.rate` (its first): intended start offsets from the ramp's start,
    each below `load.ramp.duration_s`. The arrival process's gaps of mean 1 (constant: exactly 1), their
    running sums from 0, mapped through the inverse of the integrated rate (`loadgate.core.ramps`)."""
    import numpy as np

    r = load.ramp
    assert r is not None and load.rates
    level = load.rates[0]
    start = ramps.start_of(r.start, level, closed=False)
    expected = ramps.expected_arrivals(r.shape, start, level, r.duration_s)
    n = int(expected * 1.5) + 16
    while True:  # enough arrivals to pass the ramp's end (a bursty process may need more draws)
        gaps = _unit_gaps(load, n, 1.0, rng)
        gaps[0] = 0.0
        cum = np.cumsum(gaps)
        if cum[-1] >= expected:
            break
        n *= 2
    t = ramps.arrival_times_s(r.shape, start, level, r.duration_s, cum)
    return [int(x) for x in np.rint(t[t < r.duration_s] * 1e9)]


def arrival_offsets_ns(load: Load, n: int, rng: np.random.Generator) -> list[int]:
    """Intended start offsets for an open loop at `load.rate` requests/s (a sweep's first rate; each
    level of a sweep plans with its own, see `loadgate.load.levels.at_level`).

    poisson: exponential gaps with mean 1/rate; gamma: gamma gaps with shape `burstiness` and
    mean 1/rate (shape < 1 is burstier than Poisson); constant: gaps of exactly 1/rate.
    The first request starts at offset 0.
    """
    import numpy as np

    assert load.rates
    gaps = _unit_gaps(load, n, 1.0 / load.rates[0], rng)
    gaps[0] = 0.0
    return [int(x) for x in np.rint(np.cumsum(gaps) * 1e9)]


def trace_of(profile: Profile, pool: np.ndarray | None = None) -> TraceRequests:
    """The profile's trace, every line checked (without a pool: only checked, as by `validate`), and
    under `load.schedule: trace` its window chosen. Token ids cannot go to a chat API, which takes
    text: such a trace is refused here."""
    import numpy as np

    w, load = profile.workload, profile.load
    assert w.source is not None
    t = TraceRequests(profile.resolve(w.source.path), w.request_count, profile.seed,
                      np.zeros(1, dtype=np.int64) if pool is None else pool, w.source.block_size)
    if t.first_ids_line is not None and is_chat(profile.target.api):
        raise UsageError(f"{t.first_ids_line}: prompt_ids cannot be sent to target.api {profile.target.api!r}, "
                         "which takes text: give prompt or messages there, or use a completions API")
    if load.schedule == "trace":
        t.timed(Window(load.trace_start_s, load.trace_length_s, load.trace_speed, w.requests))
    return t


def check_source(profile: Profile) -> None:
    """Every line of the profile's trace, or row of its dataset (UsageError at the first bad one)."""
    if profile.workload.source is None:
        if profile.load.schedule == "trace":
            raise UsageError(f"{profile.path or 'profile'}: load.schedule: trace replays a timed trace: needs "
                             "workload.dataset (format trace or mooncake, lines with a timestamp)")
        return
    if not has_trace(profile) and profile.load.schedule == "trace":
        rows = open_rows(profile)
        assert rows is not None
        row_stamps(rows)  # every row needs a timestamp
        return
    if profile.workload.sessions is not None:
        check_conversations(profile)
        return
    if has_trace(profile):
        ds = profile.workload.source
        assert ds is not None
        if ds.filters or ds.lengths != "dataset" or ds.fields != DatasetFields():
            raise UsageError(f"{profile.resolve(ds.path)}: its first line states lengths (or ids), so it is read as a "
                             "trace, which takes no length filters, lengths: profile or fields; give lines without "
                             "input_len, prompt_ids, output_len and max_tokens, or set format: jsonl")
        trace_of(profile)
    else:
        open_rows(profile)


class Plan(Sequence[PlannedRequest]):
    """Warmup requests first (i = 0..W-1), then the measured ones. A lazy, immutable sequence:
    `plan[i]` builds request i on demand, identically every time."""

    def __init__(self, profile: Profile, token_pool: Sequence[int], round_: int = 0,
                 dataset: Prepared | None = None) -> None:
        import numpy as np

        pool = np.asarray(token_pool, dtype=np.int64)
        self.round = round_ if profile.workload.cache == "fresh" else 0
        salt = profile.workload.prompt_salt if profile.workload.cache == "fresh" else None
        key = prompt_key(self.round, salt)
        if pool.size == 0:
            raise ValueError("empty token pool")
        base_dir = profile.resolve(".")
        w, load = profile.workload, profile.load
        self.trace: TraceRequests | None = None
        self.dataset = dataset  # a dataset's requests: the same in every round (its own text)
        self.conversations: Conversations = Conversations([])  # workload.sessions: the measured conversations
        self.history = profile.history
        self.chat = is_chat(profile.target.api)
        if w.sessions is not None:
            self.conversations = conversations(profile, pool, key)
        elif dataset is None and w.source is not None:
            if not has_trace(profile):
                raise ValueError("a dataset's requests are prepared first (loadgate.load.workload.dataset)")
            self.trace = trace_of(profile, pool)
            self.trace.key = key
        n = (len(self.trace) if self.trace is not None and self.trace.order is not None else
             len(dataset) if dataset is not None and dataset.offsets_ns is not None else w.request_count)
        self.measured = _Requests(w, n, profile.seed, _MEASURED_SALT, pool, base_dir, key)
        self.n_measured = self.conversations.n_turns if w.sessions is not None else len(self.measured)
        self.warm = _Requests(w, load.warmup_requests, profile.seed, _WARMUP_SEED_SALT, pool, base_dir, key)
        self.offsets: list[int] | None = None
        if self.trace is not None and self.trace.order is not None:
            self.offsets = self.trace.offsets_ns
        elif dataset is not None and dataset.offsets_ns is not None:
            self.offsets = list(dataset.offsets_ns)
        elif load.rate is not None:
            self.offsets = arrival_offsets_ns(load, n, np.random.default_rng([profile.seed, 1]))
        self.n_warmup = len(self.warm)
        self.ramp = None if load.ramp is None else _RampRequests(w, profile.seed, pool, base_dir, key)
        # an open loop's ramp: its intended offsets from the ramp's start (a closed loop's ramp: None)
        self.ramp_offsets: list[int] | None = None
        if load.ramp is not None and load.rate is not None:
            self.ramp_offsets = ramp_offsets_ns(load, np.random.default_rng([profile.seed, 2]))

    def __len__(self) -> int:
        return self.n_warmup + self.n_measured

    def static(self, i: int) -> bool:
        """Request i's body is known before the phase (not a later turn of an `actual` history)."""
        if not self.conversations or i < self.n_warmup or self.history != "actual":
            return True
        return self.conversations.locate(i - self.n_warmup)[1] == 1

    def turn(self, conv: Conversation, turn: int, replies: list[Part]) -> PlannedRequest:
        """Turn `turn` (1-based) of `conv` after `replies` (the replies to the turns before it):
        token ids end to end on a completions API where every part has them, else its messages
        (chat) or text (completions) built when the body is."""
        parts = history(conv, turn, replies)
        i = self.n_warmup + conv.first + turn - 1
        session = (conv.index, turn, conv.turns)
        out = conv.output_lens[turn - 1]
        ids = None if self.chat or conv.system else all_ids(parts)
        if ids is not None:
            return PlannedRequest(i, False, ids, out, category=conv.category, session=session)
        return PlannedRequest(i, False, None, out, messages=conv.system or None, category=conv.category,
                              session=session, exchange=tuple(parts))

    def sessions_meta(self, profile: Profile) -> dict[str, Any] | None:
        """What meta.json says of the conversations (None without `workload.sessions`)."""
        ss = profile.workload.sessions
        if ss is None:
            return None
        ds = profile.workload.dataset
        return {"conversations": len(self.conversations), "turns": self.n_measured, "history": self.history,
                "header": ss.header or None, "source": str(profile.resolve(ds.path)) if ds else "synthetic"}

    def recorded(self, conv: Conversation) -> list[Part]:
        """The recorded replies of `conv` (a dataset turn without one: an empty reply)."""
        return [r if r is not None else Part(text="") for r in conv.replies]

    @overload
    def __getitem__(self, i: int) -> PlannedRequest: ...

    @overload
    def __getitem__(self, i: slice) -> list[PlannedRequest]: ...

    def __getitem__(self, i: int | slice) -> PlannedRequest | list[PlannedRequest]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < self.n_warmup:
            return PlannedRequest(i, True, self.warm.prompt(i), int(self.warm.osl[i]))
        k = i - self.n_warmup
        if self.conversations:
            conv, turn = self.conversations.locate(k)
            return self.turn(conv, turn, self.recorded(conv))
        off = None if self.offsets is None else self.offsets[k]
        if self.dataset is not None:
            r = self.dataset.requests[k % len(self.dataset)]
            return PlannedRequest(i, False, r.prompt_ids, r.output_len, off, r.prompt_text, r.messages,
                                  r.counted_len, r.category)
        if self.trace is not None:
            t = self.trace.get(k)
            return PlannedRequest(i, False, t.get("prompt_ids"), t["output_len"], off,
                                  t.get("prompt_text"), t.get("messages"), category=t.get("category"))
        return PlannedRequest(i, False, self.measured.prompt(k), int(self.measured.osl[k]), off)

    def light(self, i: int) -> PlannedRequest:
        """Request i as the receive loop needs it once its body is built (`load.workers.prebuild`):
        `plan[i]` less a drawn prompt's ids, which only the body needs, with their count instead
        (`drawn_len`). Drawing them again cost ~50 µs a request (a numpy generator seeded per
        request) on the loop's thread, inside the measured window. Requests that are not drawn
        (a dataset's, a conversation's, a trace line's own ids or text) are as `plan[i]` gives them."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < self.n_warmup:
            return PlannedRequest(i, True, None, int(self.warm.osl[i]), drawn_len=int(self.warm.isl[i]))
        k = i - self.n_warmup
        if self.conversations or self.dataset is not None:
            return self[i]
        off = None if self.offsets is None else self.offsets[k]
        if self.trace is not None:
            t = self.trace.get(k, draw=False)
            return PlannedRequest(i, False, t.get("prompt_ids"), t["output_len"], off, t.get("prompt_text"),
                                  t.get("messages"), category=t.get("category"), drawn_len=t.get("drawn_len"))
        return PlannedRequest(i, False, None, int(self.measured.osl[k]), off, drawn_len=int(self.measured.isl[k]))

    def trace_info(self) -> dict[str, Any] | None:
        """A timed trace's replay (meta.json's `trace`, `TraceRequests.info`); None otherwise."""
        if self.dataset is not None:
            return self.dataset.trace
        return None if self.trace is None else self.trace.info()

    def ramp_request(self, k: int) -> PlannedRequest:
        """The ramp's request k (plan index `len(self) + k`): drawn ids, the ramp's intended offset (open loop)."""
        assert self.ramp is not None
        ids, out = self.ramp.get(k)
        off = None if self.ramp_offsets is None else self.ramp_offsets[k]
        return PlannedRequest(len(self) + k, False, ids, out, off, ramp=True)

    def ramp_requests(self, mine: Callable[[int], bool]) -> Iterator[PlannedRequest]:
        """The ramp's requests k for which `mine(k)`, in order: an open loop's all its offsets, a closed
        loop's as many as are drawn."""
        ks = itertools.count() if self.ramp_offsets is None else range(len(self.ramp_offsets))
        return (self.ramp_request(k) for k in ks if mine(k))

    def warmup_requests(self) -> range:
        return range(self.n_warmup)

    def measured_requests(self) -> range:
        return range(self.n_warmup, len(self))


def prompt_key(round_: int, salt: int | None) -> tuple[int, ...]:
    """What a round's prompts are drawn from besides (seed, kind, k): nothing for round 0 of an
    unsalted plan (the plan as it was before rounds), else the round and the run's salt."""
    if salt is None:
        return (round_,) if round_ else ()
    return (salt, round_)


def build_plan(profile: Profile, token_pool: Sequence[int], round_: int = 0,
               dataset: Prepared | None = None) -> Plan:
    """The plan of one round (a load level's index, offset by the A/B pair's; see the module), with
    a dataset's prepared requests where the profile names one."""
    return Plan(profile, token_pool, round_, dataset)
