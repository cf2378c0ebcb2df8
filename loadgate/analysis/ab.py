"""A/B run folders, read back: which runs each side made, the run-level comparisons, the verdict of
the comparison, and each side's median run (for thresholds). Pure functions of saved files; the
runs themselves are made by `loadgate.runs`.

Layout of an A/B run folder:
  ab.json                the settings, the order the runs were made in, and which folder is which
  check-baseline/        the baseline engine's exactness check (report, bundles, attestation)
  check-candidate/       the candidate's
  A1 … An, B1 … Bn       one ordinary run folder per run (A: baseline, B: candidate)
  comparison.json        run-level statistics, decisions, verdict, thresholds; `capacity`, the
                         capacity line of an A/B of searches (`loadgate.analysis.abcapacity`; absent
                         otherwise), whose per-level statistics cover only the loads every run of
                         both sides probed (`shared_levels`)
Runs go in pairs; within each pair the order is drawn from `ab.order_seed`, so slow drift of the
machine or the engines hits both sides alike. Every run sends the same seeded request list.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from loadgate.analysis.abcapacity import CapacityLine, capacity_line
from loadgate.analysis.abstats import FigureComparison, compare_summaries, overall, worst
from loadgate.analysis.capacity import SearchSection
from loadgate.analysis.summary import GROUP_FIELDS, LevelSummary, Summary, build_summary
from loadgate.jsonutil import load_json

SIDES = {"A": "baseline", "B": "candidate"}


def load_ab(run_dir: Path) -> dict[str, Any]:
    ab = load_json(run_dir / "ab.json")
    runs: dict[str, list[Path]] = {"A": [], "B": []}
    for name in ab["order"]:
        if (run_dir / name / "records.jsonl").exists():
            runs[name[0]].append(run_dir / name)
    return {"ab": ab, "runs": runs}


GROUP_SEP = " · "
# A group's throughput is its share of the level's window, which the other groups' requests set
# too: shown, never compared (a group that did not change would read as regressed beside one that did).
WINDOW_FIGURES = ("output_throughput", "request_throughput")


def group_key(level: str, field: str, value: str) -> str:
    """The comparisons' key of one group of a level, e.g. '8 · category code'."""
    return f"{level}{GROUP_SEP}{field} {value}"


def is_group(key: str) -> bool:
    return GROUP_SEP in key


def group_of(s: LevelSummary, field: str, value: str) -> dict[str, Any] | None:
    """One group's figures in a level summary (shaped like a level summary where A/B reads it)."""
    g = (s.groups or {}).get(field)
    return None if g is None else g["by"].get(value)


def group_values(a: list[LevelSummary], b: list[LevelSummary], field: str) -> list[str]:
    """The values of `field` both sides have groups for."""
    def seen(side: list[LevelSummary]) -> set[str]:
        return {v for s in side for v in ((s.groups or {}).get(field) or {}).get("by", {})}
    return sorted(seen(a) & seen(b))


def comparisons(run_dir: Path) -> tuple[dict[str, dict[str, FigureComparison]], dict[str, Any]]:
    """Per load level: every figure compared across runs; then per group of the level (`GROUP_FIELDS`,
    key `group_key`), at alpha divided again by the number of groups (Bonferroni across the groups
    too, so a dataset of many categories raises no more false alarms than one); plus the A/B settings."""
    info = load_ab(run_dir)
    ab = info["ab"]["ab"]
    summaries = {s: [build_summary(d) for d in info["runs"][s]] for s in SIDES}
    levels = list(summaries["B"][0].levels) if summaries["B"] else []
    if any(s.search is not None for side in summaries.values() for s in side):
        levels = shared_levels(summaries)
    out = {}
    for lv in levels:
        a = [s.levels[lv] for s in summaries["A"] if lv in s.levels]
        b = [s.levels[lv] for s in summaries["B"] if lv in s.levels]
        # Bonferroni: the verdict reads several figures, so each is tested at alpha / their number
        alpha = ab["alpha"] / max(1, len(ab["decide_on"]))
        out[lv] = compare_summaries(a, b, alpha=alpha, practical=ab["practical"], practical_ms=ab["practical_ms"],
                                    confidence=ab["confidence"])
        for field in GROUP_FIELDS:
            values = group_values(a, b, field)
            for v in values:
                ga = [g for s in a if (g := group_of(s, field, v)) is not None]
                gb = [g for s in b if (g := group_of(s, field, v)) is not None]
                comps = compare_summaries(ga, gb, alpha=alpha / len(values), practical=ab["practical"],
                                          practical_ms=ab["practical_ms"], confidence=ab["confidence"])
                out[group_key(lv, field, v)] = {k: c for k, c in comps.items() if k not in WINDOW_FIGURES}
    return out, ab


def shared_levels(summaries: dict[str, list[Summary]]) -> list[str]:
    """The levels every run of both sides ran, in the order of the candidate's first run: an A/B of
    searches compares per level only the loads every search probed (each side's search picks its own
    loads after its first failure; a level some runs lack would compare unequal numbers of runs)."""
    runs = [s for side in summaries.values() for s in side]
    if not runs or not summaries["B"]:
        return []
    return [lv for lv in summaries["B"][0].levels if all(lv in s.levels for s in runs)]


def capacity(info: dict[str, Any], summaries: dict[str, list[Summary]]) -> CapacityLine | None:
    """The capacity line of an A/B of searches (`loadgate.analysis.abcapacity`) from `load_ab`'s
    info and each side's run summaries in its order, pair i being runs A i and B i (both finished);
    None when its runs are not searches."""
    sections: dict[str, dict[str, tuple[str, SearchSection]]] = {"A": {}, "B": {}}
    for side in SIDES:
        for d, s in zip(info["runs"][side], summaries[side], strict=True):
            if s.search is not None:
                sections[side][d.name[1:]] = (d.name, s.search)
    pairs = sorted((k for k in sections["B"] if k in sections["A"]), key=int)
    return capacity_line([sections["A"][k] for k in pairs], [sections["B"][k] for k in pairs],
                         float(info["ab"]["ab"]["practical"]))


def group_power(comps: dict[str, dict[str, FigureComparison]], settings: dict[str, Any], n_a: int,
                n_b: int) -> str | None:
    """Where groups were compared but no group could be called regressed with these runs: the
    smallest p-value the rank test gives `n_a` against `n_b` runs (complete separation) is not below
    the groups' alpha. Says how many pairs would do; None when they can (or there are no groups)."""
    from math import comb

    levels = {k.split(GROUP_SEP)[0] for k in comps if is_group(k)}
    if not levels or min(n_a, n_b) < 2:
        return None
    most = max(sum(1 for k in comps if is_group(k) and k.split(GROUP_SEP)[0] == lv) for lv in levels)
    alpha = settings["alpha"] / max(1, len(settings["decide_on"])) / most
    smallest = 2 / comb(n_a + n_b, n_a)
    if smallest < alpha:
        return None
    pairs = next((n for n in range(2, 1000) if 2 / comb(2 * n, n) < alpha), 1000)
    return (f"by group: no group can be called regressed with {n_a} and {n_b} runs: each is tested at alpha "
            f"{alpha:.2g} ({settings['alpha']} over {len(settings['decide_on'])} deciding figures and {most} groups), "
            f"and the smallest p-value of these runs is {smallest:.2g}; ab.pairs: {pairs} can")


def regressed_in(comps: dict[str, dict[str, FigureComparison]], decide_on: list[str]) -> list[str]:
    """The levels and groups (their keys) whose deciding figures say the candidate regressed."""
    return [k for k, c in comps.items() if overall(c, decide_on) == "regressed"]


def verdict(comps: dict[str, dict[str, FigureComparison]], decide_on: list[str]) -> str:
    """The worst decision over the levels; a group decides only when it regressed (a regression in
    one group is one, whatever the level says; a group's own uncertainty leaves the level's word)."""
    d = worst([overall(c, decide_on) for k, c in comps.items() if not is_group(k)])
    if d != "regressed" and any(is_group(k) for k in regressed_in(comps, decide_on)):
        return "regressed"
    return d


def _median(values: list[Any]) -> Any:
    if values and all(isinstance(v, dict) for v in values):
        return {k: _median([v.get(k) for v in values]) for k in values[0]}
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if nums and len(nums) == len([v for v in values if v is not None]):
        return float(statistics.median(nums))
    return values[0] if values else None


def median_run(run_dirs: list[Path]) -> dict[str, LevelSummary]:
    """Per level, a summary whose every figure is the median over the side's runs (thresholds are
    judged on the typical run, not on requests pooled across runs)."""
    levels: dict[str, list[dict[str, Any]]] = {}
    for d in run_dirs:
        for lv, s in build_summary(d).levels.items():
            levels.setdefault(lv, []).append(s.to_json())
    return {lv: LevelSummary.from_json(_median(ss)) for lv, ss in levels.items()}
