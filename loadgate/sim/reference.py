"""The simulator's reference configuration, behind `exactness.baseline: sim-reference`: the same
model (seed, vocabulary, near-ties, context) with speculation, every divergence knob and every
fault off, and fast steps that never slow down (its timing plays no part in the baseline it gives)."""

from __future__ import annotations

import dataclasses

from loadgate.config.simconfig import DivergenceConfig, FaultConfig, SimConfig, SlowdownConfig


def reference_config(cfg: SimConfig) -> SimConfig:
    return dataclasses.replace(cfg, speculative=dataclasses.replace(cfg.speculative, method="none"),
                               divergence=DivergenceConfig(), faults=FaultConfig(), slowdown=SlowdownConfig(),
                               decode_step_us=200.0, decode_us_per_seq=10.0, prefill_us_per_token=1.0)
