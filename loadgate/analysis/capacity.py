"""The summary's `search` section (docs/capacity.md): a capacity search's evidence, rebuilt from the run
folder alone. Its probes are the levels meta.json lists, in the order they ran; each is judged on the
profile's thresholds (as the prober judged it during the run) and every threshold's figure carries a
95 % confidence interval from that probe's samples (`loadgate.analysis.intervals`); then the bracket,
the answer and how the search ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgate.analysis import intervals
from loadgate.analysis.intervals import Interval
from loadgate.analysis.metrics import samples_of
from loadgate.analysis.search import Probe, bracket, lowest_fails, next_load
from loadgate.config.profile import Search
from loadgate.core import figures
from loadgate.core.thresholds import DISPLAY_UNIT, LevelFigures, Threshold, evaluate, parse_all
from loadgate.records import Record

# how a search ended (`SearchSection.ended`)
BELOW_HI = "answer below hi"  # bracketed: a failing probe above the answer
HI_PASSED = "hi passed"  # every probe up to hi passed: the answer is hi, no failing end
LOWEST_FAILED = "lowest failed"  # the first probe (lo) failed: no answer
STOPPED = "stopped"  # the run stopped (a signal, an abort) before the search had its answer


@dataclass(frozen=True)
class ThresholdEvidence:
    """One threshold on one probe: the figure it reads (`metric` and `statistic`: "p90", "mean",
    "rate", …; None for a single figure), the value observed, the limit, the result, and the
    figure's confidence interval."""

    metric: str
    threshold: str
    statistic: str | None
    unit: str | None
    observed: float | None
    limit: float | None
    passed: bool
    reason: str | None
    ci: Interval

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "threshold": self.threshold, "statistic": self.statistic, "unit": self.unit,
                "observed": self.observed, "limit": self.limit, "passed": self.passed, "reason": self.reason,
                "ci": self.ci.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ThresholdEvidence:
        return cls(d["metric"], d["threshold"], d["statistic"], d["unit"], d["observed"], d["limit"],
                   bool(d["passed"]), d["reason"], Interval.from_json(d["ci"]))


@dataclass(frozen=True)
class ProbeEvidence:
    """One probe: its level key, its load, whether every threshold passed, and each threshold's evidence."""

    level: str
    load: float
    passed: bool
    thresholds: list[ThresholdEvidence]

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "load": self.load, "passed": self.passed,
                "thresholds": [t.to_json() for t in self.thresholds]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbeEvidence:
        return cls(str(d["level"]), float(d["load"]), bool(d["passed"]),
                   [ThresholdEvidence.from_json(t) for t in d["thresholds"]])


@dataclass(frozen=True)
class SearchSection:
    """A capacity search's evidence: the knob, the probes in the order they ran, the bracket (last
    passing, first failing load; None where there is none), the answer and how the search ended."""

    over: str
    lo: float
    hi: float
    resolution: float
    probes: list[ProbeEvidence]
    passing: float | None
    failing: float | None
    answer: float | None
    ended: str

    def to_json(self) -> dict[str, Any]:
        return {"over": self.over, "lo": self.lo, "hi": self.hi, "resolution": self.resolution,
                "probes": [p.to_json() for p in self.probes],
                "bracket": {"passing": self.passing, "failing": self.failing}, "answer": self.answer,
                "ended": self.ended}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SearchSection:
        b = d["bracket"]
        return cls(d["over"], float(d["lo"]), float(d["hi"]), float(d["resolution"]),
                   [ProbeEvidence.from_json(p) for p in d["probes"]], b["passing"], b["failing"], d["answer"],
                   d["ended"])


def figure_interval(t: Threshold, summary: LevelFigures, records: list[Record]) -> Interval:
    """The 95 % interval of the figure `t` reads from one level (see `loadgate.analysis.intervals`)."""
    if t.metric == "errors":
        if t.aggregation == "count":
            return intervals.none("a count of this probe's requests: no interval")
        return intervals.proportion(summary.failed, summary.requests)
    if t.metric == "goodput":
        good = figures.read_path(summary, ("goodput", "good_requests"))
        return intervals.none("no goodput (the profile sets no slo)") if good is None else \
            intervals.proportion(int(good), summary.requests)
    base = figures.figure(t.metric.removesuffix(figures.ADJUSTED))
    if base.kind == "scalar":
        if base.unit in ("tok/s", "req/s"):
            return intervals.none("a throughput over the probe's window: one value, no sampling interval")
        return intervals.none(f"{t.metric} is one figure of the probe's totals: no sampling interval")
    name = t.metric
    if name not in summary.metrics and base.same_as:  # a reasoning figure in a level without reasoning
        name = base.same_as + name.removeprefix(base.name)
    stat = t.stat_key
    if stat in ("min", "max"):
        return intervals.none(f"the probe's {stat}: no sampling interval")
    samples = samples_of(records, name)
    if stat == "mean":
        return intervals.mean(samples)
    assert stat is not None and stat.startswith("p"), stat
    return intervals.quantile(samples, float(stat[1:]))


def _statistic(t: Threshold) -> str | None:
    return t.aggregation if t.aggregation in ("rate", "count") else t.stat_key


def probe_evidence(ts: Sequence[Threshold], summary: LevelFigures, records: list[Record]) -> list[ThresholdEvidence]:
    out = []
    for t in ts:
        o = evaluate(t, summary)
        ci = figure_interval(t, summary, records) if o.measured is not None else intervals.none(o.reason or "n/a")
        out.append(ThresholdEvidence(t.metric, t.text, _statistic(t), DISPLAY_UNIT[t.dimension] or None, o.measured,
                                     o.limit, o.passed, o.reason, ci))
    return out


def search_section(profile: dict[str, Any], levels: Mapping[str, LevelFigures],
                   records: Mapping[str, list[Record]]) -> SearchSection | None:
    """The section of a run whose profile (meta.json's) has `load.search`, from its level summaries and
    records, the levels in the order they ran; None for any other run."""
    d = (profile.get("load") or {}).get("search")
    if not d:
        return None
    search = Search(**d)
    ts = parse_all({k: list(v) for k, v in (profile.get("thresholds") or {}).items()})
    probes = []
    for lv, summary in levels.items():
        ev = probe_evidence(ts, summary, records.get(lv, []))
        probes.append(ProbeEvidence(lv, float(lv), all(e.passed for e in ev), ev))
    decided = [Probe(p.load, p.passed) for p in probes]
    b = bracket(decided)
    if next_load(search, decided) is not None:
        ended = STOPPED
    elif lowest_fails(search, decided):
        ended = LOWEST_FAILED
    else:
        ended = HI_PASSED if b.failing is None else BELOW_HI
    return SearchSection(search.over, search.lo, search.hi, search.resolution, probes, b.passing, b.failing,
                         b.passing, ended)
