"""Traces: JSONL files of requests by their lengths or ids, and timed traces replayed at their times.

Two kinds of line, checked one by one before anything is sent (a bad line is one error naming the
file and line):
- `trace` (loadgate's own): `output_len` (or `max_tokens`) and one of `input_len`, `prompt_ids`,
  `prompt`, `messages`; optional `category` and `timestamp`;
- `mooncake` (the Mooncake traces' shape): `timestamp` (ms), `input_length`, `output_length` and
  `hash_ids`, the ids of the prompt's blocks of `block` tokens (512 in the published traces). Two
  requests whose `hash_ids` begin alike begin with the same tokens: a block's tokens are drawn from
  the seed and its id alone (and the round's key, so a fresh run draws fresh blocks: two runs of one
  trace both start cold), and the tokens past the listed blocks are the request's own.

`load.schedule: trace` sends each request at its `timestamp` (ms): the lines are sorted by time
(lines out of order are counted, and the report says how many), trace time counts from the
earliest timestamp, `load.trace_start_s` and `load.trace_length_s` pick a window of it, and
`load.trace_speed` divides its gaps (2: twice as fast). Without the schedule a trace's lines are
sent in file order, repeated when `workload.requests` asks for more.

The trace's own sharing (`sharing`): the share of its prompt tokens that an earlier request of the
window already began with (the longest prefix a prompt has in common with any earlier one, by its
hash ids and lengths: equal ids are equal blocks, the tokens after them its own), the last token
left out (an engine always computes it): what a prefix cache of one-token blocks with room for
everything would find. An engine's cache of blocks of b tokens (vLLM's 16) rounds each prompt's
share down to whole blocks, b/2 tokens a request on average less. Written here: no library reads
these shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loadgate.errors import UsageError
from loadgate.load.workload.dataset import JsonLines
from loadgate.load.workload.timing import Window, number, replay_info, timed_order

if TYPE_CHECKING:
    import numpy as np

_BLOCK_SALT, _TAIL_SALT = 0xB10C, 0x7ACE


class TraceRequests:
    """The requests of a JSONL trace, one object per line, read on access (byte offsets are indexed
    up front). `n`: how many requests without a schedule (lines repeat in order); `block`: tokens per
    hash id."""

    def __init__(self, path: Path, n: int | None, seed: int, pool: np.ndarray, block: int = 512) -> None:
        """Every line is checked here, before anything is sent: a bad line is a one-line error
        naming the file and line, not a failure in the middle of a run."""
        import numpy as np

        self.path, self.seed, self.pool, self.block = path, seed, pool, block
        self.key: tuple[int, ...] = ()  # set by the plan: length-only lines draw fresh ids per round
        self.lines = JsonLines(path)  # the byte offsets of its non-empty lines
        self.first_ids_line: str | None = None  # where the first prompt_ids line is (chat APIs take none)
        self.first_untimed: str | None = None  # where the first line without a usable timestamp is, and why
        stamps = np.full(len(self.lines), np.nan)
        for k, line in self.lines.raw():
            obj = self.parse(line, self._where(k))
            if "prompt_ids" in obj and self.first_ids_line is None:
                self.first_ids_line = self._where(k)
            ts: Any = obj.get("timestamp")
            if number(ts) and ts >= 0:
                stamps[k] = ts
            elif self.first_untimed is None:  # a problem only for a timed replay (`timed`)
                self.first_untimed = (f"{self._where(k)}: no timestamp" if ts is None else
                                      f"{self._where(k)}: timestamp: expected a number of milliseconds >= 0, "
                                      f"got {ts!r}")
        if not len(self.lines):
            raise UsageError(f"{path}: trace has no requests")
        self.stamps_ms = stamps
        self.order: np.ndarray | None = None  # timed: the window's lines in time order
        self.offsets_ns: list[int] = []
        self.out_of_order = 0
        self.timed_window = Window()
        self.n = len(self.lines) if n is None else n

    def _where(self, k: int) -> str:
        return f"{self.path}:{self.lines.number(k)}"

    def __len__(self) -> int:
        return self.n

    def parse(self, line: bytes, where: str) -> dict[str, Any]:
        """The validated trace object of one line, in the `trace` kind's keys (a Mooncake line's
        `input_length` / `output_length` read as `input_len` / `output_len`)."""
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            raise UsageError(f"{where}: expected a JSON object with output_len (or max_tokens) and one of "
                             "input_len, prompt_ids, prompt, messages (or a Mooncake line: timestamp, input_length, "
                             "output_length, hash_ids)")
        written: dict[str, str] = {}  # our key -> the line's own name for it (a Mooncake line's)
        for theirs, ours in (("input_length", "input_len"), ("output_length", "output_len")):
            if theirs in obj and ours not in obj:
                obj[ours] = obj.pop(theirs)
                written[ours] = theirs

        def count(key: str, minimum: int) -> int:
            v = obj[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise UsageError(f"{where}: {written.get(key, key)}: expected an integer >= {minimum}, got {v!r}")
            return v

        key = "output_len" if "output_len" in obj or "max_tokens" not in obj else "max_tokens"
        if key not in obj:
            raise UsageError(f"{where}: needs output_len (or max_tokens, or a Mooncake line's output_length)")
        obj["output_len"] = count(key, 1)
        if "prompt_ids" in obj:
            ids = obj["prompt_ids"]
            if not isinstance(ids, list) or not ids or not all(
                    isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**32 for x in ids):
                raise UsageError(f"{where}: prompt_ids: expected a non-empty list of token ids")
        elif "input_len" in obj:
            count("input_len", 1)
        elif "messages" in obj:
            if not isinstance(obj["messages"], list) or not all(isinstance(m, dict) for m in obj["messages"]):
                raise UsageError(f"{where}: messages: expected a list of message objects")
        elif "prompt" in obj:
            if not isinstance(obj["prompt"], str):
                raise UsageError(f"{where}: prompt: expected a string")
        else:
            raise UsageError(f"{where}: needs input_len, prompt_ids, prompt or messages (or input_length)")
        if "hash_ids" in obj:
            self._check_hash_ids(obj, where)
        if obj.get("category") is not None and not isinstance(obj["category"], str):
            raise UsageError(f"{where}: category: a category is a name (text), got {type(obj['category']).__name__}")
        return obj

    def _check_hash_ids(self, obj: dict[str, Any], where: str) -> None:
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ids):
            raise UsageError(f"{where}: hash_ids: expected a list of block ids (integers >= 0)")
        n = obj.get("input_len")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UsageError(f"{where}: hash_ids need input_length (the prompt's tokens), an integer >= 1")
        if len(ids) > -(-n // self.block):
            raise UsageError(f"{where}: hash_ids: {len(ids)} blocks of {self.block} tokens need more than "
                             f"input_length {n} allows ({-(-n // self.block)} at most); workload.dataset.block_size "
                             "sets the block")

    def timed(self, window: Window) -> None:
        """Replay at the timestamps: every line needs one (else a one-line error naming the first
        without), sorted by time; the window's requests become the requests, at their offsets."""
        if self.first_untimed is not None:
            raise UsageError(f"{self.first_untimed}: load.schedule trace sends each request at its timestamp (ms), "
                             "which every line needs")
        order, self.offsets_ns, self.out_of_order = timed_order(self.stamps_ms, window, self.path)
        self.order = order
        self.n = int(order.size)
        self.timed_window = window

    def _line(self, k: int) -> tuple[int, dict[str, Any]]:
        j = int(self.order[k]) if self.order is not None else k % len(self.lines)
        return j, self.parse(next(line for _, line in self.lines.raw({j})), self._where(j))

    def get(self, k: int, draw: bool = True) -> dict[str, Any]:
        """Request k of the plan: a dict of PlannedRequest's fields. Without `draw`, a line that gives
        only a length has its prompt's count (`drawn_len`) instead of drawn ids (`Plan.light`)."""
        import numpy as np

        j, obj = self._line(k)
        req: dict[str, Any] = {"output_len": obj["output_len"]}
        if "prompt_ids" in obj:
            req["prompt_ids"] = tuple(obj["prompt_ids"])
        elif "input_len" in obj and not draw:
            req["drawn_len"] = obj["input_len"]
        elif "input_len" in obj:
            n = obj["input_len"]
            rng = np.random.default_rng([self.seed, _TAIL_SALT, k] if not self.key else
                                        [self.seed, _TAIL_SALT, 0xCAC4E, *self.key, k])
            blocks = [self._block(h) for h in obj.get("hash_ids") or ()]
            head = np.concatenate(blocks)[:n] if blocks else np.zeros(0, dtype=np.int64)
            tail = rng.choice(self.pool, size=n - head.size)
            req["prompt_ids"] = tuple(np.concatenate([head, tail]).tolist())
        elif "messages" in obj:
            req["messages"] = tuple(obj["messages"])
        else:
            req["prompt_text"] = obj["prompt"]
        if isinstance(obj.get("category"), str) and obj["category"]:
            req["category"] = obj["category"]
        return req

    def _block(self, h: int) -> np.ndarray:
        """The tokens of block id `h`: the same for every request of the round, another id's differ."""
        import numpy as np

        rng = np.random.default_rng([self.seed, _BLOCK_SALT, *self.key, h])
        return rng.choice(self.pool, size=self.block)

    def info(self) -> dict[str, Any] | None:
        """A timed replay (meta.json's `trace`): its requests, their span at its speed, the mean rate,
        the lines that were out of time order, the trace's lines, and its own prefix sharing; None
        for a trace sent without its times."""
        if self.order is None:
            return None
        return replay_info(self.offsets_ns, self.out_of_order, len(self.lines), self.timed_window, self.sharing())

    def sharing(self) -> dict[str, Any] | None:
        """The window's own prefix sharing (see the module docstring), or None for a trace without
        hash ids: `ratio` of its prompt tokens, `shared_tokens`, `prompt_tokens`, `block`."""
        nodes: dict[tuple[int, int], int] = {}  # (the chain so far, the next block's id) -> the chain's node
        held: list[int] = [0]  # per node: the most tokens of its last block an earlier prompt held
        shared = total = 0
        any_hash = False
        for k in range(self.n):
            _, obj = self._line(k)
            hashes = obj.get("hash_ids")
            n = obj.get("input_len")
            if not isinstance(n, int):
                n = len(obj["prompt_ids"]) if "prompt_ids" in obj else 0
            total += n
            if not hashes:
                continue
            any_hash = True
            chain, common, leading = 0, 0, True
            for j, h in enumerate(hashes):
                here = min(self.block, n - j * self.block)  # this prompt's tokens of block j
                node = nodes.get((chain, h))
                if leading:
                    if node is None:
                        leading = False
                    else:
                        common += min(here, held[node])
                        leading = held[node] >= here
                if node is None:
                    node = nodes[(chain, h)] = len(held)
                    held.append(0)
                held[node] = max(held[node], here)
                chain = node
            shared += min(common, n - 1)  # an engine computes the last token whatever it holds
        if not any_hash:
            return None
        return {"ratio": shared / total if total else None, "shared_tokens": shared, "prompt_tokens": total,
                "block": self.block}
