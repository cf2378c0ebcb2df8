"""A capacity search for people (the summary's `search`, docs/capacity.md): the answer line, then one
row per probe in the order they ran (its load, its verdict, and each threshold's figure with its 95 %
confidence interval, the threshold and its limit in the column's head). The console prints it in
place of `table.capacity_table`'s pick of the best listed level; the HTML report renders the same
cells as a table beside the plot (`loadgate.report.search_plot`). An A/B of searches gets the capacity
line instead (`ab_capacity_text`): per pair and combined, the ratio of the answers with its interval."""

from __future__ import annotations

from tabulate import tabulate

from loadgate.analysis.abcapacity import COMBINE_RULE, CapacityLine, PairCapacity, Side, interval_words
from loadgate.analysis.capacity import (
    BELOW_HI,
    HI_PASSED,
    LOWEST_FAILED,
    STOPPED,
    ProbeEvidence,
    SearchSection,
    ThresholdEvidence,
)
from loadgate.analysis.intervals import CONFIDENCE
from loadgate.report.thresholds import format_figure


def load_words(section: SearchSection, load: float | None) -> str:
    """A probe's load with its unit: "12" (concurrency), "87.5 req/s" (rate)."""
    if load is None:
        return "n/a"
    return f"{load:g} req/s" if section.over == "rate" else f"{load:g}"


def _dimension(e: ThresholdEvidence) -> str:
    """The threshold's dimension (`loadgate.core.thresholds`) from the unit the evidence states."""
    units = {"ms": "time", "tok/s": "tok/s", "req/s": "req/s", "tokens": "tokens"}
    return units.get(e.unit or "", "count" if e.statistic == "count" else "ratio")


def figure_words(v: float | None, dimension: str, unit: bool = True) -> str:
    """A figure to 4 significant digits (ratios in percent), with its unit unless asked not to;
    None (an interval's end the samples cannot bound) is "unbounded"."""
    return "unbounded" if v is None else format_figure(v, dimension, 4, unit=unit)


def cell(e: ThresholdEvidence) -> str:
    """One threshold on one probe: "11.99 ms (9.991–84.14)", the interval omitted where there is none."""
    dim = _dimension(e)
    value = "n/a" if e.observed is None else figure_words(e.observed, dim)
    ci = e.ci
    if ci.low is None and ci.high is None:
        return value
    return f"{value} ({figure_words(ci.low, dim, False)}–{figure_words(ci.high, dim, False)})"


def heads(section: SearchSection) -> list[str]:
    """The column heads: each threshold as written (its limit), from the first probe."""
    first = section.probes[0].thresholds if section.probes else []
    return [f"{e.metric} {e.threshold.strip()}" for e in first]


def verdict_word(section: SearchSection, p: ProbeEvidence) -> str:
    word = "pass" if p.passed else "FAIL"
    answer = section.answer is not None and p.load == section.answer and section.ended != STOPPED
    return word + (" (answer)" if answer else "")


def rows(section: SearchSection) -> list[list[str]]:
    """One row per probe: its number, load, verdict, and each threshold's cell."""
    return [[str(k), load_words(section, p.load), verdict_word(section, p), *(cell(e) for e in p.thresholds)]
            for k, p in enumerate(section.probes, 1)]


def answer_line(section: SearchSection) -> str:
    """The search's answer in words, with its uncertainty (the bracket) or why there is none."""
    over, res = section.over, f"resolution {section.resolution * 100:g} %"
    if section.ended == BELOW_HI:
        return (f"highest {over} within the thresholds: {load_words(section, section.answer)} (bracket "
                f"{section.passing:g}–{load_words(section, section.failing)}, {res})")
    if section.ended == HI_PASSED:
        return (f"highest {over} within the thresholds: {load_words(section, section.answer)}, the search's hi: "
                f"every probe passed, so there is no failing end (raise load.search.hi to look further)")
    if section.ended == LOWEST_FAILED:
        p = section.probes[0]
        failed = "; ".join(f"{e.metric} {e.threshold.strip()}" for e in p.thresholds if not e.passed)
        return f"no {over} within the thresholds: the lowest probe, {load_words(section, p.load)}, failed {failed}"
    failing = "none failing yet" if section.failing is None else \
        f"lowest failing {load_words(section, section.failing)}"
    return (f"the search stopped before its answer (the run was interrupted or aborted): highest passing {over} so "
            f"far {load_words(section, section.passing)}, {failing}")


def interval_note(section: SearchSection) -> str:
    """How the intervals were made, and which figures have none (and why), once."""
    missing: dict[str, str] = {}
    for p in section.probes:
        for e in p.thresholds:
            if e.ci.low is None and e.ci.high is None and e.ci.reason and e.observed is not None:
                missing.setdefault(e.metric, e.ci.reason)
    note = (f"in brackets: {CONFIDENCE:.0%} confidence intervals from each probe's samples (quantiles: order "
            "statistics; means: t-interval; error rate and goodput: Clopper-Pearson)")
    if missing:
        note += "; none for " + "; ".join(f"{m} ({why})" for m, why in missing.items())
    return note


def search_text(section: SearchSection) -> str:
    """The console's capacity section of a search run."""
    table = tabulate(rows(section), headers=["probe", section.over, "verdict", *heads(section)], tablefmt="simple",
                     disable_numparse=True)
    return f"capacity (search over {section.over}):\n{answer_line(section)}\n{table}\n{interval_note(section)}"


def _load(over: str, load: float | None) -> str:
    return "n/a" if load is None else f"{load:g} req/s" if over == "rate" else f"{load:g}"


def side_words(over: str, name: str, s: Side) -> str:
    """One side's search in a pair: "baseline 48 req/s, bracket 48–52 req/s", or why an end is missing."""
    if s.ended == HI_PASSED:
        return f"{name} {_load(over, s.answer)}, its hi, which passed: no failing end"
    if s.ended == LOWEST_FAILED:
        return f"{name} none: its lowest probe, {_load(over, s.failing)}, failed"
    if s.ended == STOPPED:
        return f"{name} stopped before its answer (highest passing so far {_load(over, s.passing)})"
    return f"{name} {_load(over, s.answer)}, bracket {s.passing:g}–{_load(over, s.failing)}"


def pair_words(over: str, p: PairCapacity) -> str:
    """e.g. "candidate serves 1.40× (1.30–1.50) the rate within the thresholds (baseline …; candidate …)"."""
    return (f"candidate serves {interval_words(p.ratio, p.low, p.high)} the {over} within the thresholds "
            f"({side_words(over, 'baseline', p.baseline)}; {side_words(over, 'candidate', p.candidate)})")


def ab_capacity_text(line: CapacityLine) -> str:
    """The capacity section of an A/B of searches: each pair's line, then the combined line and its decision."""
    rows = [f"pair {p.pair} ({p.baseline.run}, {p.candidate.run}): {pair_words(line.over, p)}" for p in line.pairs]
    floor = 1 - line.practical
    combined = (f"over {len(line.pairs)} pairs: candidate serves {interval_words(line.ratio, line.low, line.high)} "
                f"the {line.over} within the thresholds ({COMBINE_RULE})")
    decision = (f"capacity decision: {line.decision} (regressed when the whole interval lies below {floor:g}, "
                f"1 - ab.practical; inconclusive when it straddles {floor:g})")
    return "\n".join([f"capacity (A/B of searches over {line.over}):", *rows, combined, decision])
