"""The curve of `load.ramp`: how the load rises from `start` to a level's load L over T seconds.

linear:      load(t) = start + (L - start) t / T
exponential: load(t) = start (L / start) ^ (t / T)

Closed loop: slot s (0-based) of a level of L requests in flight opens when load(t) reaches s + 1,
so floor(load(t)) slots are open at time t; the first `start` open at once, and the last one would
open at T, when the ramp ends (so a ramp never has all L in flight: the measured phase does).

Open loop: arrivals follow the rate load(t); with Λ(t) = ∫₀ᵗ load, the k-th arrival of a process of
unit mean gaps at S_k (constant: S_k = k; Poisson: exponential gaps of mean 1; gamma: gamma gaps of
mean 1) comes at Λ⁻¹(S_k) (time rescaling); arrivals at or after T are not sent. So
linear:      Λ(t) = start t + a t² / 2, a = (L - start) / T;  Λ⁻¹(s) = 2 s / (start + sqrt(start² + 2 a s))
exponential: Λ(t) = start (e^{b t} - 1) / b, b = ln(L / start) / T;  Λ⁻¹(s) = ln(1 + b s / start) / b
and the ramp's expected number of arrivals is Λ(T): T (start + L) / 2, or T (L - start) / ln(L / start).
A start at or above L holds L for T seconds (both shapes: Λ(t) = L t).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

Shape = Literal["linear", "exponential"]
OPEN_START_FRACTION = 0.1  # an open loop's ramp starts, by default, at a tenth of the level's rate


def start_of(start: float | None, level: float, closed: bool) -> float:
    """Where a level's ramp starts: `start` (default 1 in flight, or a tenth of the rate), at most the level."""
    if start is None:
        start = 1.0 if closed else level * OPEN_START_FRACTION
    return min(start, level)


def load_at(shape: Shape, start: float, level: float, duration_s: float, t_s: float) -> float:
    """The ramp's load at `t_s` seconds (0 <= t_s <= duration_s)."""
    x = t_s / duration_s
    if shape == "linear" or start >= level:
        return start + (level - start) * x
    return float(start * (level / start) ** x)


def slot_delays_s(shape: Shape, start: float, level: int, duration_s: float) -> list[float]:
    """When each of a closed loop's `level` slots opens, seconds after the ramp's start (see the module)."""
    c0 = int(start)
    out = []
    for s in range(level):
        need = s + 1
        if need <= c0:
            out.append(0.0)
        elif shape == "linear":
            out.append(duration_s * (need - c0) / (level - c0))
        else:
            out.append(duration_s * math.log(need / c0) / math.log(level / c0))
    return out


def expected_arrivals(shape: Shape, start: float, level: float, duration_s: float) -> float:
    """Λ(T): the open-loop ramp's expected number of arrivals (exactly its count with constant arrivals,
    give or take the one at T)."""
    if start >= level:
        return level * duration_s
    if shape == "linear":
        return duration_s * (start + level) / 2
    return duration_s * (level - start) / math.log(level / start)


def arrival_times_s(shape: Shape, start: float, level: float, duration_s: float, cumulative: np.ndarray) -> np.ndarray:
    """Λ⁻¹ of the unit process's cumulative arrival counts `cumulative` (see the module): seconds."""
    import numpy as np

    s = np.asarray(cumulative, dtype=np.float64)
    if start >= level:
        return s / level
    if shape == "linear":
        a = (level - start) / duration_s
        return 2 * s / (start + np.sqrt(start * start + 2 * a * s))
    b = math.log(level / start) / duration_s
    return np.log1p(b * s / start) / b
