"""The run path: `loadgate run` (single runs, sweeps, A/B), `check`, `baseline`, `fingerprint`, `replay`.

One path for every run: open the engine, resolve the prompt tokens, pass the gate
(`loadgate.gate.policy.attested`, or `unverified`), measure with the token the gate gave
(`measure` admits it first), then judge the run folder (`loadgate.verdict.finish`). Nothing here
prints: text for the user goes to `say`, progress to the `progress` factory, both given by the
command layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import platform
import random
import resource
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any

import orjson

from loadgate.config.profile import Profile
from loadgate.engine.adapters import is_chat
from loadgate.engine.adapters.base import template_kwargs
from loadgate.errors import (
    EngineError,
    ExactnessFailed,
    ExactnessNotEstablished,
    Exit,
    FingerprintsDiffer,
    ProfileError,
    UsageError,
)
from loadgate.exactness import baseline as bl
from loadgate.exactness.bundle import load_bundle
from loadgate.exactness.bundle import replay as send_again
from loadgate.gate import policy
from loadgate.gate.attestation import Attestation, Token, Unverified
from loadgate.gate.engine_check import CheckOutcome, capture, check_engine, corpus_of, fingerprint_of
from loadgate.gate.fingerprint import diff, fingerprint_hash
from loadgate.gate.replicas import check_words, replicas_meta, spread_over
from loadgate.jsonutil import dump_json, load_json
from loadgate.load.executors import NEVER, StopFlag
from loadgate.load.gpu import gpu_telemetry
from loadgate.load.levels import levels, run_levels
from loadgate.load.plan import build_plan, check_source
from loadgate.load.target import target_spec
from loadgate.load.workload.dataset import Prepared, counter_for, open_rows, prepare
from loadgate.load.workload.pool import TokenPool, token_pool
from loadgate.net.connect import Engine, open_engine, run_async
from loadgate.net.scraper import EngineAccess, Scraper, sources_for
from loadgate.records import RecordWriter
from loadgate.report.exactness import report_text
from loadgate.report.fingerprint import fingerprint_diff_text
from loadgate.runstate import STATE_FILE, write_state
from loadgate.version import __version__

# The judging stages (analysis, verdict) are imported where a run ends, not here: the engine's first
# request should not wait for them (`benchmarks/startup.py`).
if TYPE_CHECKING:
    from loadgate.verdict import Judgement

Say = Callable[[str], None]
Tick = Callable[[int], None]
ProgressFactory = Callable[[int, str], AbstractContextManager[Tick]]
"""(total requests, label) -> a context manager yielding `tick(n)`; the command layer draws it."""


@contextlib.contextmanager
def no_progress(total: int, label: str) -> Iterator[Tick]:
    yield lambda n: None


def _quiet(text: str) -> None:
    pass


@dataclass(frozen=True)
class RunResult:
    """A finished `loadgate run`: its folder and the judgement of it (verdict, summary, tables)."""

    run_dir: Path
    judgement: Judgement

    @property
    def exit_code(self) -> int:
        return self.judgement.verdict.code


# --- run folders ------------------------------------------------------------------------------

def new_run_dir(profile: Profile) -> Path:
    root = Path(profile.output.dir)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = profile.output.run_id or f"{profile.name}-{stamp}"
    path, k = root / name, 1
    while path.exists():
        k += 1
        path = root / f"{name}-{k}"
    path.mkdir(parents=True)
    return path


@contextlib.contextmanager
def run_folder(profile: Profile) -> Iterator[Path]:
    """A new run folder that is removed again when the run fails before anything was written to
    it (an engine that cannot be reached, a missing token source): no empty folders behind. When
    the gate stops a run that did write (a failed check, a changed fingerprint), stop.json says
    why, for the verdict."""
    root = Path(profile.output.dir)
    made = [p for p in (root, *root.parents) if not p.exists()]  # folders this run creates
    path = new_run_dir(profile)
    write_state(path, "running")
    try:
        yield path
    except BaseException as e:
        if any(p.name != STATE_FILE for p in path.iterdir()):
            write_state(path, "stopped", getattr(e, "exit_code", None))
            if isinstance(e, ExactnessFailed | ExactnessNotEstablished):
                from loadgate.verdict import write_stop

                write_stop(path, e.exit_code, e.message,
                           "exactness" if isinstance(e, ExactnessFailed) else "not established")
        else:
            with contextlib.suppress(OSError):
                (path / STATE_FILE).unlink()
            for p in (path, *made):
                try:
                    p.rmdir()  # only succeeds when empty
                except OSError:
                    break
        raise


def finished(run_dir: Path) -> RunResult:
    """Judge the folder, write its summary and verdict, then mark it final with the verdict's code."""
    from loadgate.verdict import finish

    result = RunResult(run_dir, finish(run_dir))
    write_state(run_dir, "final", result.exit_code)
    return result


# --- the performance phase ----------------------------------------------------------------------

Tokens = tuple[TokenPool, int | None, Prepared | None]


async def prepare_tokens(profile: Profile, e: Engine) -> Tokens:
    """The token pool, the chat template's token count (from `workload.tokenizer`) and a dataset's
    requests, counted by that source; done before the exactness check so that a missing source or
    a dataset that filters to nothing fails in seconds, not after the check."""
    tp, overhead = await token_pool(profile.workload.tokenizer, profile.resolve, e.session, e.base, e.model,
                                    profile.target.api, is_chat(profile.target.api),
                                    template_kwargs(profile.target.extra_body))
    rows = open_rows(profile)
    if rows is None:
        return tp, overhead, None
    return tp, overhead, await prepare(profile, rows, counter_for(profile, e.session, e.base, e.model))


ROUNDS_PER_PAIR = 1000  # A/B pair i's levels are rounds i * 1000 + level index (see load.plan)


async def measure(token: Token, e: Engine, run_dir: Path, tokens: Tokens, *,
                  progress: ProgressFactory = no_progress, extra_meta: dict[str, Any] | None = None,
                  stop: StopFlag = NEVER, round_base: int = 0) -> None:
    """The performance phase: warmup, then each load level with counters scraped at the measured
    window's boundaries; writes meta.json, records.jsonl, server.json and health.json. It starts
    only with a token the gate issued for the live configuration (`policy.admit`). Level k sends
    the prompts of round `round_base + k` (`workload.cache: fresh`; see load.plan)."""
    await policy.admit(token, e)
    profile = e.profile
    chat = is_chat(profile.target.api)
    tp, overhead, dataset = tokens
    need_text = chat or not tp.exact
    pool = list(tp.ids)
    plan = build_plan(profile, pool, round_base, dataset)
    spec = target_spec(profile, e.settings, e.base, e.model, timeout_s=profile.target.timeout_s,
                       stream=profile.load.stream, pool_text=tp.text if need_text else None,
                       prompt_overhead=overhead if tp.exact else None, transport=profile.load.transport,
                       request=profile.load.request, endpoints=spread_over(profile.target),
                       route=profile.target.route)
    lv = levels(profile)
    meta_cpus = {"count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0))}
    t0 = perf_counter_ns()
    dump_json(run_dir / "meta.json", {
        "loadgate": __version__, "run_id": run_dir.name, "profile": profile.to_json(),
        "engine_url": e.base, "api": profile.target.api, "model": e.model, "t0_ns": t0,
        "t0_unix_ns": time_ns(), "python": sys.version.split()[0], "host": platform.node(),
        "levels": [x.level for x in lv], "prompt_rounds": [(round_base + k) * (profile.workload.cache == "fresh") for k in range(len(lv))],
        "token_pool": {"size": len(pool), "source": tp.source, "exact": tp.exact},
        "dataset": None if dataset is None else dataset.meta, "trace": plan.trace_info(),
        "sessions": plan.sessions_meta(profile),
        "chat_template_tokens": overhead if chat else None, "unverified": isinstance(token, Unverified),
        "attestation": token.meta(), "tls_insecure": profile.target.tls.insecure,
        "cpus": meta_cpus, "replicas": replicas_meta(profile.target, isinstance(token, Attestation)),
        **(extra_meta or {})})
    search = profile.load.search
    prober, expected = None, len(lv)
    if search is not None:  # (here, not at the top: the prober summarizes, with numpy, which a run imports late)
        from loadgate.load.probing import Prober, probes_expected
        prober, expected = Prober(profile, run_dir / "records.jsonl", meta_cpus), probes_expected(search)
    from loadgate.load.abort_watch import watching  # (here: the watcher judges with numpy, imported late)

    with watching(profile, run_dir) as watch, RecordWriter(run_dir / "records.jsonl") as writer, \
            progress(len(plan) * expected, profile.name) as tick, gpu_telemetry(profile, run_dir), \
            Scraper(sources_for(e.metrics_url, profile.target.extra_metrics_urls), run_dir,
                    profile.target.metrics_interval_s, profile.target.metrics_series_max_mb,
                    EngineAccess(dict(spec.headers), spec.tls)) as scraper:  # (watch: abort_on_fail)
        server, health = await run_levels(e, plan, pool, spec, lv, writer, tick, run_tag=run_dir.name, t0_ns=t0,
                                          round_base=round_base, workers_dir=run_dir, stop=stop, scraper=scraper,
                                          next_level=prober, watch=watch)
    if prober is not None:  # the levels the search chose, as a sweep's would be listed
        meta = load_json(run_dir / "meta.json")
        meta["levels"] = [x.level for x in lv]
        meta["prompt_rounds"] = [(round_base + k) * (profile.workload.cache == "fresh") for k in range(len(lv))]
        dump_json(run_dir / "meta.json", meta)
    dump_json(run_dir / "server.json", {lv: s.to_json() for lv, s in server.items()})
    dump_json(run_dir / "health.json", {lv: [h.to_json() for h in hs] for lv, hs in health.items()})


@contextlib.asynccontextmanager
async def gated(e: Engine, run_dir: Path, unverified: bool, say: Say) -> AsyncIterator[Token]:
    """The gate for one engine: its attestation (check first), or the explicit unverified token."""
    if unverified:
        async with policy.unverified(e) as u:
            yield u
    else:
        if e.profile.target.replicas:
            say(check_words(e.profile.target))
        async with policy.attested(e, run_dir, lambda o: say(report_text(o.report))) as a:
            yield a


# --- signals ------------------------------------------------------------------------------------

@dataclass
class Interruption:
    """SIGINT / SIGTERM during a run: the first stops starting requests (`flag`), lets those in
    flight finish for `grace_s`, then cancels the run's task; a second signal cancels at once.
    Cancelling unwinds every `finally`: worker processes are killed, the simulator stopped, temp
    files removed; what finished is written, and the verdict says interrupted (exit 128 + signal)."""

    grace_s: float
    task: asyncio.Task[Any] | None
    signal: int | None = None
    flag: StopFlag = dataclasses.field(default_factory=StopFlag)
    timer: asyncio.TimerHandle | None = None

    aborted: str | None = None  # the circuit breaker's words (`load.abort`)

    def __post_init__(self) -> None:
        self.flag.hook = self.on_abort

    def on_abort(self, why: str) -> None:
        """The breaker tripped in this process: as a first signal (no new request; those in flight
        get `grace_s`, then are cut, each kept as an error of kind `aborted`)."""
        if self.aborted is None and self.signal is None:
            self.aborted = why
            self.timer = asyncio.get_running_loop().call_later(self.grace_s, self._cancel)

    def on_signal(self, sig: int) -> None:
        if self.signal is None:
            self.signal = sig
            self.flag.set()
            self.timer = asyncio.get_running_loop().call_later(self.grace_s, self._cancel)
        else:
            self._cancel()

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    @property
    def words(self) -> str:
        name = signal.Signals(self.signal).name if self.signal else "a signal"
        return f"interrupted by {name}: the requests that finished were written; the rest were not sent"


@contextlib.asynccontextmanager
async def interruptible(grace_s: float) -> AsyncIterator[Interruption]:
    """Handle SIGINT and SIGTERM on the running loop for the block (see `Interruption`); a
    cancellation that the signal caused ends the block quietly, `signal` says it happened."""
    loop = asyncio.get_running_loop()
    intr = Interruption(grace_s, asyncio.current_task())
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, intr.on_signal, sig)
    try:
        yield intr
    except asyncio.CancelledError:
        if intr.signal is None and intr.aborted is None:
            raise
        if intr.task is not None:
            intr.task.uncancel()
    finally:
        if intr.timer is not None:
            intr.timer.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _stopped_by(intr: Interruption, run_dir: Path) -> None:
    from loadgate.verdict import write_stop

    if intr.signal is not None:
        write_stop(run_dir, 128 + intr.signal, intr.words, "interrupted")
    elif (why := intr.aborted or intr.flag.why) is not None:
        write_stop(run_dir, int(Exit.THRESHOLD), f"aborted: {why}; the requests that finished (and those "
                   "cut off, as errors of kind aborted) were written, the rest were not sent", "aborted")


# --- loadgate run -------------------------------------------------------------------------------

FD_MARGIN = 64  # files, the metrics and introspection connections, the simulator's pipes


def open_files_needed(profile: Profile) -> int:
    """Sockets one client process holds at most (its share of the slots), plus a margin."""
    load = profile.load
    if load.schedule == "trace":  # uncapped: the trace's own bursts, unknown here; a generous share
        slots = load.max_in_flight or 4096
    elif load.rate is not None:
        slots = load.max_in_flight or max(1, int(max(load.rates) * 10))  # uncapped open loop: ~10 s of arrivals
    else:
        c = load.concurrency
        slots = max(c) if isinstance(c, tuple) else (c or 1)
    return -(-slots // load.workers) + FD_MARGIN


def raise_open_file_limit(needed: int) -> None:
    """Raise the soft open-file limit to the hard one when it is below `needed`; EngineError (exit
    3) when even the hard limit is, with the command that raises it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft < needed:
        raise EngineError(f"the open-file limit ({soft}) is below what this load needs (about {needed}: one "
                          f"socket per request in flight, plus {FD_MARGIN}); raise it with `ulimit -n {needed}` "
                          "(or more) before running loadgate, or lower the concurrency or use more load.workers")


def usable_memory() -> tuple[int, str] | None:
    """The memory loadgate may use here, in bytes, and where that figure comes from: the cgroup's
    limit where one is set (v2 `memory.max`, v1 `memory.limit_in_bytes`), else physical memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            text = Path(path).read_text().strip()
            if text != "max" and int(text) < 1 << 60:
                return int(text), f"the cgroup's limit, {path}"
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory"
    return None


def check_memory_budget(profile: Profile) -> None:
    """ProfileError (exit 2) naming `target.limits.memory_budget_mb` when the budget of every
    client process together is above half the memory loadgate may use: the kernel would kill the
    run before the budget ever cut a response."""
    usable = usable_memory()
    if usable is None:
        return
    total, where = usable
    budget = profile.target.limits.memory_budget_mb * 2**20
    workers = profile.load.workers
    if budget * workers > total / 2:
        each = f"{workers} worker processes at " if workers > 1 else ""
        raise ProfileError(profile.path or "profile", None, "target.limits.memory_budget_mb",
                           f"{each}{profile.target.limits.memory_budget_mb:g} MiB is more than half the memory "
                           f"loadgate may use here ({total / 2**20:,.0f} MiB, {where}); give at most "
                           f"{total / 2 / workers / 2**20:,.0f} MiB")


def _preflight(profile: Profile, unverified: bool) -> None:
    raise_open_file_limit(open_files_needed(profile))
    check_memory_budget(profile)
    if profile.exactness is None and not unverified:
        raise ExactnessNotEstablished(
            f"{profile.path or 'profile'}: no `exactness` section, so no speed can be reported for this "
            "configuration; add one (README: exactness) or measure anyway with `loadgate run --unverified`")
    profile.check_files(("target", "workload") if unverified else ("target", "workload", "exactness"))
    check_source(profile)  # every line or row of a trace or dataset, before the exactness check
    if profile.load.distributed is not None:  # the cluster reached and big enough, before anything starts
        from loadgate.load.distributed import connect, refuse_literal_secrets

        refuse_literal_secrets(profile)
        connect(profile.load.distributed)


def salted(profile: Profile) -> Profile:
    """The profile with this run's prompt salt (`workload.prompt_salt`): drawn here when the profile
    leaves it unset and the prompts are fresh, so each run sends prompts no earlier run left in the
    engine's prefix cache; meta.json's profile keeps it, so the run's prompts can be sent again."""
    w = profile.workload
    if w.cache != "fresh" or w.prompt_salt is not None:
        return profile
    return dataclasses.replace(profile, workload=dataclasses.replace(w, prompt_salt=random.SystemRandom().getrandbits(32)))


def run(profile: Profile, *, unverified: bool = False, say: Say = _quiet,
        progress: ProgressFactory = no_progress) -> RunResult:
    """`loadgate run`: fingerprint -> exactness check -> attestation -> performance -> fingerprint
    again (for both engines, in interleaved runs, with an `ab` section) -> verdict."""
    _preflight(profile, unverified)
    if profile.ab is not None:
        return run_ab(profile, unverified=unverified, say=say, progress=progress)
    profile = salted(profile)

    async def go(run_dir: Path) -> None:
        async with interruptible(profile.load.grace_s) as intr:
            async with open_engine(profile) as e:
                tokens = await prepare_tokens(profile, e)
                async with gated(e, run_dir, unverified, say) as token:
                    if isinstance(token, Attestation):
                        say("")
                    await measure(token, e, run_dir, tokens, progress=progress, stop=intr.flag)
        _stopped_by(intr, run_dir)

    with run_folder(profile) as run_dir:
        run_async(go(run_dir))
        return finished(run_dir)


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


def run_ab(profile: Profile, *, unverified: bool = False, say: Say = _quiet,
           progress: ProgressFactory = no_progress) -> RunResult:
    """Check both engines, then make the interleaved runs (A: baseline, B: candidate); ab.json
    and one ordinary run folder per run, then the verdict of the comparison."""
    profile = salted(profile)
    assert profile.ab is not None
    from loadgate.analysis.ab import SIDES

    sides = {s: side_profile(profile, s) for s in SIDES}
    order = run_order(profile.ab.pairs, profile.ab.order_seed)

    async def go(run_dir: Path) -> None:
        dump_json(run_dir / "ab.json", {"pairs": profile.ab.pairs if profile.ab else 0, "order": order,
                                        "sides": SIDES, "unverified": unverified,
                                        "ab": profile.to_json()["ab"] or {}})  # (its baseline's credential headers masked)
        async with interruptible(profile.load.grace_s) as intr:
            await ab_runs(run_dir, intr)
        _stopped_by(intr, run_dir)

    async def ab_runs(run_dir: Path, intr: Interruption) -> None:
        async with open_engine(sides["A"]) as ea, open_engine(sides["B"]) as eb, \
                contextlib.AsyncExitStack() as stack:
            engines = {"A": ea, "B": eb}
            tokens = {s: await prepare_tokens(sides[s], e) for s, e in engines.items()}
            gate_tokens: dict[str, Token] = {}
            for s, e in engines.items():
                d = run_dir / f"check-{SIDES[s]}"
                if not unverified:
                    d.mkdir()
                    say(f"\n== {SIDES[s]} ({e.base})")
                gate_tokens[s] = await stack.enter_async_context(gated(e, d, unverified, say))
            say(f"\nruns, in this order: {' '.join(order)} (A = baseline, B = candidate)")
            for name in order:
                if intr.flag.is_set():
                    break
                s = name[0]
                d = run_dir / name
                d.mkdir()
                await measure(gate_tokens[s], engines[s], d, tokens[s], progress=progress,
                              extra_meta={"ab_side": SIDES[s]}, stop=intr.flag,
                              round_base=int(name[1:]) * ROUNDS_PER_PAIR)  # both sides of a pair alike

    with run_folder(profile) as run_dir:
        run_async(go(run_dir))
        return finished(run_dir)


# --- the other commands -------------------------------------------------------------------------

def check(profile: Profile, say: Say = _quiet) -> CheckOutcome:
    """`loadgate check`: the exactness check alone (report to `say`); raises ExactnessFailed (exit
    10) when it fails."""
    profile.check_files(("target", "exactness"))
    check_memory_budget(profile)

    async def go(run_dir: Path) -> CheckOutcome:
        async with open_engine(profile) as e:
            return await check_engine(e, run_dir)

    with run_folder(profile) as run_dir:
        outcome = run_async(go(run_dir))
        say(report_text(outcome.report))
        policy.raise_if_failed(outcome)
        write_state(run_dir, "final", 0)
    return outcome


def capture_baseline(profile: Profile, out: Path) -> Path:
    """`loadgate baseline`: capture the profile's target as a baseline file; returns its path."""
    corpus = corpus_of(profile)

    async def go() -> bl.Baseline:
        async with open_engine(profile) as e:
            return await capture(e, corpus, profile.name)

    return bl.save(run_async(go()), out)


def _saved_fingerprint(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as err:
        raise UsageError(f"{path}: cannot read a fingerprint: {err}") from None
    if isinstance(doc, dict) and isinstance(doc.get("fingerprint"), dict):
        return doc["fingerprint"]  # type: ignore[no-any-return]
    if isinstance(doc, dict) and {"engine", "declared", "request"} <= doc.keys():
        return doc
    raise UsageError(f"{path}: holds no fingerprint (fingerprint.json, attestation.json or a baseline file)")


def fingerprint(profile: Profile, against: str | None) -> str:
    """`loadgate fingerprint`: the canonical document and hash, or its diff against a saved one
    (FingerprintsDiffer, exit 12, carrying the fields that differ)."""
    async def go() -> tuple[dict[str, Any], str]:
        async with open_engine(profile) as e:
            return await fingerprint_of(e)

    fp, h = run_async(go())
    if against is None:
        return orjson.dumps({"fingerprint_hash": h, "fingerprint": fp}, option=orjson.OPT_INDENT_2 |
                            orjson.OPT_SORT_KEYS).decode()
    old = _saved_fingerprint(Path(against))
    req = old.get("request") if isinstance(old.get("request"), dict) else None
    if req is not None:  # saved before the fingerprint named the API and left the check's scenarios out
        req = {k: v for k, v in req.items() if k != "check_scenarios"}
        req.setdefault("api", (fp.get("request") or {}).get("api"))
        old = {**old, "request": req}
    changes = diff(old, fp)
    if not changes:
        return f"identical fingerprints ({h})"
    raise FingerprintsDiffer(fingerprint_diff_text(against, fingerprint_hash(old), h, changes))


def replay(bundle: str, endpoint: str | None, times: int, say: Say = _quiet, concurrency: int = 1) -> None:
    """`loadgate replay`: re-send a bundle's request (alone, or with `concurrency` - 1 companions);
    raises ExactnessFailed if any answer differs."""
    doc = load_bundle(Path(bundle))
    results = run_async(send_again(doc, endpoint, times, concurrency))
    seen_with = int(doc["scenario"]["in_flight_when_sent"])
    how = "alone" if concurrency == 1 else f"with {concurrency - 1} companion request(s) in flight"
    say(f"replaying {doc['case']} ({doc['scenario']['name']}, {seen_with} in flight "
        f"when it diverged at token {doc['comparison']['first_divergence'] if doc.get('comparison') else 'n/a'}) "
        f"{how}, {times} time(s):")
    bad = 0
    for r in results:
        if "error" in r:
            bad += 1
            say(f"  run {r['run']}: request failed: {r['error']}")
            continue
        bad += not r["token_exact"]
        where = ("same tokens as the baseline" if r["first_divergence"] is None else
                 f"diverges at token {r['first_divergence']} ({r['baseline_token']} -> {r['candidate_token']}, "
                 f"baseline top-2 gap {r['baseline_top2_gap']})")
        say(f"  run {r['run']}: {r['verdict']}: {where}")
    if results and all("error" in r for r in results):
        raise EngineError(f"every replay request failed ({results[0]['error']}): nothing was compared")
    if not bad and doc.get("comparison") and seen_with > concurrency:
        say(f"not reproduced {how}: the divergence was seen with {seen_with} requests in flight; it may need "
            f"others beside it (replay with --concurrency {seen_with})")
    if bad:
        raise ExactnessFailed(f"{bad} of {times} replays differ from the baseline's tokens")

