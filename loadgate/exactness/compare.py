"""Position-by-position comparison of a candidate's output against the baseline's.

For one sequence: the first divergence index (first position whose token id differs, or the
shorter length when one output is a prefix of the other), both tokens there, the baseline's
top-2 logprob gap there (how close the baseline itself was to choosing otherwise), and on the
matching positions before it the logprob distance in float32 ULPs.

Logprob conventions (see reference/engines.md): values are float32 widened to double, so casting
back to float32 is exact; `None` (JSON null) means non-finite and equals only another None;
vLLM's clamp -9999.0 is compared as the value it is. Positions an adapter marked as
placeholders (llama-server's 0.0 with an empty top list for draft-accepted tokens, or missing
values) are compared on ids only and counted, never treated as equal logprobs.

The ULP distance between float32 a and b is |ord(a) - ord(b)| where ord maps the float32 bit
pattern to an integer that increases with the value (negative patterns are mirrored), so
adjacent floats differ by 1 and +0.0 / -0.0 by 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


NULL_ULP = 2**63 - 1  # distance between a real value and a null (non-finite)


@dataclass(frozen=True)
class SeqOutput:
    ids: tuple[int, ...]
    logprobs: tuple[float | None, ...] | None = None
    top: tuple[tuple[tuple[int, float | None], ...], ...] | None = None  # per position, best first
    finish_reason: str | None = None
    placeholders: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Comparison:
    length_base: int
    length_cand: int
    first_divergence: int | None  # None: ids identical and same length
    base_token: int | None  # at the divergence (None: past the end)
    cand_token: int | None
    base_gap: float | None  # baseline top-2 gap (nats) at the divergence, when known
    finish_equal: bool
    positions_compared: int  # matching positions before the divergence
    logprob_positions: int  # of those, compared on logprob values
    ids_only_positions: int  # of those, compared on ids only (placeholders or no logprobs)
    max_ulp: int | None  # over logprob_positions; None when none were compared
    ulp_nonzero: int  # positions whose logprobs differ at all
    first_ulp_position: int | None = None
    max_abs_logprob_diff: float | None = None  # nats, over logprob_positions
    notes: tuple[str, ...] = field(default=())


def f32_ordered(values: np.ndarray) -> np.ndarray:
    """float64 array of float32-representable values -> int64 keys ordered like the values."""
    import numpy as np

    bits = values.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, np.int64(-(2**31)) - bits - 1, bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    import numpy as np

    out: np.ndarray = np.abs(f32_ordered(a) - f32_ordered(b))
    return out


def top2_gap(top: tuple[tuple[int, float | None], ...] | None) -> float | None:
    """Baseline top-1 minus top-2 logprob (>= 0), or None when fewer than two real values."""
    import numpy as np

    if not top or len(top) < 2 or top[0][1] is None or top[1][1] is None:
        return None
    return float(np.float32(top[0][1])) - float(np.float32(top[1][1]))


def _lp_array(lps: tuple[float | None, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values with NaN for null, is_null mask) for the first n positions."""
    import numpy as np

    vals = np.fromiter((np.nan if v is None else v for v in lps[:n]), dtype=np.float64, count=min(n, len(lps)))
    return vals, np.isnan(vals)


def compare(base: SeqOutput, cand: SeqOutput) -> Comparison:
    import numpy as np

    nb, nc = len(base.ids), len(cand.ids)
    n = min(nb, nc)
    a = np.asarray(base.ids[:n], dtype=np.int64)
    b = np.asarray(cand.ids[:n], dtype=np.int64)
    diff = np.flatnonzero(a != b)
    if diff.size:
        first: int | None = int(diff[0])
    else:
        first = None if nb == nc else n
    upto = first if first is not None else n
    notes: list[str] = []
    lp_pos = ids_only = ulp_nonzero = 0
    max_ulp: int | None = None
    max_abs: float | None = None
    first_ulp: int | None = None
    if base.logprobs is not None and cand.logprobs is not None and upto > 0:
        m = min(upto, len(base.logprobs), len(cand.logprobs))
        va, na = _lp_array(base.logprobs, m)
        vb, nbm = _lp_array(cand.logprobs, m)
        real = np.ones(m, dtype=bool)
        ph = np.fromiter(base.placeholders | cand.placeholders, dtype=np.int64)
        real[ph[ph < m]] = False
        both_null = na & nbm
        one_null = na ^ nbm
        usable = real & ~both_null & ~one_null
        d = np.zeros(m, dtype=np.int64)
        d[usable] = ulp_distance(va[usable], vb[usable])
        d[real & one_null] = NULL_ULP
        lp_pos = int(real.sum())
        ids_only = upto - lp_pos
        nz = np.flatnonzero(d[real] != 0)
        ulp_nonzero = int(nz.size)
        max_ulp = int(d[real].max()) if lp_pos else None
        if usable.any():
            max_abs = float(np.abs(va[usable].astype(np.float32) - vb[usable].astype(np.float32)).max())
        if (real & one_null).any():
            max_abs = float("inf")
        if nz.size:
            first_ulp = int(np.flatnonzero(real)[nz[0]])
    else:
        ids_only = upto
        if upto:
            notes.append("no logprobs on one side: compared on ids only")
    base_tok = base.ids[first] if first is not None and first < nb else None
    cand_tok = cand.ids[first] if first is not None and first < nc else None
    gap = None
    if first is not None and base.top is not None and first < len(base.top):
        gap = top2_gap(base.top[first])
    return Comparison(nb, nc, first, base_tok, cand_tok, gap, base.finish_reason == cand.finish_reason,
                      upto, lp_pos, ids_only, max_ulp, ulp_nonzero, first_ulp, max_abs, tuple(notes))
