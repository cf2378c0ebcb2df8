"""Thresholds with `abort_on_fail` judged on the requests a level has finished so far (the rules of
which may abort and on how many samples: `loadgate.core.aborting`; the process that feeds this as a
level runs: `loadgate.load.abort_watch`).

Each finished record adds its samples of the watched figures (the registry's own `samples`, so a
figure means here what it means in the summary); `SoFar.check` computes their statistics as the
summary does (`loadgate.analysis.metrics.stats`) and judges each threshold whose delay has passed and
whose sample rule is met with `loadgate.core.thresholds.evaluate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgate.analysis.metrics import stats
from loadgate.core import aborting, figures
from loadgate.core.thresholds import DISPLAY_UNIT, Outcome, Threshold, evaluate
from loadgate.records import Record


@dataclass(frozen=True)
class Watched:
    """One threshold with `abort_on_fail`: judged `delay_s` or more into the level."""

    threshold: Threshold
    delay_s: float = 0.0


@dataclass(frozen=True)
class Trip:
    """A watched threshold that failed `after_s` into the level, on `requests` finished requests
    (`samples` of its figure)."""

    outcome: Outcome
    after_s: float
    requests: int
    samples: int

    @property
    def words(self) -> str:
        t, o = self.outcome.threshold, self.outcome
        return (f'threshold {t.metric} "{t.text}" (abort_on_fail) failed {self.after_s:.1f} s into the level on the '
                f"{self.requests:,} requests finished so far: {_shown(t, o.measured)} against {_shown(t, o.limit)}")

    def to_json(self) -> dict[str, Any]:
        """abort.json's fields beside its `trigger` (+inf stays a float: `jsonutil` writes "inf")."""
        t = self.outcome.threshold
        return {"threshold": t.text, "metric": t.metric, "measured": self.outcome.measured,
                "limit": self.outcome.limit, "after_s": self.after_s, "requests": self.requests,
                "samples": self.samples}


def _shown(t: Threshold, v: float | None) -> str:
    if v is None:
        return "n/a"
    if t.dimension == "ratio":
        return f"{v:.2%}"
    unit = DISPLAY_UNIT[t.dimension]
    return f"{v:,.6g}" + (f" {unit}" if unit and not math.isinf(v) else "")


@dataclass
class _Figures:
    """What `evaluate` reads of a level (`loadgate.core.thresholds.LevelFigures`), so far."""

    requests: int
    failed: int
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)


class SoFar:
    """The watched figures of one level's finished requests. `stream`: the level streams (an
    unstreamed one has no chunk figures, as in its summary)."""

    def __init__(self, watched: Sequence[Watched], stream: bool = True) -> None:
        self.watched = list(watched)
        self.stream = stream
        self.requests = self.failed = 0
        self.reasoned = False  # a successful request streamed reasoning (else ttfa reads ttft, as in the summary)
        names = set()
        for w in self.watched:
            if w.threshold.metric != "errors":
                f = figures.figure(w.threshold.metric.removesuffix(figures.ADJUSTED))
                names |= {f.name} | ({f.same_as} if f.same_as else set())
        self.samples: dict[str, list[float]] = {n: [] for n in sorted(names)}
        self.done: set[int] = set()  # watched thresholds that were judged failing (each trips once)

    def add(self, r: Record) -> None:
        self.requests += 1
        if not r.succeeded:
            self.failed += 1
            return
        self.reasoned = self.reasoned or bool(r.reasoning_tokens)
        for name, xs in self.samples.items():
            fn = figures.figure(name).samples
            assert fn is not None
            xs.extend(fn(r))

    def _read(self, metric: str) -> str | None:
        """The summary name `metric` reads here (None: the level has no such figure)."""
        base = metric.removesuffix(figures.ADJUSTED)
        f = figures.figure(base)
        if f.streamed and not self.stream:
            return None
        if f.reasoning and not self.reasoned:
            return f.same_as + metric[len(base):] if f.same_as else None
        return metric

    def check(self, after_s: float) -> Trip | None:
        """The first watched threshold that fails now, `after_s` into the level (None: none does)."""
        figs = _Figures(self.requests, self.failed)
        for k, w in enumerate(self.watched):
            t = w.threshold
            if after_s < w.delay_s or k in self.done:
                continue
            if t.metric == "errors":
                n = self.requests
            else:
                name = self._read(t.metric)
                if name is None:
                    continue
                base = name.removesuffix(figures.ADJUSTED)
                xs = self.samples[base]
                adjusted = name != base
                n = len(xs) + (self.failed if adjusted else 0)
                if n >= aborting.samples_needed(t) and name not in figs.metrics:
                    figs.metrics[name] = stats(xs + [math.inf] * self.failed if adjusted else xs)
            if n < aborting.samples_needed(t):
                continue
            o = evaluate(t, figs)
            if not o.passed and (o.reason is None or not o.reason.startswith("n/a")):
                self.done.add(k)
                return Trip(o, after_s, self.requests, n)
        return None
