"""Conversations (`workload.sessions`; docs/workloads.md#conversations): what each turn of a
multi-turn conversation sends. Pure but for reading a dataset's file.

A conversation is its user turns, the replies recorded for them, an output length per turn, the
pause before each turn after the first (think time) and an id (the session header's value). Turn t
(1-based) sends the whole history: the user turns and replies before it, then its own user turn.
The replies are the recorded ones (`history: recorded`: a dataset's replies; synthetic: token ids
drawn from the seed, so both sides of an A/B send the same bytes) or the engine's own replies to
the earlier turns (`history: actual`, filled in by the executor as each turn ends).

- Synthetic (no dataset): `sessions.turns` turns; each user turn `workload.input_len` token ids and
  each recorded reply `workload.output_len` of them, drawn per (seed, round, conversation, turn).
- From a dataset: ShareGPT `conversations` ({from, value}; each human/user turn a user turn, the
  next gpt/assistant turn its reply) or OpenAI chat `messages` ({role, content}; each user message a
  turn, an assistant message the reply to the user turn before it); leading system turns are kept
  before the first user turn; a `prompt` row is a conversation of one turn. Output lengths are drawn
  from `workload.output_len` (the replies are history, not lengths).
They are sent by `loadgate.load.session_loops`. Every row is checked before anything is sent: a conversation without a user turn is one line naming
the file and the row (a JSONL file's line), exit 2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadgate.config.profile import Profile, ThinkTime
from loadgate.errors import UsageError
from loadgate.load.workload.dataset import (
    _BOT,
    _HUMAN,
    JsonLines,
    _candidates,
    _Columns,
    _JsonArray,
    detect_format,
)
from loadgate.load.workload.lengths import draw_lengths

if TYPE_CHECKING:
    import numpy as np

_SESSION_SALT = 0x5E55_0000
_THINK_SALT = 0x7417


@dataclass(frozen=True, slots=True)
class Part:
    """One message of a history: its token ids, its text, or both (an engine's reply)."""

    ids: tuple[int, ...] | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation of the plan: `first` is the plan index of its turn 1."""

    index: int
    first: int
    session_id: str
    users: tuple[Part, ...]
    replies: tuple[Part | None, ...]  # recorded, one per user turn (None: the dataset has none)
    output_lens: tuple[int, ...]
    think_s: tuple[float, ...]  # the pause before each turn (0 before turn 1)
    system: tuple[dict[str, Any], ...] = ()
    category: str | None = None

    @property
    def turns(self) -> int:
        return len(self.users)


@dataclass(frozen=True, slots=True)
class Turns:
    """A dataset row as a conversation: leading system messages, user turns, recorded replies."""

    system: tuple[dict[str, Any], ...]
    users: tuple[str, ...]
    replies: tuple[str | None, ...]
    category: str | None


def session_id(seed: int, key: tuple[int, ...], conversation: int) -> str:
    """The conversation's id: a function of the seed, the round's key and its index, so both sides of
    an A/B pair (the same round) send the same one."""
    return "conv-" + hashlib.blake2b(f"{seed}:{key}:{conversation}".encode(), digest_size=8).hexdigest()


def think_times(t: float | ThinkTime, n: int, rng: np.random.Generator) -> list[float]:
    """`n` pauses, seconds."""
    if not isinstance(t, ThinkTime):
        return [float(t)] * n
    if t.dist == "fixed":
        return [float(t.value or 0.0)] * n
    if t.dist == "uniform":
        return [float(x) for x in rng.uniform(t.min or 0.0, t.max or 0.0, size=n)]
    return [float(x) for x in rng.exponential(t.mean or 0.0, size=n)]


class Conversations:
    """A plan's conversations, in order: `locate(k)` is measured request k's conversation and turn."""

    def __init__(self, convs: list[Conversation]) -> None:
        self._convs = convs
        self._firsts = [c.first for c in convs]
        self.n_turns = sum(c.turns for c in convs)

    def __len__(self) -> int:
        return len(self._convs)

    def __getitem__(self, c: int) -> Conversation:
        return self._convs[c]

    def __iter__(self) -> Iterator[Conversation]:
        return (self[c] for c in range(len(self)))

    def locate(self, k: int) -> tuple[Conversation, int]:
        """The conversation of measured request k and its turn (1-based)."""
        import bisect

        conv = self[bisect.bisect_right(self._firsts, k) - 1]
        return conv, k - conv.first + 1


class Synthetic(Conversations):
    """`workload.requests` conversations of `sessions.turns` turns of drawn token ids, each made when
    asked for (lengths drawn up front; conversation c's ids from its own RNG stream per turn), so memory
    stays flat however many there are, and c is the same whoever asks."""

    def __init__(self, profile: Profile, pool: np.ndarray, key: tuple[int, ...]) -> None:
        import numpy as np

        w = profile.workload
        assert w.sessions is not None
        self.profile, self.pool, self.key = profile, pool, key
        self.n, self.turns = w.request_count, w.sessions.turns
        rng = np.random.default_rng([profile.seed, _SESSION_SALT])
        self.isl = draw_lengths(w.input_len, self.n * self.turns, rng, profile.resolve("."))
        self.osl = draw_lengths(w.output_len, self.n * self.turns, rng, profile.resolve("."))
        self.n_turns = self.n * self.turns
        self._last: Conversation | None = None  # the one asked for last (its turns are asked for in a row)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, c: int) -> Conversation:
        import numpy as np

        if not 0 <= c < self.n:
            raise IndexError(c)
        if self._last is not None and self._last.index == c:
            return self._last
        p, turns = self.profile, self.turns
        users, replies = [], []
        for t in range(turns):
            r = np.random.default_rng([p.seed, _SESSION_SALT, *self.key, c, t])
            users.append(Part(tuple(r.choice(self.pool, size=int(self.isl[c * turns + t])).tolist())))
            replies.append(Part(tuple(r.choice(self.pool, size=int(self.osl[c * turns + t])).tolist())))
        self._last = Conversation(c, c * turns, session_id(p.seed, self.key, c), tuple(users), tuple(replies),
                                  tuple(int(x) for x in self.osl[c * turns:(c + 1) * turns]), _pauses(p, c, turns))
        return self._last

    def locate(self, k: int) -> tuple[Conversation, int]:
        return self[k // self.turns], k % self.turns + 1


def _pauses(profile: Profile, c: int, turns: int) -> tuple[float, ...]:
    import numpy as np

    ss = profile.workload.sessions
    assert ss is not None
    rng = np.random.default_rng([profile.seed, _THINK_SALT, c])
    return (0.0, *think_times(ss.think_time, turns - 1, rng))


def from_dataset(profile: Profile, key: tuple[int, ...], rows: list[Turns] | None = None) -> list[Conversation]:
    """`workload.requests` conversations drawn from the dataset's rows (`order`, as for single
    requests: shuffled by the seed, each row once until they run out, or in file order)."""
    import numpy as np

    w = profile.workload
    assert w.sessions is not None and w.dataset is not None
    rows = read_conversations(profile) if rows is None else rows
    order = (np.arange(len(rows)) if w.dataset.order == "file" else
             np.random.default_rng([profile.seed, 0xDA7A5E7]).permutation(len(rows)))
    osl_rng = np.random.default_rng([profile.seed, _SESSION_SALT, 1])
    out, first = [], 0
    cap = w.sessions.max_turns
    for c in range(w.request_count):
        row = rows[int(order[c % len(rows)])]
        users, replies = row.users[:cap], row.replies[:cap]
        osl = draw_lengths(w.output_len, len(users), osl_rng, profile.resolve("."))
        out.append(Conversation(c, first, session_id(profile.seed, key, c), tuple(Part(text=u) for u in users),
                                tuple(None if r is None else Part(text=r) for r in replies),
                                tuple(int(x) for x in osl), _pauses(profile, c, len(users)), row.system,
                                row.category))
        first += len(users)
    return out


def read_conversations(profile: Profile) -> list[Turns]:
    """Every row of the profile's dataset as a conversation (UsageError at the first bad one)."""
    ds = profile.workload.dataset
    assert ds is not None
    path = profile.resolve(ds.path)
    fmt = detect_format(ds, path)
    src: Any = _JsonArray(path) if fmt == "sharegpt" else JsonLines(path) if fmt == "jsonl" else \
        _Columns(path, fmt, ds.fields)
    if not len(src):
        raise UsageError(f"{path}: the dataset has no rows")
    return [to_turns(obj, profile, f"{path}: {src.unit} {src.number(k)}") for k, obj in src.scan()]


def to_turns(obj: Any, profile: Profile, where: str) -> Turns:
    """One row as a conversation (see the module docstring)."""
    ds = profile.workload.dataset
    assert ds is not None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected an object (a JSON object, a table row), got {type(obj).__name__}")
    cand = _candidates(ds.fields)
    cat = next((obj[k] for k in cand["category"] if obj.get(k) is not None), None)
    if cat is not None and (isinstance(cat, bool) or not isinstance(cat, str | int)):
        raise UsageError(f"{where}: {cand['category'][0]}: a category is a name (text), got {type(cat).__name__}")
    category = None if cat is None or cat == "" else str(cat)
    for k in cand["conversations"]:
        if obj.get(k) is not None:
            return _sharegpt(obj[k], f"{where}: {k}", category)
    for k in cand["messages"]:
        if obj.get(k) is not None:
            return _messages(obj[k], f"{where}: {k}", category)
    for k in cand["prompt"]:
        if isinstance(obj.get(k), str) and obj[k]:
            reply = next((obj[c] for c in cand["completion"] if isinstance(obj.get(c), str) and obj[c]), None)
            return Turns((), (obj[k],), (reply,), category)
    wanted = [n for role in ("conversations", "messages", "prompt") for n in cand[role]]
    raise UsageError(f"{where}: needs one of {', '.join(wanted)} (fields present: "
                     f"{', '.join(map(str, obj)) or 'none'}); map yours with workload.dataset.fields")


def _sharegpt(turns: Any, where: str, category: str | None) -> Turns:
    if not isinstance(turns, list):
        raise UsageError(f"{where}: expected a list of {{from, value}} turns")
    system: list[dict[str, Any]] = []
    users: list[str] = []
    replies: list[str | None] = []
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise UsageError(f"{where}: expected a list of {{from, value}} turns, got {str(t)[:80]!r}")
        who = str(t.get("from", "")).lower()
        if who == "system" and not users:
            system.append({"role": "system", "content": t["value"]})
        elif who in _HUMAN:
            users.append(t["value"])
            replies.append(None)
        elif who in _BOT and users and replies[-1] is None:
            replies[-1] = t["value"]
    if not any(users):
        raise UsageError(f"{where}: a conversation needs a user turn (from: human or user) with text")
    return Turns(tuple(system), tuple(users), tuple(replies), category)


def _messages(msgs: Any, where: str, category: str | None) -> Turns:
    if not isinstance(msgs, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs):
        raise UsageError(f"{where}: expected a list of {{role, content}} messages with text content")
    system: list[dict[str, Any]] = []
    users: list[str] = []
    replies: list[str | None] = []
    for m in msgs:
        if m["role"] == "system" and not users:
            system.append({"role": "system", "content": m["content"]})
        elif m["role"] == "user":
            users.append(m["content"])
            replies.append(None)
        elif m["role"] == "assistant" and users and replies[-1] is None:
            replies[-1] = m["content"]
    if not any(users):
        raise UsageError(f"{where}: a conversation needs a user turn (role: user) with text")
    return Turns(tuple(system), tuple(users), tuple(replies), category)


def conversations(profile: Profile, pool: np.ndarray, key: tuple[int, ...]) -> Conversations:
    """The plan's conversations: from the dataset, or synthetic."""
    if profile.workload.dataset is not None:
        return Conversations(from_dataset(profile, key))
    return Synthetic(profile, pool, key)


# --- what a turn sends ---------------------------------------------------------------------------


def history(conv: Conversation, turn: int, replies: list[Part]) -> list[Part]:
    """The parts turn `turn` (1-based) sends: user 1, reply 1, …, user `turn` (`replies`: the
    replies to the turns before it, recorded or actual)."""
    out: list[Part] = []
    for j in range(turn - 1):
        out += [conv.users[j], replies[j]]
    return [*out, conv.users[turn - 1]]


def all_ids(parts: list[Part]) -> tuple[int, ...] | None:
    """The parts' token ids end to end, when every part has them."""
    if any(p.ids is None for p in parts):
        return None
    return tuple(i for p in parts for i in p.ids or ())


def text_of(p: Part, pool_text: dict[int, str] | None) -> str:
    """A part's text: its own, else its ids' pool text (drawn ids always have one)."""
    if p.text is not None:
        return p.text
    if pool_text is None or p.ids is None:
        raise ValueError("a part with neither text nor the pool's text of its ids")
    return "".join(pool_text[i] for i in p.ids)


def as_messages(system: tuple[dict[str, Any], ...], parts: tuple[Part, ...],
                pool_text: dict[int, str] | None) -> list[dict[str, Any]]:
    """A chat API's messages: the system messages, then user and assistant turns alternating."""
    return [*system, *({"role": "user" if j % 2 == 0 else "assistant", "content": text_of(p, pool_text)}
                       for j, p in enumerate(parts))]


def as_text(system: tuple[dict[str, Any], ...], parts: tuple[Part, ...], pool_text: dict[int, str] | None) -> str:
    """A completions API's text prompt: a synthetic conversation's text end to end (its ids' pool text, the
    engine's replies as they came), a dataset's turns one paragraph each."""
    texts = [str(m["content"]) for m in system] + [text_of(p, pool_text) for p in parts]
    sep = "" if parts and parts[0].ids is not None else "\n\n"  # drawn turns: their ids' text end to end
    return sep.join(texts)


def check_conversations(profile: Profile) -> None:
    """Every row of a sessions dataset (validate, and before a run sends anything)."""
    if profile.workload.sessions is not None and profile.workload.dataset is not None:
        read_conversations(profile)

