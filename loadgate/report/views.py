"""What `loadgate report` and `loadgate compare` print, from saved run folders only."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson

from loadgate.analysis.abstats import FIGURES, FigureComparison, compare_figure, figure, request_level
from loadgate.analysis.summary import build_summary
from loadgate.errors import UsageError
from loadgate.jsonutil import clean
from loadgate.records import read_records
from loadgate.report import compare_table as ct
from loadgate.report.table import render_summary, summary_csv, summary_markdown


def is_ab(path: Path) -> bool:
    return (path / "ab.json").exists()


def _require_run(path: Path) -> None:
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    if not is_ab(path) and not ((path / "records.jsonl").exists() and (path / "meta.json").exists()):
        raise UsageError(f"{path}: not a loadgate run folder (records.jsonl and meta.json expected)")


def _render_comps(comps: dict[str, FigureComparison], fmt: str, n_a: int, n_b: int, title: str) -> str:
    if fmt == "json":
        return orjson.dumps(ct.to_json(comps), option=orjson.OPT_INDENT_2).decode()
    if fmt == "csv":
        return ct.as_csv(comps)
    if fmt == "markdown":
        return ct.as_markdown(comps, n_a, n_b)
    words = [f"  {c.words()}" for c in comps.values() if c.ratio is not None]
    return f"{title}\n{ct.as_table(comps, n_a, n_b)}\n" + "\n".join(words)


def render_ab(run_dir: Path, fmt: str) -> str:
    from loadgate.analysis import ab

    comps, settings = ab.comparisons(run_dir)
    info = read_ab(run_dir)
    verdict = ab.verdict(comps, list(settings["decide_on"]))
    n_a, n_b = len(info["runs"]["A"]), len(info["runs"]["B"])
    if fmt == "json":
        return orjson.dumps(clean({"verdict": verdict, "levels": {lv: ct.to_json(c) for lv, c in comps.items()}}),
                            option=orjson.OPT_INDENT_2).decode()
    parts = [_render_comps(c, fmt, n_a, n_b, f"level {lv}: candidate (B) vs baseline (A), order "
                           f"{' '.join(info['ab']['order'])}") for lv, c in comps.items()]
    return "\n\n".join(parts) + (f"\n\nverdict: {verdict}" if fmt in ("table", "markdown") else "")


def _with_note(text: str, note: str, fmt: str) -> str:
    """Machine-readable output stays parseable: the report.html note goes to stderr for json/csv."""
    if note and fmt in ("json", "csv"):
        sys.stderr.write(note.strip() + "\n")
        return text
    return text + note


_DAMAGE = (KeyError, IndexError, TypeError, AttributeError, ValueError)


def read_summary(run_dir: Path) -> dict[str, Any]:
    """`build_summary`, with a folder whose files lack keys or hold the wrong shapes as a one-line
    error naming it (only reading is guarded: a bug in rendering stays a bug)."""
    try:
        return build_summary(run_dir)
    except _DAMAGE as e:
        raise UsageError(f"{run_dir}: not a complete run folder ({type(e).__name__}: {e}); "
                         "was the run cut short?") from None


def read_ab(run_dir: Path) -> dict[str, Any]:
    """`ab.load_ab`, guarded like `read_summary`."""
    from loadgate.analysis import ab

    try:
        return ab.load_ab(run_dir)
    except _DAMAGE as e:
        raise UsageError(f"{run_dir}: not a complete A/B folder ({type(e).__name__}: {e}); "
                         "was the run cut short?") from None


def render_run(run_dir: Path, fmt: str, html: bool = False) -> str:
    _require_run(run_dir)
    if is_ab(run_dir):
        note = ""
        if html:
            from loadgate.report.html import write_comparison_html

            runs = read_ab(run_dir)["runs"]
            if not runs["A"] or not runs["B"]:
                raise UsageError(f"{run_dir}: the A/B folder holds no finished run of "
                                 f"{'the baseline (A)' if not runs['A'] else 'the candidate (B)'}")
            page = write_comparison_html({f"baseline ({runs['A'][0].name})": runs["A"][0],
                                          f"candidate ({runs['B'][0].name})": runs["B"][0]}, run_dir / "report.html")
            note = f"\n\nreport (plots of the first run of each side): {page}"
        return _with_note(render_ab(run_dir, fmt), note, fmt)
    summary = read_summary(run_dir)
    note = ""
    if html:
        from loadgate.report.html import write_html

        note = f"\n\nreport: {write_html(run_dir)}"
    if fmt == "json":
        return _with_note(orjson.dumps(clean(summary), option=orjson.OPT_INDENT_2).decode(), note, fmt)
    if fmt == "markdown":
        return _with_note(summary_markdown(summary), note, fmt)
    if fmt == "csv":
        return _with_note(summary_csv(summary), note, fmt)
    return _with_note(render_summary(summary), note, fmt)


def _single_comparisons(a: Path, b: Path) -> dict[str, dict[str, FigureComparison]]:
    """Two single runs: ratios per level, with intervals from resampling requests (one run per side
    cannot show run-to-run drift, so the decision reads 'single run')."""
    sa, sb = read_summary(a), read_summary(b)
    ra = list(read_records(a / "records.jsonl"))
    rb = list(read_records(b / "records.jsonl"))
    out = {}
    for lv in sa["levels"]:
        if lv not in sb["levels"]:
            continue
        la = [r for r in ra if str(r.level) == lv]
        lb = [r for r in rb if str(r.level) == lv]
        comps = {}
        for name in FIGURES:
            c = compare_figure(name, [figure(sa["levels"][lv], name)], [figure(sb["levels"][lv], name)])
            ci = request_level(name, la, lb) if c.ratio is not None else None
            comps[name] = dataclasses.replace(c, ci=ci) if ci else c
        out[lv] = comps
    return out


def render_compare(runs: list[Path], fmt: str) -> str:
    for r in runs:
        _require_run(r)
    if len(runs) == 1:
        if not is_ab(runs[0]):
            raise UsageError(f"{runs[0]}: compare needs two run folders, or one A/B run folder")
        return render_ab(runs[0], fmt)
    if any(is_ab(r) for r in runs):
        raise UsageError("compare an A/B run folder on its own (it holds both sides)")
    ref, others = runs[0], runs[1:]
    out: list[str] = []
    docs: list[dict[str, Any]] = []
    for other in others:
        for lv, comps in _single_comparisons(ref, other).items():
            if fmt == "json":
                docs.append({"baseline": str(ref), "candidate": str(other), "level": lv, **ct.to_json(comps)})
                continue
            title = (f"{other.name} vs {ref.name} at level {lv} (one run each: intervals from resampling requests, "
                     "indicative only; use an `ab` profile for run-level statistics)")
            out.append(_render_comps(comps, fmt, 1, 1, title))
    if not out and not docs:
        raise UsageError(f"no load level in common: {ref} has {', '.join(read_summary(ref)['levels'])}; "
                         f"compare runs measured at the same concurrency or rate")
    if fmt == "json":
        return orjson.dumps(clean({"comparisons": docs}), option=orjson.OPT_INDENT_2).decode()
    return "\n\n".join(out)
