"""The verdict: a run folder -> what it proved and the exit code, from the folder's files alone.

`judge(run_dir)` reads what the run wrote (meta.json, records.jsonl, server.json, health.json,
exactness.json, stop.json; for an A/B folder ab.json and each side's runs) and decides, the first
that applies winning:

  stop.json         the gate stopped the run (exactness failed: 10; fingerprint changed: 11), or a
                    signal did (interrupted: 130 / 143, the figures of what finished still shown),
                    or the circuit breaker (`load.abort`: aborted, 20, the figures shown too)
  incomplete   5    the run never finished (state.json is not `final`: killed, or stopped on an
                    error, whose code it keeps: 4 after a failed write); the figures of what it
                    kept (records.jsonl, workers' part files, the exchange logs) are shown
  damaged      5    records.jsonl has lines that cannot be read (their numbers are named)
  invalid     30    the client was the bottleneck, token counts were off the plan, or other
                    traffic reached the server (`summary.levels.*.invalid`), or no request of a
                    level succeeded and no threshold judged it (not for a search's probes)
  unverified  11    measured with `--unverified`: no exactness check backs the figures
  thresholds  20    a threshold of the profile failed
  regressed   21    A/B: the candidate regressed against the baseline
  inconclusive 22   A/B: the runs cannot rule out a change that matters (or a deciding figure
                    could not be compared)
  passed       0

An A/B of searches (`load.search`) is decided on its capacity line instead of the per-level figures
(`loadgate.analysis.abcapacity`: 21 when its whole interval lies below 1 - ab.practical, 22 when it
straddles that), and its thresholds are judged on each candidate run as a single search run's are
(its answer's level, or its lowest probe, which failing exits 20); verdict.json's thresholds then
name the candidate run (`run`) beside the level.

`finish(run_dir)` judges and writes summary.json (each run's), comparison.json (A/B) and
verdict.json. `loadgate run` prints the verdict and exits with its code; `loadgate report RUN`
judges the same files again and prints the same verdict with the same code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadgate.analysis import ab
from loadgate.analysis.abcapacity import CapacityLine, interval_words
from loadgate.analysis.abstats import FigureComparison, comparisons_json
from loadgate.analysis.search import deciding_levels, judged_levels
from loadgate.analysis.summary import Summary, build_summary
from loadgate.core.thresholds import LevelJudgement, judged_json
from loadgate.core.thresholds import judge as judge_thresholds
from loadgate.errors import EXIT_CODES, Exit
from loadgate.exactness.outcome import not_established_words
from loadgate.jsonutil import dump_json, load_json
from loadgate.records import Damage
from loadgate.runstate import read_state

VERDICT_VERSION = 2
"""2: `caveats`, what the outcome does not cover (today: speed measured under sampling that no
sampling contract backed); version 1 files read with none."""
OUTCOME_WORDS = {"passed": "PASSED", "invalid": "INVALID", "damaged": "DAMAGED", "interrupted": "INTERRUPTED",
                 "aborted": "ABORTED", "unverified": "UNVERIFIED", "threshold": "FAILED",
                 "regressed": "REGRESSED", "inconclusive": "INCONCLUSIVE", "exactness": "EXACTNESS FAILED",
                 "not established": "NOT ESTABLISHED", "stopped": "STOPPED",
                 "incomplete": "INCOMPLETE"}


@dataclass(frozen=True)
class Verdict:
    """What a run proved (verdict.json)."""

    code: int  # the exit code
    outcome: str  # a key of OUTCOME_WORDS: passed, invalid, unverified, threshold, regressed, ...
    message: str  # one line; "" when everything passed
    kind: str = "run"  # "run" or "ab"
    exactness: str | None = None  # "passed" / "failed" / "not run"; per side for A/B ("baseline passed, …")
    invalid: list[str] = field(default_factory=list)
    thresholds: list[dict[str, Any]] = field(default_factory=list)
    ab_decision: str | None = None
    caveats: list[str] = field(default_factory=list)
    v: int = VERDICT_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", int(self.code))  # an `Exit` member is kept as its number

    @property
    def words(self) -> str:
        """The final line: e.g. 'FAILED (exit 20): 2 threshold(s) failed: …'."""
        head = f"{OUTCOME_WORDS[self.outcome]} (exit {self.code}"
        head += f": {EXIT_CODES[self.code]})" if self.code else ")"
        return head + (f": {self.message}" if self.message else "") + "".join(f"; {c}" for c in self.caveats)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verdict:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Judgement:
    """The verdict with what it was judged on (the report renders these)."""

    verdict: Verdict
    summary: Summary | None = None  # a single run's summary
    thresholds: list[LevelJudgement] = field(default_factory=list)
    comparisons: dict[str, dict[str, FigureComparison]] | None = None  # A/B: per level
    ab_settings: dict[str, Any] | None = None
    ab_info: dict[str, Any] | None = None
    side_summaries: dict[str, list[Summary]] | None = None
    capacity: CapacityLine | None = None  # an A/B of searches: its capacity line


def _stopped(run_dir: Path) -> Verdict | None:
    p = run_dir / "stop.json"
    if not p.exists():
        return None
    d = load_json(p)
    return Verdict(int(d["code"]), str(d.get("outcome", "stopped")), str(d.get("message", "")))


def write_stop(run_dir: Path, code: int, message: str, outcome: str) -> None:
    """Record that the gate (or a failure) stopped the run, for `judge` to read."""
    dump_json(run_dir / "stop.json", {"code": code, "outcome": outcome, "message": message})


def _exactness_of(run_dir: Path) -> str | None:
    p = run_dir / "exactness.json"
    if not p.exists():
        return None
    d = load_json(p)
    if d.get("passed"):
        return "passed"
    return "not established" if d.get("not_established") and not d.get("reasons") else "failed"


def sampling_caveats(profile: dict[str, Any]) -> list[str]:
    """What a measured run's outcome does not cover: requests sampled (`load.request.temperature`
    above 0) where the exactness check ran no sampling contract (`exactness.sampling`), which is
    the only check that speaks for sampled output (the scenarios replay greedy)."""
    temp = float(((profile.get("load") or {}).get("request") or {}).get("temperature") or 0.0)
    ex = profile.get("exactness")
    contract = (ex.get("sampling") if isinstance(ex, dict) else None) or {}
    backed = (contract.get("seeded_replay") or contract.get("distribution_preserving")) \
        and float(contract.get("temperature") or 0.0) == temp
    if temp == 0.0 or backed:
        return []
    why = (f"the sampling contract ran at temperature {float(contract.get('temperature') or 0.0):g}" if contract.get(
        "seeded_replay") or contract.get("distribution_preserving") else "no sampling contract (exactness.sampling) "
        "covered sampled output")
    return [f"the requests were sampled (temperature {temp:g}) and {why}: the check proved greedy output only"]


def _decide(invalid: list[str], unverified: bool, judged: list[LevelJudgement], ab_decision: str | None,
            regressed_in: list[str] | None = None) -> tuple[int, str, str]:
    """(exit code, outcome, message) in the order of the module docstring."""
    if invalid:
        return Exit.INVALID, Exit.INVALID.outcome, "measurement invalid: " + "; ".join(invalid)
    if unverified:
        return Exit.NOT_ESTABLISHED, "unverified", "exactness not established: the run was --unverified"
    failed = [(j, o) for j in judged for o in j.outcomes if not o.passed]
    if failed:
        return Exit.THRESHOLD, Exit.THRESHOLD.outcome, f"{len(failed)} threshold(s) failed: " + "; ".join(
            f"{o.threshold.metric} {o.threshold.text}" for _, o in failed[:5])
    if ab_decision == "regressed":
        where = "" if not regressed_in else " at " + ", ".join(
            f"level {k}" for k in regressed_in)  # a level ('8') or a group of one ('8 · category code')
        return Exit.REGRESSED, Exit.REGRESSED.outcome, \
            f"the candidate regressed against the baseline{where} (see the comparison above)"
    if ab_decision in ("inconclusive", "single run"):
        return Exit.INCONCLUSIVE, Exit.INCONCLUSIVE.outcome, ("the comparison is inconclusive: the runs cannot rule out a change that matters; "
                                    "add pairs (ab.pairs) or reduce noise")
    if ab_decision == "n/a":
        return Exit.INCONCLUSIVE, Exit.INCONCLUSIVE.outcome, ("nothing to decide on: a deciding figure (ab.decide_on) has no value on one side "
                                    "(every request failed, or the engine does not report it)")
    return Exit.PASSED, Exit.PASSED.outcome, ""


def judge(run_dir: Path | str, *, finishing: bool = False) -> Judgement:
    """The verdict of a run folder or an A/B folder, from its files alone. `finishing`: the run
    itself judges the folder it is about to mark final (not incomplete, then)."""
    run_dir = Path(run_dir)
    state = read_state(run_dir)
    unfinished = not finishing and state is not None and state.get("state") != "final"
    if (run_dir / "ab.json").exists():
        if unfinished and _stopped(run_dir) is None:
            return _incomplete_ab(run_dir, state or {})
        return _judge_ab(run_dir)
    stopped = _stopped(run_dir)
    if stopped is not None and (stopped.outcome not in ("interrupted", "aborted")
                                or not (run_dir / "meta.json").exists()):
        return Judgement(stopped)
    if unfinished and stopped is None and state is not None:
        return _incomplete(run_dir, state)
    if not (run_dir / "records.jsonl").exists() and (checked := _exactness_of(run_dir)) is not None:
        if checked == "passed":  # `loadgate check`: nothing measured
            return Judgement(Verdict(Exit.PASSED, Exit.PASSED.outcome, "", exactness="passed"))
        report = load_json(run_dir / "exactness.json")
        if not report.get("reasons") and report.get("not_established"):
            return Judgement(Verdict(Exit.NOT_ESTABLISHED, Exit.NOT_ESTABLISHED.outcome, not_established_words(report["not_established"]),
                                     exactness="not established"))
        return Judgement(Verdict(Exit.EXACTNESS_FAILED, Exit.EXACTNESS_FAILED.outcome, "exactness failed: " + "; ".join(report.get("reasons") or []),
                                 exactness="failed"))
    summary = build_summary(run_dir)
    meta = load_json(run_dir / "meta.json")
    judged = judge_thresholds((meta.get("profile") or {}).get("thresholds") or {}, summary.levels)
    invalid_levels = list(summary.levels)
    caveats = sampling_caveats(meta.get("profile") or {})
    if ((meta.get("profile") or {}).get("load") or {}).get("search"):  # a search: its answer's level only
        passed = {j.level: all(o.passed for o in j.outcomes) for j in judged}
        keep = judged_levels(passed)
        judged = [j for j in judged if j.level in keep]
        invalid_levels = deciding_levels(passed)  # the probes the bracket rests on
        caveats += [f"probe {lv} was INVALID (its level says why), but the answer's bracket does not rest on it"
                    for lv in summary.levels if lv not in invalid_levels and summary.levels[lv].invalid]
    invalid = [p for lv in invalid_levels for p in summary.levels[lv].invalid]
    if not ((meta.get("profile") or {}).get("load") or {}).get("search"):
        invalid += nothing_measured(summary, judged)
    invalid = distributed_invalid(run_dir, meta, invalid_levels) + invalid  # (a lost actor first: the rest follows)
    code, outcome, message = _decide(invalid, summary.unverified, judged, None)
    if summary.damage:
        code, outcome, message = Exit.DAMAGED, Exit.DAMAGED.outcome, "run folder damaged: " + Damage(**summary.damage).words()
    if stopped is not None:  # interrupted: the figures of what finished, and the signal's code
        code, outcome, message = stopped.code, stopped.outcome, stopped.message
    v = Verdict(code, outcome, message, "run", "not run" if summary.unverified else _exactness_of(run_dir),
                invalid, judged_json(judged), caveats=caveats)
    return Judgement(v, summary=summary, thresholds=judged)


def distributed_invalid(run_dir: Path, meta: dict[str, Any], levels: list[str]) -> list[str]:
    """A distributed run's own reasons to be invalid (`loadgate.analysis.distributed`): a lost actor,
    a clock offset known too loosely, one actor's stamps or schedule over budget; of `levels` (a
    search: the probes its answer rests on)."""
    from loadgate.analysis.distributed import problems, read_distributed
    from loadgate.config.profile import HealthBudgets
    from loadgate.records import Damage, read_records

    dist = read_distributed(run_dir)
    if dist is None:
        if ((meta.get("profile") or {}).get("load") or {}).get("distributed"):
            return ["load.distributed: distributed.json is missing or damaged, so the actors' clocks and losses "
                    "cannot be judged"]
        return []
    budgets = HealthBudgets(**((meta.get("profile") or {}).get("health") or {}))
    records = list(read_records(run_dir / "records.jsonl", damage=Damage())) if (run_dir / "records.jsonl").exists() else []
    keep = {float(lv) for lv in levels}
    dist = {**dist, "levels": {lv: e for lv, e in dist["levels"].items() if float(lv) in keep or e.get("lost")}}
    return problems(dist, records, budgets)


def nothing_measured(summary: Summary, judged: list[LevelJudgement]) -> list[str]:
    """A level none of whose requests succeeded measured no speed: PASSED would flatter it where no
    threshold judged it (a failed threshold says more, and stays the outcome). A search's probes
    are judged by their thresholds instead, and an A/B by its comparison (nothing to decide on)."""
    failed = {j.level for j in judged if any(not o.passed for o in j.outcomes)}
    out = []
    for lv, s in summary.levels.items():
        if s.requests and not s.succeeded and lv not in failed:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(s.errors.items(), key=lambda kv: -kv[1]))
            out.append(f"level {lv}: none of its {s.requests} requests succeeded ({kinds or 'no error recorded'}), "
                       "so no speed was measured")
    return out


def _planned(meta: dict[str, Any]) -> int | None:
    """Measured requests the run planned: a timed trace's window, else per level the workload's
    count (100 where the profile left it unset); None where meta.json says neither."""
    trace = meta.get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("requests"), int):
        return int(trace["requests"])
    workload = (meta.get("profile") or {}).get("workload")
    if not isinstance(workload, dict):
        return None
    n = workload.get("requests", 100)
    n = 100 if n is None else n
    return n * len(meta.get("levels") or []) if isinstance(n, int) else None


def _code_and_why(state: dict[str, Any]) -> tuple[int, str]:
    """An unfinished run's exit code (its own where it recorded one, else 5) and why, in words."""
    code = state.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) and code in EXIT_CODES and code else Exit.DAMAGED
    if code != 5:
        return code, f"the run stopped on an error (exit {code}: {EXIT_CODES[code]})"
    where = f" as pid {state['pid']} on {state['host']}" if state.get("pid") and state.get("host") else ""
    return code, f"the run never finished (killed, or still running{where})"


def _incomplete_ab(run_dir: Path, state: dict[str, Any]) -> Judgement:
    """An A/B folder whose runs did not all finish: no comparison is made of what it holds."""
    code, why = _code_and_why(state)
    ab = load_json(run_dir / "ab.json")
    order = list(ab.get("order") or [])
    done = [name for name in order if (run_dir / name / "records.jsonl").exists()]
    return Judgement(Verdict(code, "incomplete", f"A/B run incomplete: {why}; {len(done)} of {len(order)} runs "
                             f"began ({', '.join(done) or 'none'}); no comparison is made of an unfinished A/B run",
                             "ab"))


def _incomplete(run_dir: Path, state: dict[str, Any]) -> Judgement:
    """A folder whose run did not finish: what it kept, judged INCOMPLETE with the run's own code
    where it recorded one, else 5."""
    from loadgate.load.recorder import recover
    from loadgate.records import read_records

    code, why = _code_and_why(state)
    recovered, logs = recover(run_dir)
    from_logs = {(str(r.level), r.i) for r in recovered if not r.excluded}
    for part in sorted(run_dir.glob(".part-*.jsonl")):  # a worker's records the parent never appended
        recovered += list(read_records(part, include_warmup=True, damage=Damage()))
    missing = [f for f in ("summary.json", "verdict.json") if not (run_dir / f).exists()]
    if not (run_dir / "meta.json").exists():
        return Judgement(Verdict(code, "incomplete", f"run incomplete: {why}; nothing was measured (no meta.json)"))
    summary = build_summary(run_dir, extra=recovered)
    meta = load_json(run_dir / "meta.json")
    kept = sum(s.requests for s in summary.levels.values())
    planned = _planned(meta)
    in_records = set()
    if (run_dir / "records.jsonl").exists():
        in_records = {(str(r.level), r.i) for r in read_records(run_dir / "records.jsonl", damage=Damage())}
    decoded = len(from_logs - in_records)  # those the logs added
    words = [f"run incomplete: {why}",
             f"{kept} of {planned if planned is not None else 'an unplanned number of'} measured requests kept"
             + (f" ({decoded} decoded from the exchange logs it left)" if logs else "")]
    if missing:
        words.append("no " + " or ".join(missing))
    invalid = [p for lv in summary.levels.values() for p in lv.invalid]
    v = Verdict(code, "incomplete", "; ".join(words), "run",
                "not run" if summary.unverified else _exactness_of(run_dir), invalid)
    return Judgement(v, summary=summary)


PREFIX_CACHE_TOLERANCE = 0.05  # largest difference of the sides' prefix-cache hit rates an A/B decides on


def cache_mismatch(summaries: dict[str, list[Summary]]) -> str | None:
    """Why an A/B cannot decide when its two sides met the engine's prefix cache in different
    states: a cold side against a warm one compares cache state, not configurations."""
    rates: dict[str, float] = {}
    for side, runs in summaries.items():
        got = [lv.prefix_cache for s in runs for lv in s.levels.values()
               if lv.prefix_cache and lv.prefix_cache.get("queries")]
        if got:
            rates[side] = sum(p["hits"] for p in got) / sum(p["queries"] for p in got)
    if len(rates) < 2 or abs(rates["A"] - rates["B"]) <= PREFIX_CACHE_TOLERANCE:
        return None
    return (f"the comparison is inconclusive: the sides met the prefix cache in different states (hit rate "
            f"A {rates['A']:.1%}, B {rates['B']:.1%}, tolerance {PREFIX_CACHE_TOLERANCE:.0%}), so it would compare "
            "cache state, not configurations (workload.cache: fresh, or reset the engine's cache between runs)")


def _searched_thresholds(thresholds: dict[str, Any], runs: list[tuple[str, Summary]]) -> list[tuple[str, LevelJudgement]]:
    """An A/B of searches: each candidate run (its name) judged as a single run of a search is (its
    answer's level, or its lowest probe when that failed)."""
    judged = []
    for name, s in runs:
        levels = judge_thresholds(thresholds, s.levels)
        keep = judged_levels({j.level: all(o.passed for o in j.outcomes) for j in levels})
        for j in levels:
            if j.level in keep:
                what = "its search's answer" if all(o.passed for o in j.outcomes) else "its lowest probe, which failed"
                judged.append((name, dataclasses.replace(j, where=f"candidate run {name}, level {j.level}: {what}")))
    return judged


def _capacity_message(line: CapacityLine) -> str:
    words = interval_words(line.ratio, line.low, line.high)
    if line.decision == "regressed":
        return (f"the candidate's capacity regressed: it serves {words} the baseline's {line.over} within the "
                f"thresholds, wholly below 1 - {line.practical:g} (ab.practical)")
    why = (f"an interval that straddles 1 - {line.practical:g} (ab.practical)" if line.low is not None or
           line.high is not None else "an interval with neither end (no side's search bracketed its answer)")
    return (f"the capacity comparison is inconclusive: the candidate serves {words} the baseline's {line.over} "
            f"within the thresholds, {why}; narrow the brackets (load.search.resolution, or a hi that fails) or "
            "add pairs")


def _judge_ab(run_dir: Path) -> Judgement:
    stopped = _stopped(run_dir)
    if stopped is not None:
        return Judgement(Verdict(stopped.code, stopped.outcome, stopped.message, "ab"))
    info = ab.load_ab(run_dir)
    comps, settings = ab.comparisons(run_dir)
    decision = ab.verdict(comps, list(settings["decide_on"]))
    summaries = {s: [build_summary(d) for d in info["runs"][s]] for s in ab.SIDES}
    profile = load_json(info["runs"]["B"][0] / "meta.json")["profile"] if info["runs"]["B"] else {}
    searched = bool((profile.get("load") or {}).get("search"))
    line = ab.capacity(info, summaries) if searched else None
    by_run: list[tuple[str, LevelJudgement]] = []
    if searched:  # an A/B of searches: the capacity line decides, each candidate run judged as a search
        decision = "n/a" if line is None else line.decision
        by_run = _searched_thresholds(profile.get("thresholds") or {},
                                      list(zip([d.name for d in info["runs"]["B"]], summaries["B"], strict=True)))
        judged = [j for _, j in by_run]
    else:
        judged = judge_thresholds(profile.get("thresholds") or {}, ab.median_run(info["runs"]["B"]),
                                  ab.median_run(info["runs"]["A"]))
    invalid = [p for side in summaries.values() for s in side for lv in s.levels.values() for p in lv.invalid]
    unverified = bool(info["ab"].get("unverified"))
    code, outcome, message = _decide(invalid, unverified, judged, decision,
                                     ab.regressed_in(comps, list(settings["decide_on"])))
    if line is not None and code in (Exit.REGRESSED, Exit.INCONCLUSIVE) and decision in ("regressed", "inconclusive"):
        message = _capacity_message(line)
    mismatch = cache_mismatch(summaries)
    if mismatch and code in (0, 21, 22):
        code, outcome, message, decision = Exit.INCONCLUSIVE, Exit.INCONCLUSIVE.outcome, mismatch, "inconclusive"
    sides = ", ".join(f"{name} {_exactness_of(run_dir / f'check-{name}') or 'not run'}" for name in ab.SIDES.values())
    judged_doc = judged_json(judged) if not searched else [
        {"run": name, **x} for name, j in by_run for x in judged_json([j])]
    v = Verdict(code, outcome, message, "ab", sides, invalid, judged_doc, decision,
                caveats=sampling_caveats(profile))
    return Judgement(v, thresholds=judged, comparisons=comps, ab_settings=settings, ab_info=info,
                     side_summaries=summaries, capacity=line)


def finish(run_dir: Path) -> Judgement:
    """Judge the folder and write what the judgement rests on: summary.json, comparison.json (A/B)
    and verdict.json."""
    j = judge(run_dir, finishing=True)
    if j.summary is not None:
        dump_json(run_dir / "summary.json", {**j.summary.to_json(), "thresholds": j.verdict.thresholds})
    if j.comparisons is not None and j.ab_info is not None:
        for side, dirs in j.ab_info["runs"].items():
            for d, s in zip(dirs, (j.side_summaries or {})[side], strict=True):
                dump_json(d / "summary.json", s.to_json())
        dump_json(run_dir / "comparison.json", {
            "levels": {lv: comparisons_json(c) for lv, c in j.comparisons.items()}, "verdict": j.verdict.ab_decision,
            "thresholds": j.verdict.thresholds, "settings": j.ab_settings,
            **({} if j.capacity is None else {"capacity": j.capacity.to_json()})})
    dump_json(run_dir / "verdict.json", j.verdict.to_json())
    return j
