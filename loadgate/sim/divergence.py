"""The divergence knobs: when the simulated engine departs from its own reference output.

A *flip* emits the runner-up token instead of the argmax. Flips happen only at near-tie positions
(the model's top-2 gap is below 0.3 nats there) and only for greedy requests (temperature 0);
generation then continues from the emitted token, and the reported logprob is that token's.
With every knob off (the default) nothing here changes any output.

  batch_variant   flip when the engine step that produces the token holds more than one
                  sequence (prefills and decodes counted together)
  spec_variant    flip for every token produced by a speculative verify pass (accepted drafts and
                  the bonus token; not the token from prefill)
  long_context    flip once the context (prompt + output so far, before the token) holds more
                  than `long_context` tokens
  run_to_run      a request is *armed* on arrival with this probability, from a hash of
                  (seed, the server's request index, the arrival wall-clock nanoseconds), so
                  repeating a request usually gives the same output and sometimes does not; an
                  armed request flips at its first near-tie position (whether or not another knob
                  also flips there) and is then disarmed
  logprob_jitter  every reported logprob (the token's and the top-N alternatives') is moved
                  `logprob_jitter` float32 ULPs towards minus infinity; token ids are untouched
"""

from __future__ import annotations

import time

import numpy as np

from loadgate.config.simconfig import DivergenceConfig
from loadgate.sim.hashing import hash_ints, unit


class FlipPolicy:
    """Decides, per produced token, whether the runner-up is emitted (see the module docstring)."""

    def __init__(self, cfg: DivergenceConfig, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed

    @property
    def active(self) -> bool:
        """True if any knob that can flip a token is on."""
        c = self.cfg
        return c.batch_variant or c.spec_variant or c.run_to_run > 0 or c.long_context > 0

    def arm_run_to_run(self, request_index: int) -> bool:
        """Whether a newly arrived request gets its one run-to-run flip (random per run)."""
        if self.cfg.run_to_run <= 0:
            return False
        return unit(hash_ints(0x52325252, self.seed, request_index, time.time_ns())) < self.cfg.run_to_run

    def flip(self, *, step_batch: int, verify: bool, context_len: int) -> bool:
        """Whether a near-tie token is flipped by batch_variant, spec_variant or long_context."""
        c = self.cfg
        return ((c.batch_variant and step_batch > 1) or (c.spec_variant and verify)
                or (0 < c.long_context < context_len))


def jitter_ulps(value: float, ulps: int) -> float:
    """`value` (a float32 logprob, <= 0) moved `ulps` float32 ULPs towards minus infinity.

    Equivalent to applying `np.nextafter(v, -inf)` `ulps` times in float32, in O(1): the float32's
    magnitude bits are increased by `ulps` (+0.0 is treated as -0.0). Returns a float.
    """
    if ulps == 0:
        return value
    f = np.float32(value)
    if f > 0:  # pragma: no cover - logprobs are never positive
        raise ValueError(f"logprob {value} is positive")
    mag = int(np.abs(f).view(np.uint32)) + ulps
    mag = min(mag, 0x7F800000)  # saturate at -inf
    return -float(np.uint32(mag).view(np.float32))
