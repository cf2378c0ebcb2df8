"""The SLO capacity search's decisions, a pure function of the probes run so far (docs/capacity.md).

Bracketing, then bisection: the first probe is at `lo`; while every probe passed, the next one is at
twice the highest (capped at `hi`); after the first failure, the next probe is halfway between the
last passing load and the first failing one, until (first failing - last passing) / last passing is
at most `resolution`. Over concurrency the loads are whole numbers, so bisection also stops when the
two are adjacent. The answer is the last passing load; the bracket is (last passing, first failing).

Over rate every probe's load (lo and hi included) is rounded to `SIGNIFICANT` significant digits, so that
a level key reads "75.0", not "75.00000000000001"; bisection also stops when the rounded halfway load is
one of the two ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgate.config.profile import Search

SIGNIFICANT = 4
"""Significant digits of a probe's load over rate (docs/capacity.md)."""


def probe_load(search: Search, x: float) -> float:
    """`x` as a probe's load: a whole number over concurrency (rounded down), `SIGNIFICANT`
    significant digits over rate."""
    if search.over == "concurrency":
        return float(math.floor(x))
    return float(f"{x:.{SIGNIFICANT}g}")


@dataclass(frozen=True)
class Probe:
    """One probe's load and whether every threshold passed on it."""

    load: float
    passed: bool


@dataclass(frozen=True)
class Bracket:
    """Where the search stands: the last passing load (None: none passed yet) and the first failing
    load above it (None: none failed yet)."""

    passing: float | None
    failing: float | None

    @property
    def width(self) -> float | None:
        """(failing - passing) / passing, None while either end is missing."""
        if self.passing is None or self.failing is None:
            return None
        return (self.failing - self.passing) / self.passing


def bracket(probes: Sequence[Probe]) -> Bracket:
    """The lowest failing load and the highest passing load below it."""
    failing = min((p.load for p in probes if not p.passed), default=None)
    passing = max((p.load for p in probes if p.passed and (failing is None or p.load < failing)), default=None)
    return Bracket(passing, failing)


def lowest_fails(search: Search, probes: Sequence[Probe]) -> bool:
    """The first probe (at `lo`) failed: the engine does not meet the thresholds at any load probed."""
    return bool(probes) and probes[0].load == probe_load(search, search.lo) and not probes[0].passed


def next_load(search: Search, probes: Sequence[Probe]) -> float | None:
    """The next probe's load, or None when the search is over."""
    if not probes:
        return probe_load(search, search.lo)
    if lowest_fails(search, probes):
        return None
    b = bracket(probes)
    assert b.passing is not None  # the first probe passed
    top = probe_load(search, search.hi)
    if b.failing is None:
        if b.passing >= top:
            return None  # every load up to hi passes: the answer is hi, unbracketed
        return min(probe_load(search, 2 * b.passing), top)
    width = b.width
    assert width is not None
    if width <= search.resolution:
        return None
    mid = probe_load(search, (b.passing + b.failing) / 2)
    if not b.passing < mid < b.failing:
        return None  # adjacent loads: whole numbers, or rate loads at the rounding
    return mid


def answer(probes: Sequence[Probe]) -> float | None:
    """The search's answer: the last passing load (None when none passed)."""
    return bracket(probes).passing


def judged_levels(passed: Mapping[str, bool]) -> list[str]:
    """Of a search's probes (level key -> every threshold passed, in the order they ran), the level
    its verdict judges: the answer's, or the first probe's when it failed (or none passed)."""
    probes = [Probe(float(lv), ok) for lv, ok in passed.items()]
    best = answer(probes)
    keys = list(passed)
    if best is None:
        return keys[:1]
    return [next(lv for lv in keys if float(lv) == best)]


def deciding_levels(passed: Mapping[str, bool]) -> list[str]:
    """Of a search's probes (level key -> every threshold passed, in the order they ran), those its
    answer rests on: the bracket's two ends (the last passing load and the first failing one above
    it), or the first probe alone when it failed. A probe elsewhere (a failure above the first
    failing load, a pass below the last passing one) moves neither end, so its validity does not
    decide the run's."""
    probes = [Probe(float(lv), ok) for lv, ok in passed.items()]
    keys = list(passed)
    if lowest_fails_any(probes):
        return keys[:1]
    b = bracket(probes)
    return [lv for lv in keys if float(lv) in (b.passing, b.failing)]


def lowest_fails_any(probes: Sequence[Probe]) -> bool:
    """The first probe failed (the search ends there)."""
    return bool(probes) and not probes[0].passed
