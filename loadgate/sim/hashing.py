"""Integer hashing shared by the simulated model, speculation and fault injection.

Everything random in the simulator comes from these functions applied to explicit keys (the
configured seed, a context hash, a request index), never from a global RNG, so a run is
reproducible from its inputs. All arithmetic is on unsigned 64-bit integers modulo 2**64; the
numpy variants wrap identically to the Python ones, element by element, so a value computed for
one row of a batch never depends on the other rows.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_INV_2_53 = 1.0 / (1 << 53)


def mix64(x: int) -> int:
    """splitmix64's step: a bijective, well-mixed 64-bit function of `x` (Python ints)."""
    x = (x + GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * _M1) & MASK64
    x = ((x ^ (x >> 27)) * _M2) & MASK64
    return x ^ (x >> 31)


def mix64_np(x: np.ndarray) -> np.ndarray:
    """`mix64` on a uint64 array, element by element (wrapping arithmetic, same bits)."""
    x = x + np.uint64(GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def hash_ints(*values: int) -> int:
    """A 64-bit hash of a tuple of non-negative ints, order-sensitive."""
    h = 0x243F6A8885A308D3
    for v in values:
        h = mix64(h ^ (v & MASK64))
    return h


def unit(h: int) -> float:
    """Map a 64-bit hash to a float in [0, 1) using its top 53 bits."""
    return (h >> 11) * _INV_2_53


def unit_np(h: np.ndarray) -> np.ndarray:
    """`unit` on a uint64 array (exact: the 53-bit integers convert to float64 without rounding)."""
    return (h >> np.uint64(11)).astype(np.float64) * _INV_2_53
