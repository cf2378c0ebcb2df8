"""The capacity line of an A/B of searches (docs/capacity.md): each run of the A/B is a whole search of
its side, and pair i compares the candidate's search (B i) with the baseline's (A i).

- **ratio** = the candidate's answer / the baseline's answer (each the last passing load);
- **interval**, from the two brackets: low = the candidate's last passing load / the baseline's first
  failing one, high = the candidate's first failing load / the baseline's last passing one. The two
  capacities lie within their brackets, so their ratio lies within these ends. An end whose load does
  not exist is None, never invented: a side whose `hi` passed has no failing end (the candidate's: no
  high, "at least"; the baseline's: no low, "at most"), a side whose lowest probe failed has no
  passing end (the candidate's: no low; the baseline's: no high, and no ratio).
- **several pairs**: the median of the pairs' ratios (those that have one), and the widest interval:
  the lowest of the pairs' lows and the highest of their highs (one pair without an end leaves the
  combined interval without it).
- **decision**, with `practical` the A/B's practical change (`ab.practical`, the band every A/B
  figure is decided on): `regressed` when the whole interval lies below 1 - practical (its high
  exists and is below); `improved` when it lies above 1 + practical; `no change` when it lies within
  1 ± practical; `no regression` when it lies at or above 1 - practical but reaches beyond 1 +
  practical (or has no high); `inconclusive` when it straddles 1 - practical, or has neither end.
  The verdict maps them as every A/B decision: regressed exits 21, inconclusive 22, the rest 0.

comparison.json holds this as `capacity` (`CapacityLine.to_json`): `over`, `practical`, `pairs` (per
pair: `pair`, `baseline` and `candidate`, each with its run folder's name, `answer`, `passing`,
`failing`, `ended`; and the pair's `ratio`, `low`, `high`), the combined `ratio`, `low`, `high`,
`decision` and `rule` (how the pairs were combined, in words); absent for an A/B without a search.
`loadgate report --format json` on the folder carries the same `capacity`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadgate.analysis.capacity import SearchSection

COMBINE_RULE = ("the median of the pairs' ratios; the widest interval: the lowest of the pairs' lows and "
                "the highest of their highs")


@dataclass(frozen=True)
class Side:
    """One side's search in one pair: its run folder's name and its bracket."""

    run: str
    answer: float | None
    passing: float | None
    failing: float | None
    ended: str

    @classmethod
    def of(cls, run: str, s: SearchSection) -> Side:
        return cls(run, s.answer, s.passing, s.failing, s.ended)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "answer": self.answer, "passing": self.passing, "failing": self.failing,
                "ended": self.ended}


def _div(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None or y == 0 else x / y


@dataclass(frozen=True)
class PairCapacity:
    """One pair's ratio of answers and its interval from the two brackets (None: that end does not exist)."""

    pair: int
    baseline: Side
    candidate: Side

    @property
    def ratio(self) -> float | None:
        return _div(self.candidate.answer, self.baseline.answer)

    @property
    def low(self) -> float | None:
        return _div(self.candidate.passing, self.baseline.failing)

    @property
    def high(self) -> float | None:
        return _div(self.candidate.failing, self.baseline.passing)

    def to_json(self) -> dict[str, Any]:
        return {"pair": self.pair, "baseline": self.baseline.to_json(), "candidate": self.candidate.to_json(),
                "ratio": self.ratio, "low": self.low, "high": self.high}


def decide(low: float | None, high: float | None, practical: float) -> str:
    """The capacity line's decision (the module docstring's rule)."""
    floor, ceiling = 1 - practical, 1 + practical
    if high is not None and high < floor:
        return "regressed"
    if low is None or low < floor:
        return "inconclusive"
    if low > ceiling:
        return "improved"
    return "no change" if high is not None and high <= ceiling else "no regression"


@dataclass(frozen=True)
class CapacityLine:
    """The A/B of searches: the knob's `over`, each pair's capacity, and their combination."""

    over: str
    practical: float
    pairs: list[PairCapacity]

    @property
    def ratio(self) -> float | None:
        ratios = [r for p in self.pairs if (r := p.ratio) is not None]
        return float(statistics.median(ratios)) if ratios else None

    @property
    def low(self) -> float | None:
        lows = [p.low for p in self.pairs]
        return None if not lows or any(x is None for x in lows) else min(x for x in lows if x is not None)

    @property
    def high(self) -> float | None:
        highs = [p.high for p in self.pairs]
        return None if not highs or any(x is None for x in highs) else max(x for x in highs if x is not None)

    @property
    def decision(self) -> str:
        return decide(self.low, self.high, self.practical)

    def to_json(self) -> dict[str, Any]:
        return {"over": self.over, "practical": self.practical, "pairs": [p.to_json() for p in self.pairs],
                "ratio": self.ratio, "low": self.low, "high": self.high, "decision": self.decision,
                "rule": COMBINE_RULE}


def capacity_line(baseline: Sequence[tuple[str, SearchSection]], candidate: Sequence[tuple[str, SearchSection]],
                  practical: float) -> CapacityLine | None:
    """The line from each side's runs in pair order ((run name, search section), A1… and B1…); pair i
    is the i-th run of each side. None when either side has no search."""
    if not baseline or not candidate:
        return None
    pairs = [PairCapacity(i, Side.of(na, a), Side.of(nb, b))
             for i, ((na, a), (nb, b)) in enumerate(zip(baseline, candidate, strict=False), 1)]
    return CapacityLine(candidate[0][1].over, practical, pairs)


def _x(v: float) -> str:
    return f"{v:.2f}×"


def interval_words(ratio: float | None, low: float | None, high: float | None) -> str:
    """A ratio with its interval, an end that does not exist said in words: "1.40× (1.30–1.50)",
    "1.40×, at least 1.30× (no upper end)", "at most 0.80× (no lower end)", "?× (no bound on either end)"."""
    head = "" if ratio is None else _x(ratio)
    if low is not None and high is not None:
        return f"{head} ({low:.2f}–{high:.2f})".strip()
    if low is None and high is None:
        return f"{head or '?×'} (no bound on either end)"
    bound = f"at least {_x(low)} (no upper end)" if low is not None else \
        f"at most {_x(high)} (no lower end)" if high is not None else ""
    return f"{head}, {bound}" if head else bound
