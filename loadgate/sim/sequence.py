"""One generation request inside the engine: its parameters, its output so far, its outbox.

The engine appends tokens with `append_token` and closes each step with `end_step`, which turns
the step's tokens into one `StepOutput` (the chunk a streaming route sends). The engine then either
hands it to the sequence's `sink` (the streaming fast path, when the handler is idle and its
connection keeps up) or queues it with `publish` and wakes the handler, which awaits
`next_outputs`: every output queued since its last call, merged into one (a handler that fell
behind sends one bigger chunk, as vLLM does).

Finishing, checked after every token in this order (as vLLM v1 does):
  1. a stop string now appears in the output text -> "stop", stop_reason = the string, text cut
     before it (text that could begin a stop string is held back until it cannot);
  2. the output holds max_tokens tokens -> "length";
  3. the token is EOS and ignore_eos is false -> "stop", stop_reason None;
  4. the token is in stop_token_ids -> "stop", stop_reason = the id.
The token that finishes a sequence is part of its output (ids, counts); special tokens add no text.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from loadgate.sim.divergence import jitter_ulps
from loadgate.sim.speculative import SpecProgress
from loadgate.sim.tokenizer import Tokenizer


class Sink(Protocol):
    """Receives a sequence's step outputs directly from the engine (the streaming fast path)."""

    def ready(self, seq: Sequence) -> bool:
        """Whether `write` may be called now for `seq` (else the output goes to `seq.pending`)."""
        ...

    @property
    def ends_with_handler(self) -> bool:
        """Whether a finished sequence's last output goes to its handler instead (to end the stream with it)."""
        ...

    def write(self, seq: Sequence, out: StepOutput) -> None:
        """Send `out` now, without blocking (it runs inside the engine task)."""
        ...


@dataclass(frozen=True)
class GenParams:
    """Route-independent sampling parameters of one request (already validated)."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    temperature: float = 0.0
    seed: int | None = None
    logprobs: int | None = None  # top-N alternatives per token; None: no logprobs at all
    skip_special_tokens: bool = True


@dataclass(slots=True)
class StepOutput:
    """What one engine step (or several merged) produced for one sequence."""

    token_ids: list[int]
    text: str
    logprobs: list[float] | None  # the emitted tokens' float32 logprobs (after jitter)
    top: list[list[tuple[int, float]]] | None  # per token: the top-N (id, logprob), best first
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None

    def merge(self, other: StepOutput) -> None:
        """Append `other` (a later output of the same sequence) to this one."""
        self.token_ids.extend(other.token_ids)
        self.text += other.text
        if self.logprobs is not None and other.logprobs is not None:
            self.logprobs.extend(other.logprobs)
        if self.top is not None and other.top is not None:
            self.top.extend(other.top)
        self.finish_reason = other.finish_reason
        self.stop_reason = other.stop_reason


class Sequence:
    """The engine's state of one request. Create with `SimEngine.submit`."""

    __slots__ = ("params", "tokenizer", "context_hash", "spec", "jitter", "run_to_run_armed",
                 "sample_seed", "output_ids", "context", "finished", "aborted", "counted",
                 "finish_reason", "stop_reason", "pending", "_decoder", "_tail", "_hold", "_step_ids",
                 "_step_lps", "_step_top", "_waiter", "_specials", "_token_bytes", "_ascii", "sink", "flips",
                 "flip_batches", "cached_tokens", "arrived_s", "admitted_s", "last_output_s")

    def __init__(self, params: GenParams, tokenizer: Tokenizer, context_hash: int,
                 spec: SpecProgress | None = None, jitter: int = 0, run_to_run_armed: bool = False,
                 sample_seed: int = 0) -> None:
        self.params = params
        self.tokenizer = tokenizer
        self.context_hash = context_hash
        self.spec = spec
        self.jitter = jitter
        self.run_to_run_armed = run_to_run_armed
        self.sample_seed = sample_seed
        self.output_ids: list[int] = []
        self.cached_tokens = 0  # prompt tokens the prefix cache served (set when the engine admits it)
        # the engine's clock (`time.perf_counter`): queued, admitted into the batch, last output published
        self.arrived_s = time.perf_counter()
        self.admitted_s: float | None = None
        self.last_output_s: float | None = None
        self.flips: list[int] = []  # output positions where the runner-up was emitted (ground truth)
        self.flip_batches: list[int] = []  # the engine step's batch size at each of those positions
        self.context: list[int] = list(params.prompt_ids)
        self.finished = False
        self.aborted = False
        self.counted = False  # the engine has counted this request in request_success_total
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.pending: list[StepOutput] = []
        self._decoder = tokenizer.incremental_decoder()
        self._tail = ""  # output text not yet published (held back or produced this step)
        self._hold = max((len(s) for s in params.stop), default=1) - 1
        self._step_ids: list[int] = []
        self._step_lps: list[float] | None = [] if params.logprobs is not None else None
        self._step_top: list[list[tuple[int, float]]] | None = [] if params.logprobs is not None else None
        self._waiter: asyncio.Future[None] | None = None
        self._specials = tokenizer.special_ids if params.skip_special_tokens else frozenset()
        self._token_bytes = tokenizer.token_bytes
        self._ascii = tokenizer.ascii_text
        self.sink: Sink | None = None  # set by a streaming handler to receive outputs directly

    @property
    def n_prompt(self) -> int:
        return len(self.params.prompt_ids)

    @property
    def remaining(self) -> int:
        """Tokens still allowed by max_tokens."""
        return self.params.max_tokens - len(self.output_ids)

    def append_token(self, token: int, logprob: float, top: list[tuple[int, float]] | None,
                     new_hash: int) -> bool:
        """Add one produced token; returns True if it finished the sequence."""
        self.output_ids.append(token)
        self.context.append(token)
        self.context_hash = new_hash
        self._step_ids.append(token)
        if self._step_lps is not None:
            j = self.jitter
            self._step_lps.append(jitter_ulps(logprob, j))
            assert self._step_top is not None
            self._step_top.append([(t, jitter_ulps(v, j)) for t, v in top or ()])
        p = self.params
        if token not in self._specials:
            text = self._ascii[token]
            if text is None or self._decoder.buffer:  # type: ignore[attr-defined]
                text = self._decoder.decode(self._token_bytes(token))
            self._tail += text
            if p.stop and self._check_stop_strings():
                return True
        if len(self.output_ids) >= p.max_tokens:
            return self._finish("length", None)
        if token == self.tokenizer.eos_id and not p.ignore_eos:
            return self._finish("stop", None)
        if token in p.stop_token_ids:
            return self._finish("stop", token)
        return False

    def _check_stop_strings(self) -> bool:
        # Published text never holds the start of a stop string (it is held back until it cannot),
        # so searching the unpublished tail is enough.
        best: tuple[int, str] | None = None
        for s in self.params.stop:
            pos = self._tail.find(s)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, s)
        if best is None:
            return False
        self._tail = self._tail[:best[0]]
        return self._finish("stop", best[1])

    def _finish(self, reason: str, stop_reason: str | int | None) -> bool:
        self.finished = True
        self.finish_reason = reason
        self.stop_reason = stop_reason
        return True

    def end_step(self) -> StepOutput:
        """Close the current step: build its output from the tokens appended since the last call."""
        tail = self._tail
        if self.finished:
            if not isinstance(self.stop_reason, str):
                tail += self._decoder.decode(b"", final=True)
            text, self._tail = tail, ""
        elif self._hold:
            cut = max(0, len(tail) - self._hold)
            text, self._tail = tail[:cut], tail[cut:]
        else:
            text, self._tail = tail, ""
        out = StepOutput(self._step_ids, text, self._step_lps, self._step_top,
                         self.finish_reason, self.stop_reason)
        self._step_ids = []
        if self._step_lps is not None:
            self._step_lps, self._step_top = [], []
        return out

    # ---- outbox ----------------------------------------------------------------------------

    def publish(self, out: StepOutput) -> None:
        """Queue `out` for the handler and wake it."""
        self.pending.append(out)
        self._wake()

    def close(self) -> None:
        """Mark the sequence ended from outside the step loop and wake its handler (used by
        `SimEngine.abort`, which also does the counting)."""
        self.finished = True
        self._wake()

    @property
    def handler_idle(self) -> bool:
        """True while the handler waits in `next_outputs` with nothing queued."""
        return self._waiter is not None and not self.pending

    def wake(self) -> None:
        """Wake the handler if it waits in `next_outputs`."""
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    async def next_outputs(self) -> StepOutput | None:
        """Everything published since the last call, merged into one output; None once the
        sequence has ended and nothing is left."""
        while not self.pending:
            if self.finished:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        outs, self.pending = self.pending, []
        first = outs[0]
        if len(outs) > 1:
            for o in outs[1:]:
                first.merge(o)
        return first
