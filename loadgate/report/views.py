"""What `loadgate report` and `loadgate compare` print, from saved run folders only."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgate.analysis import ab
from loadgate.analysis.ab import WINDOW_FIGURES, group_key, group_of, group_values
from loadgate.analysis.abstats import (
    FigureComparison,
    compare_figure,
    comparisons_json,
    figure,
    figures,
    request_level,
)
from loadgate.analysis.summary import GROUP_FIELDS, Summary, build_summary, group_value
from loadgate.errors import UsageError
from loadgate.jsonutil import clean, load_json
from loadgate.records import Record, read_records
from loadgate.report import compare_table as ct
from loadgate.report.capacity import ab_capacity_text, search_text
from loadgate.report.exactness import report_text
from loadgate.report.table import (
    capacity_table,
    gpu_comparison,
    render_summary,
    summary_csv,
    summary_markdown,
)
from loadgate.report.thresholds import render as render_thresholds
from loadgate.report.thresholds import render_judged
from loadgate.verdict import OUTCOME_WORDS, Judgement, judge


def is_ab(path: Path) -> bool:
    return (path / "ab.json").exists()


def _require_run(path: Path) -> None:
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    measured = (path / "records.jsonl").exists() and (path / "meta.json").exists()
    stopped = (path / "stop.json").exists() or (path / "exactness.json").exists()
    if not (is_ab(path) or measured or stopped):
        raise UsageError(f"{path}: not a loadgate run folder (records.jsonl and meta.json expected)")


def _render_comps(comps: dict[str, FigureComparison], fmt: str, n_a: int, n_b: int, title: str) -> str:
    if fmt == "json":
        return orjson.dumps(comparisons_json(comps), option=orjson.OPT_INDENT_2).decode()
    if fmt == "csv":
        return ct.as_csv(comps)
    if fmt == "markdown":
        return ct.as_markdown(comps, n_a, n_b)
    words = [f"  {c.words()}" for c in comps.values() if c.ratio is not None]
    return f"{title}\n{ct.as_table(comps, n_a, n_b)}\n" + "\n".join(words)


def _exactness_block(run_dir: Path) -> str:
    """The check's report from its exactness.json ("" when the run had no check)."""
    p = run_dir / "exactness.json"
    return report_text(load_json(p)) if p.exists() else ""


def _ab_exactness(run_dir: Path) -> str:
    parts = []
    for side in ("baseline", "candidate"):
        text = _exactness_block(run_dir / f"check-{side}")
        if text:
            parts.append(f"== {side}\n{text}")
    return "\n\n".join(parts)


def ab_stamps(info: dict[str, Any], levels: list[str] | None = None) -> list[str]:
    """Per level (of `levels` where given: those an A/B of searches compares), each side's stamp bound
    over its runs: the worst run's stated p99 and the range of the share of chunks that shared a read
    (the validity of every run is judged on the former)."""
    per: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for side in ("A", "B"):
        for d in info["runs"][side]:
            for lv, ls in build_summary(d).levels.items():
                if ls.client_health.stamp_bound and (levels is None or lv in levels):
                    per.setdefault(lv, {"A": [], "B": []})[side].append(ls.client_health.stamp_bound)
    out = []
    for lv, sides in per.items():
        words = []
        for side, name in (("A", "baseline"), ("B", "candidate")):
            sbs = sides[side]
            if sbs:
                shared = [sb["shared_read_fraction"] for sb in sbs]
                words.append(f"{name} {max(sb['stated_p99_ms'] for sb in sbs):.3f} ms ({len(sbs)} runs; "
                             f"{min(shared):.1%}–{max(shared):.1%} of chunks shared a read)")
        out.append(f"level {lv} stamps, stated bound p99 of the worst run: " + "; ".join(words))
    return out


def render_ab(j: Judgement, fmt: str) -> str:
    """An A/B folder's comparison per level and the comparison's verdict."""
    assert j.comparisons is not None and j.ab_info is not None
    comps, info = j.comparisons, j.ab_info
    n_a, n_b = len(info["runs"]["A"]), len(info["runs"]["B"])
    line = j.capacity
    if fmt == "json":
        return orjson.dumps(clean({"outcome": j.verdict.to_json(), "verdict": j.verdict.ab_decision,
                                   "levels": {lv: comparisons_json(c) for lv, c in comps.items()},
                                   **({} if line is None else {"capacity": line.to_json()})}),
                            option=orjson.OPT_INDENT_2).decode()
    parts = [_render_comps(c, fmt, n_a, n_b, f"level {lv}: candidate (B) vs baseline (A), order "
                           f"{' '.join(info['ab']['order'])}") for lv, c in comps.items()]
    if line is not None and fmt in ("table", "markdown"):
        cap = ab_capacity_text(line)
        parts.insert(0, f"```text\n{cap}\n```" if fmt == "markdown" else cap)
        parts.insert(1, searched_levels_note(list(comps)))
    text = "\n\n".join(parts) + (f"\n\nverdict: {j.verdict.ab_decision}" if fmt in ("table", "markdown") else "")
    if fmt == "table" and j.ab_settings:
        st = j.ab_settings
        text += (f"\ndecided on {'the capacity line' if line is not None else ', '.join(st['decide_on'])}; "
                 f"practical change {st['practical']:.0%}" + ("" if line is not None else f", alpha {st['alpha']}"))
    if fmt in ("table", "markdown"):
        text += "".join("\n" + x for x in ab_stamps(info, None if line is None else list(comps)))
        if j.ab_settings and (power := ab.group_power(comps, j.ab_settings, n_a, n_b)):
            text += "\n" + power
    return text


def searched_levels_note(levels: list[str]) -> str:
    """Which levels an A/B of searches compares figure by figure, and why only those."""
    levels = [lv for lv in levels if not ab.is_group(lv)]
    why = "each side's search chose its own loads after its first failure, so the figures are compared only at"
    if not levels:
        return f"per level: {why} loads every run of both sides probed, and there is none: no per-level table"
    return (f"per level: {why} the loads every run of both sides probed ({', '.join(levels)}); the verdict reads "
            "the capacity line")


def outcome_line(j: Judgement, fmt: str) -> str:
    """The verdict as the last line of a table or markdown report."""
    return f"outcome: {j.verdict.words}" if fmt == "table" else f"**outcome**: {j.verdict.words}"


def _actors_text(run_dir: Path) -> str:
    """A distributed run's actors, one line each (node, records, stamps, schedule lag, clock)."""
    from loadgate.analysis.distributed import actor_lines, read_distributed
    from loadgate.records import Damage, read_records

    dist = read_distributed(run_dir)
    if dist is None or not (run_dir / "records.jsonl").exists():
        return ""
    lines = actor_lines(dist, list(read_records(run_dir / "records.jsonl", damage=Damage())))
    return "\n\nRay actors (load.distributed, " + str(dist.get("address")) + "):\n" + "\n".join(lines) if lines else ""


def render_judgement(run_dir: Path, j: Judgement, fmt: str, *, exactness: bool = True) -> str:
    """A judged run folder in one format: (the exactness block,) the figures, capacity, thresholds
    and the verdict. `loadgate run` prints it without the exactness block (it printed the check as
    it ran); `loadgate report` prints it whole."""
    v = j.verdict
    if j.summary is None and j.comparisons is None:  # stopped before measuring: the verdict alone
        head = _exactness_block(run_dir) if exactness and fmt in ("table", "markdown") else ""
        if fmt == "json":
            return orjson.dumps(clean({"outcome": v.to_json()}), option=orjson.OPT_INDENT_2).decode()
        if fmt == "csv":
            return _csv_verdict_row(j)
        return "\n\n".join(x for x in (head, outcome_line(j, fmt)) if x)
    if j.comparisons is not None:
        body = render_ab(j, fmt)
        if fmt == "csv":
            return body + _csv_verdict_row(j)
        if fmt == "json":
            return body
        head = _ab_exactness(run_dir) if exactness and fmt == "table" else ""
        return "\n\n".join(x for x in (head, body + _threshold_text(j, fmt) + "\n\n" + outcome_line(j, fmt)) if x)
    summary = j.summary
    assert summary is not None
    if fmt == "json":
        return orjson.dumps(clean({"outcome": v.to_json(), **summary.to_json()}), option=orjson.OPT_INDENT_2).decode()
    if fmt == "csv":
        return summary_csv(summary) + _csv_verdict_row(j)
    if fmt == "markdown":
        search = "" if summary.search is None else f"\n\n```text\n{search_text(summary.search)}\n```"
        return summary_markdown(summary) + search + _threshold_text(j, fmt) + "\n\n" + outcome_line(j, fmt)
    parts = []
    if exactness:
        parts.append(_exactness_block(run_dir))
    if summary.unverified:
        parts.append("UNVERIFIED: no exactness check ran for this configuration; these figures are not a result.")
    text = render_summary(summary)
    cap = search_text(summary.search) if summary.search is not None else \
        capacity_table(summary, (load_json(run_dir / "meta.json").get("profile") or {}).get("slo") or {})
    if cap:
        text += "\n\n" + cap
    text += _actors_text(run_dir)
    parts.append(text + _threshold_text(j, fmt) + "\n\n" + outcome_line(j, fmt))
    return "\n\n".join(p for p in parts if p)


def _threshold_text(j: Judgement, fmt: str) -> str:
    if not j.thresholds:
        return ""
    if fmt == "markdown":
        return "\n\n" + "\n\n".join(f"thresholds ({t.where}):\n\n```text\n{render_thresholds(t.outcomes)}\n```"
                                       for t in j.thresholds)
    return "\n" + render_judged(j.thresholds)


def _csv_verdict_row(j: Judgement) -> str:
    """The verdict as a last CSV row: level `all`, metric `verdict`, n = exit code, p50 = outcome."""
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerow(["all", "verdict", "", j.verdict.code, OUTCOME_WORDS[j.verdict.outcome],
                              *[""] * 7])
    return buf.getvalue()


_DAMAGE = (KeyError, IndexError, TypeError, AttributeError, ValueError)


def read_summary(run_dir: Path) -> Summary:
    """`build_summary`, with a folder whose files lack keys or hold the wrong shapes as a one-line
    error naming it (only reading is guarded: a bug in rendering stays a bug)."""
    try:
        return build_summary(run_dir)
    except _DAMAGE as e:
        raise UsageError(f"{run_dir}: not a complete run folder ({type(e).__name__}: {e}); "
                         "was the run cut short?") from None


def read_ab(run_dir: Path) -> dict[str, Any]:
    """`ab.load_ab`, guarded like `read_summary`."""
    try:
        return ab.load_ab(run_dir)
    except _DAMAGE as e:
        raise UsageError(f"{run_dir}: not a complete A/B folder ({type(e).__name__}: {e}); "
                         "was the run cut short?") from None


def read_judgement(run_dir: Path) -> Judgement:
    """`verdict.judge`, with a folder whose files lack keys or hold the wrong shapes as a one-line
    error naming it."""
    try:
        return judge(run_dir)
    except _DAMAGE as e:
        what = "A/B folder" if is_ab(run_dir) else "run folder"
        raise UsageError(f"{run_dir}: not a complete {what} ({type(e).__name__}: {e}); "
                         "was the run cut short?") from None


def write_report_html(run_dir: Path, j: Judgement) -> Path:
    """The self-contained HTML report (plots embedded) of a run or an A/B folder."""
    if j.comparisons is not None:
        from loadgate.report.html import write_comparison_html

        runs = read_ab(run_dir)["runs"]
        if not runs["A"] or not runs["B"]:
            raise UsageError(f"{run_dir}: the A/B folder holds no finished run of "
                             f"{'the baseline (A)' if not runs['A'] else 'the candidate (B)'}")
        return write_comparison_html({f"baseline ({runs['A'][0].name})": runs["A"][0],
                                      f"candidate ({runs['B'][0].name})": runs["B"][0]}, run_dir / "report.html",
                                     lead="" if j.capacity is None else ab_capacity_text(j.capacity))
    from loadgate.report.html import write_html

    return write_html(run_dir)


@dataclass(frozen=True)
class Rendered:
    """What `loadgate report` shows: the text, a note about the HTML file (kept apart so that json
    and csv stay parseable), and the judgement whose exit code the command returns."""

    text: str
    note: str
    judgement: Judgement


def render_run(run_dir: Path, fmt: str, html: bool = False) -> Rendered:
    _require_run(run_dir)
    j = read_judgement(run_dir)
    note = ""
    if html:
        label = "report (plots of the first run of each side)" if j.comparisons is not None else "report"
        note = f"{label}: {write_report_html(run_dir, j)}"
    return Rendered(render_judgement(run_dir, j, fmt), note, j)


def _single_comparisons(a: Path, b: Path) -> dict[str, dict[str, FigureComparison]]:
    """Two single runs: ratios per level, with intervals from resampling requests (one run per side
    cannot show run-to-run drift, so the decision reads 'single run')."""
    sa, sb = read_summary(a), read_summary(b)
    ra = list(read_records(a / "records.jsonl"))
    rb = list(read_records(b / "records.jsonl"))
    out = {}
    for lv in sa.levels:
        if lv not in sb.levels:
            continue
        la = [r for r in ra if str(r.level) == lv]
        lb = [r for r in rb if str(r.level) == lv]
        out[lv] = _single(sa.levels[lv], sb.levels[lv], la, lb)
        for field in GROUP_FIELDS:  # and per group of the level (`ab.group_key`), throughput left out
            for v in group_values([sa.levels[lv]], [sb.levels[lv]], field):
                out[group_key(lv, field, v)] = _single(
                    group_of(sa.levels[lv], field, v), group_of(sb.levels[lv], field, v),
                    [r for r in la if group_value(r, field) == v], [r for r in lb if group_value(r, field) == v],
                    skip=WINDOW_FIGURES)
    return out


def _single(a: Any, b: Any, ra: list[Record], rb: list[Record], skip: tuple[str, ...] = ()) -> dict[str, FigureComparison]:
    """Every figure of one level (or group) of two single runs, intervals from resampling requests."""
    comps = {}
    for name in figures():
        if name in skip:
            continue
        c = compare_figure(name, [figure(a, name)], [figure(b, name)])
        ci = request_level(name, ra, rb) if c.ratio is not None else None
        comps[name] = dataclasses.replace(c, ci=ci) if ci else c
    return comps


def _caveat(run: Path, j: Judgement) -> str | None:
    """A line saying a compared run was INVALID or UNVERIFIED (its figures are no result)."""
    v = j.verdict
    if v.outcome == "invalid":
        return f"note: {run.name} is INVALID: " + "; ".join(v.invalid)
    if v.outcome == "unverified" or (j.summary is not None and j.summary.unverified):
        return f"note: {run.name} is UNVERIFIED: no exactness check backs its figures"
    return None


def render_compare(runs: list[Path], fmt: str) -> str:
    for r in runs:
        _require_run(r)
    if len(runs) == 1:
        if not is_ab(runs[0]):
            raise UsageError(f"{runs[0]}: compare needs two run folders, or one A/B run folder")
        j = read_judgement(runs[0])
        caveat = _caveat(runs[0], j) if fmt in ("table", "markdown") else None
        return render_ab(j, fmt) + (f"\n{caveat}" if caveat else "")
    if any(is_ab(r) for r in runs):
        raise UsageError("compare an A/B run folder on its own (it holds both sides)")
    judged = {r: read_judgement(r) for r in runs}
    ref, others = runs[0], runs[1:]
    out: list[str] = []
    docs: list[dict[str, Any]] = []
    for other in others:
        for lv, comps in _single_comparisons(ref, other).items():
            if fmt == "json":
                docs.append({"baseline": str(ref), "candidate": str(other), "level": lv,
                             "baseline_outcome": judged[ref].verdict.outcome,
                             "candidate_outcome": judged[other].verdict.outcome, **comparisons_json(comps)})
                continue
            title = (f"{other.name} vs {ref.name} at level {lv} (one run each: intervals from resampling requests, "
                     "indicative only; use an `ab` profile for run-level statistics)")
            out.append(_render_comps(comps, fmt, 1, 1, title))
            ga, gb = (read_summary(r).levels.get(lv) for r in (ref, other))
            if fmt == "table" and (gpu := gpu_comparison(ga.gpu if ga else None, gb.gpu if gb else None)) is not None:
                out.append(gpu)
    if not out and not docs:
        raise UsageError(f"no load level in common: {ref} has {', '.join(read_summary(ref).levels)}; "
                         f"compare runs measured at the same concurrency or rate")
    if fmt == "json":
        return orjson.dumps(clean({"comparisons": docs}), option=orjson.OPT_INDENT_2).decode()
    caveats = [c for r in runs if (c := _caveat(r, judged[r]))] if fmt in ("table", "markdown") else []
    caveats += definition_changes(runs) if fmt in ("table", "markdown") else []
    return "\n\n".join(out) + "".join(f"\n{c}" for c in caveats)


def records_version(run_dir: Path) -> int | None:
    """The record schema version of the run folder's first record (None: no records to tell)."""
    try:
        with open(run_dir / "records.jsonl", "rb") as f:
            v = orjson.loads(f.readline()).get("v")
    except (OSError, ValueError, AttributeError):
        return None
    return v if isinstance(v, int) else None


def definition_changes(runs: list[Path]) -> list[str]:
    """A line for each figure whose definition changed between the runs' records: ttft on chat APIs
    (records v7 tell reasoning chunks apart; the figures are rebuilt from the records)."""
    chat = []
    for r in runs:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if "chat" in str(load_json(r / "meta.json").get("api", "")):
                chat.append(r)
    versions = {r: records_version(r) for r in chat}
    old = [r.name for r, v in versions.items() if v is not None and v < 7]
    new = [r for r, v in versions.items() if v is not None and v >= 7]
    if not old or not new:
        return []
    return [f"note: ttft's definition changed with records v7: {', '.join(old)} was recorded before it, when on a chat "
            "API the first chunk of answer content (or of ids) was the first token; since, the first chunk of any "
            "kind, reasoning included (ttfa is the first answer token)"]
