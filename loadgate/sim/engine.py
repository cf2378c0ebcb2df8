"""The continuous-batching engine loop: one asyncio task that steps every running sequence.

One step, in order:
  1. Sequences finished or aborted since the last step leave the batch.
  2. Waiting sequences are admitted in arrival order while fewer than `max_num_seqs` run.
  3. Each newly admitted sequence is prefilled; the prefill produces its first output token.
  4. Every sequence that was already running decodes one token, or, with speculation on, runs a
     verify step that emits accepted drafts + one bonus token (`loadgate.sim.speculative`).
  5. The step's cost is slept in real time, measured from the step's start on a deadline grid
     (`time.perf_counter`), so lateness of one step does not accumulate: the next step starts
     at this step's deadline unless the loop is more than one step behind, when it restarts
     from now. Cost in microseconds: `fixed_step_us` if > 0; otherwise
     `prefill_us_per_token * (prompt tokens prefilled)`, plus, if any sequence decodes,
     `decode_step_us + decode_us_per_seq * (decoding sequences - 1)`, plus with speculation
     `(draft_us_per_token + verify_us_per_token) * k`; from `slowdown.after_s` seconds after the
     engine's first step began, times `slowdown.factor` (`SimEngine.cost_factor`).
  6. At the deadline all outputs of the step are handed over together, so chunks leave in
     bursts, one burst per step, as from a real engine. Streaming requests whose handler is idle
     and whose connection has no unsent bytes are written right here, by this task, one after
     the other (`Sequence.sink`; no task switch per chunk, which is what lets one core serve 512
     streams at 10 ms steps); the others are queued for their handler task.
Token computation (3, 4) happens before the sleep, on the CPU, like a GPU step that is running.
`asyncio.sleep` wakes on a millisecond timer grid, so a step's outputs leave up to ~1 ms late;
the ground-truth log records the real send times.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict, deque

from loadgate.config.simconfig import SimConfig
from loadgate.sim.divergence import FlipPolicy
from loadgate.sim.hashing import hash_ints, unit
from loadgate.sim.metrics import EngineCounters, Gauges
from loadgate.sim.model import WINDOW, SimModel, roll_hash
from loadgate.sim.sequence import GenParams, Sequence, StepOutput
from loadgate.sim.speculative import SpecProgress, draft_probs, draw_accepted, verify_position
from loadgate.sim.speculative import draw as draw_index

_log = logging.getLogger(__name__)


class PrefixCache:
    """Automatic prefix caching as vLLM does it: a prompt is cut into full blocks of `block` tokens,
    each identified by a hash of everything up to its end; the leading blocks already cached are
    hits. Bounded (least recently used blocks go first), like a real KV cache."""

    def __init__(self, block: int, capacity_blocks: int = 65536) -> None:
        self.block, self.capacity = block, capacity_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def admit(self, prompt_ids: list[int] | tuple[int, ...]) -> int:
        """Tokens of `prompt_ids` found in the cache (a whole number of leading blocks); the
        prompt's blocks are cached from now on."""
        hits, h, leading = 0, 0, True
        for end in range(self.block, len(prompt_ids), self.block):  # the last token is always computed
            h = hash_ints(h, *prompt_ids[end - self.block:end])
            if leading and h in self.blocks:
                hits += self.block
                self.blocks.move_to_end(h)
                continue
            leading = False
            self.blocks[h] = None
            if len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)
        return hits


class SimEngine:
    """Continuous batching over `SimModel`; see the module docstring for the step semantics."""

    def __init__(self, cfg: SimConfig, model: SimModel) -> None:
        self.cfg = cfg
        self.model = model
        self.spec_on = cfg.speculative.method != "none"
        self.k = cfg.speculative.k if self.spec_on else 0
        self.counters = EngineCounters(spec_k=self.k, prefix_cache=cfg.prefix_cache_block > 0)
        self.prefix_cache = PrefixCache(cfg.prefix_cache_block) if cfg.prefix_cache_block > 0 else None
        self.flips = FlipPolicy(cfg.divergence, cfg.seed)
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.first_step_at: float | None = None  # perf_counter() when the first step began
        self.slowed_at: float | None = None  # when the first slowed step began (`slowdown`), None before

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the step loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-engine")

    async def stop(self) -> None:
        """Stop the loop and abort every waiting or running sequence (their handlers wake)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._abort_all()

    # ---- requests --------------------------------------------------------------------------

    def submit(self, params: GenParams, index: int) -> Sequence:
        """Queue a request; `index` is the server's request counter (seeds run_to_run)."""
        seed = params.seed
        if seed is None or self.cfg.faults.ignore_seed:
            seed = hash_ints(index, time.time_ns(), os.getpid())
        seq = Sequence(params=params, tokenizer=self.model.tokenizer,
                       context_hash=self.model.context_hash(params.prompt_ids),
                       spec=SpecProgress(self.k) if self.spec_on else None,
                       jitter=self.cfg.divergence.logprob_jitter,
                       run_to_run_armed=self.flips.arm_run_to_run(index),
                       sample_seed=hash_ints(0x5A3E, seed))
        self._waiting.append(seq)
        self._wake.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        """End `seq` now (client gone, injected disconnect, shutdown); counted once as 'abort'."""
        if seq.counted:
            return
        seq.counted = True
        seq.aborted = True
        seq.finished = True
        seq.finish_reason = "abort"
        self.counters.success["abort"] += 1
        seq.close()

    def gauges(self) -> Gauges:
        """Running and waiting counts, and KV use = context tokens held by running sequences /
        (max_num_seqs * max_model_len)."""
        held = sum(len(s.context) for s in self._running if not s.finished)
        cap = self.cfg.max_num_seqs * self.cfg.max_model_len
        waiting = sum(1 for s in self._waiting if not s.finished)
        return Gauges(sum(1 for s in self._running if not s.finished), waiting, held / cap)

    # ---- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            try:
                await self._steps()
            except Exception:  # a bug must not leave handlers waiting forever
                _log.exception("simulator engine step failed; aborting the requests in flight")
                self._abort_all()

    def _abort_all(self) -> None:
        for s in list(self._waiting) + self._running:
            self.abort(s)
        self._waiting.clear()
        self._running.clear()

    async def _steps(self) -> None:
        next_start: float | None = None
        while True:
            if not self._waiting and not self._running:
                self._wake.clear()
                await self._wake.wait()
                next_start = None
            t0 = time.perf_counter() if next_start is None else next_start
            cost_s, outputs = self._step()
            cost_s *= self.cost_factor(t0)
            deadline = t0 + cost_s
            delay = deadline - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            for s, out in self._publish(outputs):
                if s.sink is not None:
                    s.sink.write(s, out)
            await asyncio.sleep(0)  # let the woken handlers write before the next step computes
            behind = time.perf_counter() - deadline
            next_start = deadline if behind <= max(cost_s, 0.001) else None

    def cost_factor(self, t0: float) -> float:
        """The multiplier of the cost of a step that began at `t0` (perf_counter seconds): 1, or
        `slowdown.factor` once `slowdown.after_s` have passed since the first step began (noted in
        `slowed_at`, and logged, the first time)."""
        if self.first_step_at is None:
            self.first_step_at = t0
        sd = self.cfg.slowdown
        if sd.factor == 1.0 or t0 - self.first_step_at < sd.after_s:
            return 1.0
        if self.slowed_at is None:
            self.slowed_at = t0
            _log.info("simulator slowdown: every step costs %g times as much from %.3f s after the first step",
                      sd.factor, t0 - self.first_step_at)
        return sd.factor

    def _step(self) -> tuple[float, list[tuple[Sequence, StepOutput]]]:
        cfg = self.cfg
        running = [s for s in self._running if not s.finished]
        new: list[Sequence] = []
        while self._waiting and len(running) + len(new) < cfg.max_num_seqs:
            s = self._waiting.popleft()
            if not s.finished:
                new.append(s)
        batch = len(running) + len(new)
        admitted = time.perf_counter()
        for s in new:
            s.admitted_s = admitted
        outputs: list[tuple[Sequence, StepOutput]] = []
        prompt_tokens = sum(s.n_prompt for s in new)
        self.counters.prompt_tokens += prompt_tokens
        if self.prefix_cache is not None and new:
            for s in new:
                s.cached_tokens = self.prefix_cache.admit(s.params.prompt_ids)
            hits = sum(s.cached_tokens for s in new)
            self.counters.prefix_cache_queries += prompt_tokens
            self.counters.prefix_cache_hits += hits
            prompt_tokens -= hits  # cached blocks are not prefilled again
        if new:
            self._generate(new, [1] * len(new), batch, verify=False)
            outputs.extend((s, s.end_step()) for s in new)
        if running:
            if self.spec_on:
                self._verify(running, batch, outputs)
            else:
                self._generate(running, [1] * len(running), batch, verify=False)
                outputs.extend((s, s.end_step()) for s in running)
        self._running = running + new
        if cfg.fixed_step_us > 0:
            cost_us = cfg.fixed_step_us
        else:
            cost_us = cfg.prefill_us_per_token * prompt_tokens
            if running:
                cost_us += cfg.decode_step_us + cfg.decode_us_per_seq * (len(running) - 1)
                if self.spec_on:
                    cost_us += (cfg.draft_us_per_token + cfg.verify_us_per_token) * self.k
        return cost_us * 1e-6, outputs

    def _verify(self, seqs: list[Sequence], batch: int, outputs: list[tuple[Sequence, StepOutput]]) -> None:
        sampled = [s for s in seqs if s.params.temperature > 0]
        if sampled:
            for s in sampled:
                ke = min(self.k, s.remaining - 1)
                accepted = self._verify_sampled(s, ke)
                assert s.spec is not None
                s.spec.record(ke, accepted)
                self.counters.record_verify(ke, accepted)
                outputs.append((s, s.end_step()))
            seqs = [s for s in seqs if s.params.temperature <= 0]
            if not seqs:
                return
        k_effs = [min(self.k, s.remaining - 1) for s in seqs]
        wants = [draw_accepted(self.cfg.speculative, self.cfg.seed, s.context_hash, len(s.output_ids), ke) + 1
                 for s, ke in zip(seqs, k_effs, strict=True)]
        before = [len(s.output_ids) for s in seqs]
        self._generate(seqs, wants, batch, verify=True)
        for s, ke, n0 in zip(seqs, k_effs, before, strict=True):
            accepted = len(s.output_ids) - n0 - 1
            assert s.spec is not None
            s.spec.record(ke, accepted)
            self.counters.record_verify(ke, accepted)
            outputs.append((s, s.end_step()))

    def _generate(self, seqs: list[Sequence], wants: list[int], batch: int, verify: bool) -> None:
        """Append up to `wants[i]` tokens to `seqs[i]`, one batched model call per token position."""
        model = self.model
        pad = model.pad
        flips_on = self.flips.active
        active = list(range(len(seqs)))
        j = 0
        while active:
            rows = [seqs[i] for i in active]
            d = model.dists([s.context_hash for s in rows])
            top1, top2, lp1, lp2, near = d.top1, d.top2, d.lp1, d.lp2, d.near
            still: list[int] = []
            for r, i in enumerate(active):
                s = rows[r]
                p = s.params
                if p.temperature > 0:
                    tok, lp = model.sample(d, r, p.temperature,
                                           unit(hash_ints(s.sample_seed, len(s.output_ids))))
                elif near[r] and flips_on and self._flip(s, batch, verify):
                    tok, lp = top2[r], lp2[r]
                else:
                    tok, lp = top1[r], lp1[r]
                top = model.top_logprobs(d, r, p.logprobs) if p.logprobs else None
                ctx = s.context
                leaving = ctx[-WINDOW] if len(ctx) >= WINDOW else pad
                if not s.append_token(tok, lp, top, roll_hash(s.context_hash, leaving, tok)) and j + 1 < wants[i]:
                    still.append(i)
            active = still
            j += 1

    def _verify_sampled(self, s: Sequence, k_eff: int) -> int:
        """One verify step of a sampled request by real speculative sampling (see
        `loadgate.sim.speculative`): drafts drawn from q and kept by the configured rule, a
        rejection's resampled token, or a bonus token from p after k_eff kept drafts. Returns the
        number of drafts kept; the emitted tokens are appended to `s`."""
        model, spec = self.model, self.cfg.speculative
        t = s.params.temperature
        for m in range(k_eff + 1):
            n = len(s.output_ids)
            ranked, p = model.probs(s.context_hash, t)
            u = [unit(hash_ints(s.sample_seed, n, 0x5BEC, m, j)) for j in range(4)]
            if m == k_eff:  # every draft kept: the bonus token, from p
                idx, kept = draw_index(p, u[2]), False
            else:
                idx, kept = verify_position(p, draft_probs(p, spec.draft_sharpness), spec.sampling_rule,
                                            u[0], u[1], u[2], spec.wrong_rule_rate, u[3])
            tok = int(ranked[idx])
            if not self._append(s, tok, model.logprob_of(s.context_hash, tok)) or not kept:
                return m
        return k_eff

    def _append(self, s: Sequence, tok: int, lp: float) -> bool:
        """Append one sampled token (with the logprobs asked for); False once `s` has finished."""
        model = self.model
        p = s.params
        top = model.top_logprobs(model.dists([s.context_hash]), 0, p.logprobs) if p.logprobs else None
        ctx = s.context
        leaving = ctx[-WINDOW] if len(ctx) >= WINDOW else model.pad
        return not s.append_token(tok, lp, top, roll_hash(s.context_hash, leaving, tok))

    def _flip(self, s: Sequence, batch: int, verify: bool) -> bool:
        """Whether the near-tie token now produced for `s` is the runner-up (see divergence)."""
        flip = self.flips.flip(step_batch=batch, verify=verify, context_len=len(s.context))
        if s.run_to_run_armed:
            s.run_to_run_armed = False
            flip = True
        if flip:
            s.flips.append(len(s.output_ids))
            s.flip_batches.append(batch)
        return flip

    def _publish(self, outputs: list[tuple[Sequence, StepOutput]]) -> list[tuple[Sequence, StepOutput]]:
        """Count the step's outputs and queue them for their handlers; returns those whose sink
        takes them directly instead (written by the loop right after, in the same task)."""
        counters = self.counters
        direct: list[tuple[Sequence, StepOutput]] = []
        now = time.perf_counter()
        for s, out in outputs:
            if s.aborted:
                continue
            counters.generation_tokens += len(out.token_ids)
            if s.last_output_s is None:
                counters.ttft.observe(now - s.arrived_s)
            else:
                counters.itl.observe(now - s.last_output_s)
            s.last_output_s = now
            if s.finished and not s.counted:
                s.counted = True
                counters.success[s.finish_reason or "stop"] += 1
                counters.e2e.observe(now - s.arrived_s)
                counters.queue.observe((s.admitted_s or now) - s.arrived_s)
            # a stream's last output in the per_token shape goes to its handler, which writes it with
            # the stream's end in one write (as engines end a stream right after its last token)
            if s.sink is not None and s.sink.ready(s) and not (s.finished and s.sink.ends_with_handler):
                direct.append((s, out))
            else:
                s.publish(out)
        self._running = [s for s in self._running if not s.finished]
        return direct

    @property
    def sglang_avg_spec_accept_length(self) -> float:
        """SGLang's server-wide figure: tokens generated / verify steps since start (0.0 if none)."""
        c = self.counters
        return c.generation_tokens / c.spec_drafts if c.spec_drafts else 0.0
