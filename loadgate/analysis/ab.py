"""A/B in one profile: both engines up at once, exactness established for each, then interleaved runs.

Layout of an A/B run folder:
  ab.json                the settings, the order the runs were made in, and which folder is which
  check-baseline/        the baseline engine's exactness check (report, bundles, attestation)
  check-candidate/       the candidate's
  A1 … An, B1 … Bn       one ordinary run folder per run (A: baseline, B: candidate)
  comparison.json        run-level statistics, decisions, verdict, thresholds
Runs go in pairs; within each pair the order is drawn from `ab.order_seed`, so slow drift of the
machine or the engines hits both sides alike. Every run sends the same seeded request list.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from pathlib import Path
from typing import Any

from loadgate.analysis.abstats import FigureComparison, compare_summaries, overall, worst
from loadgate.analysis.summary import build_summary
from loadgate.config.profile import Profile
from loadgate.jsonutil import dump_json, load_json

SIDES = {"A": "baseline", "B": "candidate"}


def side_profile(profile: Profile, side: str) -> Profile:
    assert profile.ab is not None
    target = profile.ab.baseline if side == "A" else profile.target
    return dataclasses.replace(profile, target=target)


def run_order(pairs: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    order: list[str] = []
    for i in range(1, pairs + 1):
        pair = [f"A{i}", f"B{i}"]
        rng.shuffle(pair)
        order += pair
    return order


async def run_ab(profile: Profile, run_dir: Path, progress: bool, unverified: bool) -> None:
    """Check both engines, then make the interleaved runs; writes ab.json and the run folders."""
    from loadgate.gate import policy as gate
    from loadgate.runner import perform, prepare_tokens

    assert profile.ab is not None
    sides = {s: side_profile(profile, s) for s in SIDES}
    order = run_order(profile.ab.pairs, profile.ab.order_seed)
    dump_json(run_dir / "ab.json", {"pairs": profile.ab.pairs, "order": order, "sides": SIDES,
                                    "unverified": unverified, "ab": dataclasses.asdict(profile.ab)})
    async with gate.open_engine(sides["A"]) as ea, gate.open_engine(sides["B"]) as eb:
        engines = {"A": ea, "B": eb}
        tokens = {s: await prepare_tokens(sides[s], e.session, e.base, e.model) for s, e in engines.items()}
        atts: dict[str, Any] = {}
        if not unverified:
            for s, e in engines.items():
                d = run_dir / f"check-{SIDES[s]}"
                d.mkdir()
                print(f"\n== {SIDES[s]} ({e.base})")
                outcome = await gate.check_engine(e, d)
                gate.print_check(outcome)
                gate.raise_if_failed(outcome)
                atts[s] = outcome.attestation
                await gate.verify_fingerprint(e, outcome.attestation or {}, "between the check and the measurement")
        print(f"\nruns, in this order: {' '.join(order)} (A = baseline, B = candidate)")
        for name in order:
            s = name[0]
            d = run_dir / name
            d.mkdir()
            e = engines[s]
            att = atts.get(s)
            await perform(sides[s], e.base, e.session, e.model, d, progress,
                          extra_meta={"unverified": unverified, "ab_side": SIDES[s],
                                      "attestation": gate.attestation_meta(att)}, tokens=tokens[s])
            dump_json(d / "summary.json", build_summary(d))
        for s, e in engines.items():
            if s in atts:
                await gate.verify_fingerprint(e, atts[s], "during the measurements")


def load_ab(run_dir: Path) -> dict[str, Any]:
    ab = load_json(run_dir / "ab.json")
    runs: dict[str, list[Path]] = {"A": [], "B": []}
    for name in ab["order"]:
        if (run_dir / name / "records.jsonl").exists():
            runs[name[0]].append(run_dir / name)
    return {"ab": ab, "runs": runs}


def comparisons(run_dir: Path) -> tuple[dict[str, dict[str, FigureComparison]], dict[str, Any]]:
    """Per load level: every figure compared across runs; plus the A/B settings."""
    info = load_ab(run_dir)
    ab = info["ab"]["ab"]
    summaries = {s: [build_summary(d) for d in info["runs"][s]] for s in SIDES}
    levels = list(summaries["B"][0]["levels"]) if summaries["B"] else []
    out = {}
    for lv in levels:
        a = [s["levels"][lv] for s in summaries["A"] if lv in s["levels"]]
        b = [s["levels"][lv] for s in summaries["B"] if lv in s["levels"]]
        # Bonferroni: the verdict reads several figures, so each is tested at alpha / their number
        alpha = ab["alpha"] / max(1, len(ab["decide_on"]))
        out[lv] = compare_summaries(a, b, alpha=alpha, practical=ab["practical"], practical_ms=ab["practical_ms"],
                                    confidence=ab["confidence"])
    return out, ab


def verdict(comps: dict[str, dict[str, FigureComparison]], decide_on: list[str]) -> str:
    return worst([overall(c, decide_on) for c in comps.values()])


def _median(values: list[Any]) -> Any:
    if values and all(isinstance(v, dict) for v in values):
        return {k: _median([v.get(k) for v in values]) for k in values[0]}
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if nums and len(nums) == len([v for v in values if v is not None]):
        return float(statistics.median(nums))
    return values[0] if values else None


def median_run(run_dirs: list[Path]) -> dict[str, dict[str, Any]]:
    """Per level, a summary whose every figure is the median over the side's runs (thresholds are
    judged on the typical run, not on requests pooled across runs)."""
    levels: dict[str, list[dict[str, Any]]] = {}
    for d in run_dirs:
        for lv, s in build_summary(d)["levels"].items():
            levels.setdefault(lv, []).append(s)
    return {lv: _median(ss) for lv, ss in levels.items()}
