"""What each command does and prints. The only module (with `cli.py`, which declares the commands,
and the simulator's own CLI) that writes to stdout or stderr: every other stage returns text,
takes a `say` callback for text that must appear while it runs, or a progress factory.

A command ends in its exit code: 0, or a `VerdictError` that carries the verdict's code and one
line (the command line prints it as `loadgate: …` on stderr, like every LoadgateError).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgate.errors import FingerprintsDiffer, LoadgateError, UsageError

# Each command imports the stages it uses when it runs (`loadgate --help` and a profile error need
# none of them; aiohttp, numpy and scipy cost ~0.4 s and ~0.8 s to import on the 2-core machine).
if TYPE_CHECKING:
    from loadgate.config.profile import Profile
    from loadgate.runs import ProgressFactory, RunResult, Tick
    from loadgate.verdict import Verdict


class VerdictError(LoadgateError):
    """A run (or a re-rendered run) whose verdict is not "passed": exit with its code."""

    def __init__(self, v: Verdict) -> None:
        super().__init__(v.message)
        self.exit_code = v.code


def say(text: str) -> None:
    click.echo(text)


def _raise_for(v: Verdict) -> None:
    if v.code:
        raise VerdictError(v)


def progress_bar(show: bool) -> ProgressFactory:
    """A tqdm bar on stderr (none when `show` is false or stderr is no terminal)."""
    @contextlib.contextmanager
    def factory(total: int, label: str) -> Iterator[Tick]:
        from tqdm import tqdm

        # no monitor thread: a thread waking to take the interpreter lock during a phase would make
        # the load loop block outside its poll (see `loadgate.load.turns`)
        tqdm.monitor_interval = 0
        with tqdm(total=total, desc=label, unit="req", file=sys.stderr, disable=None if show else True,
                  leave=False) as bar:
            yield bar.update
    return factory


def _timed_words(p: Profile) -> str:
    """What a timed replay will send (a dataset's rows before its length filters, which need counting)."""
    from loadgate.load.plan import trace_of
    from loadgate.load.workload.dataset import has_trace, open_rows, row_stamps
    from loadgate.load.workload.timing import Window, replay_info, timed_order
    from loadgate.report.table import trace_line

    if has_trace(p):
        info = trace_of(p).info()
    else:
        rows = open_rows(p)
        assert rows is not None
        load = p.load
        window = Window(load.trace_start_s, load.trace_length_s, load.trace_speed, p.workload.requests)
        _, offsets, late = timed_order(row_stamps(rows), window, rows.path)
        info = replay_info(offsets, late, len(rows), window)
    assert info is not None
    return trace_line(info)


def validate(profile: str) -> None:
    from loadgate.config.profile import load_profile
    from loadgate.load.plan import check_source

    p = load_profile(profile)
    p.check_files()
    check_source(p)
    say(f"{profile}: valid profile {p.name!r}")
    if p.load.schedule == "trace":
        say(_timed_words(p))
    ss = p.workload.sessions
    if ss is not None:
        turns = "the dataset's turns" + (f" (at most {ss.max_turns})" if ss.max_turns else "") \
            if p.workload.dataset is not None else f"{ss.turns} turns"
        say(f"conversations: {p.workload.request_count} of {turns}, history {p.history}"
            + (" (auto: recorded in an A/B)" if ss.history == "auto" and p.ab is not None else
               " (auto: actual in a single run)" if ss.history == "auto" else "")
            + (f", {p.load.concurrency} in flight" if p.load.concurrency is not None else
               f", {'/'.join(f'{r:g}' for r in p.load.rates)} started a second"))
    for line in _sampling_power_lines(p):
        say(line)
    c = p.load.concurrency
    slots = max(c) if isinstance(c, tuple) else c
    if slots and p.load.warmup_requests < slots:
        say(f"note: load.warmup_requests ({p.load.warmup_requests}) is below the concurrency ({slots}): "
            f"up to {slots - p.load.warmup_requests} measured requests per level open a connection, "
            "and their TTFT includes it")
    if p.ab is not None and p.ab.baseline.extra_body != p.target.extra_body:
        keys = sorted(set(p.ab.baseline.extra_body) ^ set(p.target.extra_body)) or sorted(p.target.extra_body)
        say(f"note: ab.baseline.extra_body differs from target.extra_body ({', '.join(keys)}): the two sides send "
            "different request bodies; give the baseline the same keys to compare like with like")


TARGET_TVS = (0.05, 0.02, 0.01)
ASSUMED_DF = 10  # categories less one, where no baseline samples show the real number


def _sampling_power_lines(p: Any) -> list[str]:
    """What the distribution-preserving test can detect with the profile's samples, and the
    samples a side each target TV needs: at the baseline's own category probabilities where its
    file holds samples, else for a difference of any shape at an assumed 11 categories."""
    sc = p.exactness.sampling if p.exactness is not None else None
    if sc is None or not sc.distribution_preserving:
        return []
    from collections import Counter

    from loadgate.exactness import baseline as bl
    from loadgate.exactness.sampling import (
        detectable_shift_tv,
        detectable_tv,
        pooled_table,
        samples_needed,
        shift_ratio,
        shift_reach,
    )

    level = sc.alpha / sc.prefixes  # Holm's strictest level
    head = f"sampling (distribution-preserving, alpha {sc.alpha:g} over {sc.prefixes} prefixes)"
    stored: dict[str, Any] = {}
    if p.exactness.baseline != "sim-reference":
        with contextlib.suppress(UsageError):
            stored = (bl.load(p.resolve(p.exactness.baseline)).doc.get("sampling") or {}).get("prefixes") or {}
    out = []
    for case, s in list(stored.items())[:sc.prefixes]:
        counts = Counter(s.get("labels") or [])
        if not counts:
            continue
        n = sum(counts.values())
        cats, table = pooled_table(counts, counts)
        probs = table[0] / n
        df = len(cats) - 1
        if df < 1:
            out.append(f"  {case}: the baseline's samples fall into one category: nothing can be told apart")
            continue
        drawn = n  # the check draws as many as the baseline holds
        shift = detectable_shift_tv(cats, probs, drawn, drawn, df, level)
        reach = shift_reach(cats, probs)
        need = ", ".join(f"TV {tv:g}: " + (f"{samples_needed(tv, df, level, shift_ratio(cats, probs, tv)):,}"
                                          if tv <= reach else "no such shift is that large") for tv in TARGET_TVS)
        if drawn != sc.samples:
            out.append(f"  {case}: the baseline holds {drawn} samples, not exactness.sampling.samples "
                       f"({sc.samples}): the check draws {drawn} (capture the baseline again for {sc.samples})")
        out.append(f"  {case} (the baseline's {len(cats)} categories, {drawn} samples a side): detect a shift toward "
                   f"the likeliest tokens of TV >= {shift:.3f}, any difference of TV >= "
                   f"{detectable_tv(drawn, drawn, df, level):.3f}; samples a side for a shift of {need}")
    if out:
        return [head + ", per prefix, with probability >= 0.8:", *out]
    need = ", ".join(f"TV {tv:g}: {samples_needed(tv, ASSUMED_DF, level):,}" for tv in TARGET_TVS)
    return [f"{head}: {sc.samples} samples a side detect any difference of TV >= "
            f"{detectable_tv(sc.samples, sc.samples, ASSUMED_DF, level):.3f} with probability >= 0.8, at an assumed "
            f"{ASSUMED_DF + 1} categories (no baseline samples to read: capture the baseline, then validate again, "
            f"for the figures at its own categories); samples a side for {need}"]


def schema() -> None:
    import orjson

    from loadgate.config.profile import profile_json_schema

    say(orjson.dumps(profile_json_schema(), option=orjson.OPT_INDENT_2).decode())


def _html_line(result: RunResult) -> str:
    from loadgate.report.views import write_report_html

    try:
        return f"report: {write_report_html(result.run_dir, result.judgement)}"
    except UsageError as e:
        return f"(no HTML report: {e.message})"


def run(profile: str, *, quiet: bool, unverified: bool, html: bool = False, ray_address: str | None = None,
        actors: int | None = None) -> None:
    """`loadgate run`: the check's report as it runs, then the judged run, paths, and the verdict."""
    from loadgate.sim.process import prestart, stop_prestarted

    prestart(profile)  # the embedded engine starts while the client's stages import
    try:
        from loadgate import runs
        from loadgate.config.profile import load_profile, with_distributed

        loaded = with_distributed(load_profile(profile), ray_address, actors)
        result = runs.run(loaded, unverified=unverified, say=say, progress=progress_bar(not quiet))
    finally:
        stop_prestarted()
    from loadgate.report.views import render_judgement

    j, d = result.judgement, result.run_dir
    say(render_judgement(d, j, "table", exactness=False))
    if j.comparisons is not None:
        pairs = len(j.ab_info["runs"]["A"]) if j.ab_info else 0
        say(f"\nrun folders: {d}/A1 … B{pairs}; comparison: {d / 'comparison.json'}; verdict: {d / 'verdict.json'}")
    else:  # only the files the run wrote (one stopped during its check measured nothing)
        files = [f"{name}: {d / f}" for name, f in (("records", "records.jsonl"), ("summary", "summary.json"),
                                                     ("verdict", "verdict.json")) if (d / f).exists()]
        say("\n" + "\n".join(files or [f"run folder: {d} (nothing in it was measured)"]))
        if not (d / "records.jsonl").exists():
            _raise_for(j.verdict)
            return
    say(_html_line(result) if html else f"plots: loadgate report --html {d}")
    _raise_for(j.verdict)


def check(profile: str) -> None:
    from loadgate.sim.process import prestart, stop_prestarted

    prestart(profile)
    try:
        from loadgate import runs
        from loadgate.config.profile import load_profile

        runs.check(load_profile(profile), say=say)
    finally:
        stop_prestarted()


def baseline(profile: str, out: str) -> None:
    from loadgate import runs
    from loadgate.config.profile import load_profile

    say(str(runs.capture_baseline(load_profile(profile), Path(out))))


def fingerprint(profile: str, against: str | None) -> None:
    from loadgate import runs
    from loadgate.config.profile import load_profile

    try:
        say(runs.fingerprint(load_profile(profile), against))
    except FingerprintsDiffer as e:  # the fields on stdout, the verdict's one line on stderr
        say(e.message)
        raise FingerprintsDiffer("the fingerprint differs from the saved one (fields above)") from None


def replay(bundle: str, endpoint: str | None, times: int, concurrency: int = 1) -> None:
    from loadgate import runs

    runs.replay(bundle, endpoint, times, say=say, concurrency=concurrency)


def report(run_dir: str, fmt: str, html: bool) -> None:
    """`loadgate report`: the run judged again from its files; exits with the verdict's code."""
    from loadgate.report.views import render_run

    r = render_run(Path(run_dir), fmt, html=html)
    say(r.text)
    if r.note:
        if fmt in ("json", "csv"):  # machine-readable output stays parseable
            click.echo(r.note, err=True)
        else:
            say("\n" + r.note)
    _raise_for(r.judgement.verdict)


def compare(run_dirs: tuple[str, ...], fmt: str) -> None:
    from loadgate.report.views import render_compare

    say(render_compare([Path(r) for r in run_dirs], fmt))
