"""Token length distributions: draw integer lengths >= 1 from a profile `Distribution`.

Families:
  fixed      every length is `value`
  uniform    integers uniform on [min, max], both included
  normal     round(N(mean, std)), clipped to [min or 1, max or +inf]
  lognormal  round(LogNormal) whose *length* has mean `mean` and standard deviation `std`
             (mu, sigma of the log derived by moment matching), clipped like normal
  empirical  a CSV file: `length,weight` rows (a histogram; weights need not sum to 1) or, with a
             header `length,cdf`, a non-decreasing CDF ending at 1; lengths drawn exactly
  mixture    pick a component by weight, then draw from it
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING

from loadgate.config.profile import Distribution
from loadgate.errors import UsageError

if TYPE_CHECKING:
    import numpy as np


def _clip(x: np.ndarray, d: Distribution) -> np.ndarray:
    import numpy as np

    lo = d.min if d.min is not None else 1
    hi = d.max if d.max is not None else np.iinfo(np.int64).max
    out: np.ndarray = np.clip(np.rint(x), lo, hi).astype(np.int64)
    return out


def read_empirical(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, probabilities) from a histogram or CDF CSV; raises UsageError naming the file."""
    import numpy as np

    try:
        rows = [r for r in csv.reader(path.read_text(encoding="utf-8-sig").splitlines()) if r]
    except OSError as e:
        raise UsageError(f"{path}: cannot read empirical distribution: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None
    is_cdf = bool(rows) and [c.strip().lower() for c in rows[0]] == ["length", "cdf"]
    if rows and not rows[0][0].strip().lstrip("-").isdigit():
        rows = rows[1:]
    try:
        lengths = np.array([int(r[0]) for r in rows], dtype=np.int64)
        vals = np.array([float(r[1]) for r in rows], dtype=np.float64)
    except (ValueError, IndexError):
        raise UsageError(f"{path}: expected rows of `length,weight` (or `length,cdf`)") from None
    if lengths.size == 0 or (lengths < 1).any():
        raise UsageError(f"{path}: needs at least one row, and every length >= 1")
    if is_cdf:
        if (np.diff(vals) < 0).any() or not math.isclose(vals[-1], 1.0, abs_tol=1e-9):
            raise UsageError(f"{path}: a CDF must be non-decreasing and end at 1")
        probs = np.diff(vals, prepend=0.0)
    else:
        if (vals < 0).any() or vals.sum() <= 0:
            raise UsageError(f"{path}: weights must be >= 0 with a positive sum")
        probs = vals / vals.sum()
    return lengths, probs


def draw_lengths(d: Distribution, n: int, rng: np.random.Generator, base_dir: Path) -> np.ndarray:
    """`n` integer lengths from distribution `d` using `rng` (deterministic for a given seed)."""
    import numpy as np

    if d.dist == "fixed":
        return np.full(n, int(d.value or 1), dtype=np.int64)
    if d.dist == "uniform":
        return rng.integers(int(d.min or 1), int(d.max or 1) + 1, size=n, dtype=np.int64)
    if d.dist == "normal":
        return _clip(rng.normal(float(d.mean or 0), float(d.std or 0), size=n), d)
    if d.dist == "lognormal":
        m, s = float(d.mean or 1), float(d.std or 0)
        sigma2 = math.log1p((s / m) ** 2)
        mu = math.log(m) - sigma2 / 2
        return _clip(rng.lognormal(mu, math.sqrt(sigma2), size=n), d)
    if d.dist == "empirical":
        path = Path(d.file or "")
        lengths, probs = read_empirical(path if path.is_absolute() else base_dir / path)
        return lengths[rng.choice(len(lengths), size=n, p=probs)]
    weights = np.array([c.weight for c in d.components], dtype=np.float64)
    pick = rng.choice(len(weights), size=n, p=weights / weights.sum())
    out = np.empty(n, dtype=np.int64)
    for k, comp in enumerate(d.components):
        idx = np.flatnonzero(pick == k)
        if idx.size:
            out[idx] = draw_lengths(comp.dist, idx.size, rng, base_dir)
    return out
