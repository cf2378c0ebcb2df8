"""The gate: fingerprint -> exactness check -> attestation -> performance -> fingerprint again.

`loadgate run` goes through every step; `loadgate check` stops after the attestation;
`loadgate baseline` captures a baseline file. The performance phase starts only with a passing
attestation whose fingerprint hash equals the engine's fingerprint read just before measuring,
and the fingerprint is read once more afterwards: an engine restarted with other flags in
between voids the result (exit code 11, naming the fields that changed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from loadgate.config.profile import Exactness, Profile
from loadgate.engine.adapters.base import Sampling
from loadgate.engine.servermetrics import scrape
from loadgate.errors import EngineError, ExactnessFailed, ExactnessNotEstablished, UsageError
from loadgate.exactness import baseline as bl
from loadgate.exactness.bundle import write_bundles
from loadgate.exactness.check import CheckResult, run_check, speculation_declared
from loadgate.exactness.contract import Contract
from loadgate.exactness.corpus import Corpus, default_corpus_path, load_corpus
from loadgate.exactness.replay import CaseSender
from loadgate.exactness.report import render, result_json
from loadgate.gate.fingerprint import build, describe_diff, diff, fingerprint_hash, introspect
from loadgate.jsonutil import dump_json
from loadgate.load.attack import TargetSpec, make_session
from loadgate.runner import discover_model, engine_url
from loadgate.version import __version__


@dataclass
class Engine:
    base: str
    session: aiohttp.ClientSession
    model: str
    profile: Profile

    @property
    def metrics_url(self) -> str:
        return self.profile.metrics_url(self.base)


@contextlib.asynccontextmanager
async def open_engine(profile: Profile) -> AsyncIterator[Engine]:
    async with engine_url(profile) as base, make_session(profile.target.headers) as session:
        yield Engine(base, session, profile.target.model or await discover_model(session, base), profile)


def exactness_of(profile: Profile) -> Exactness:
    return profile.exactness or Exactness()


def request_part(ex: Exactness) -> dict[str, Any]:
    """The request side of the fingerprint: every sampling parameter sent while checking, and the
    concurrency the check used."""
    return {"sampling": dataclasses.asdict(Sampling(seed=ex.seed)), "logprobs": ex.logprobs,
            "check_scenarios": dataclasses.asdict(ex.scenarios)}


async def fingerprint_of(e: Engine) -> tuple[dict[str, Any], str]:
    intro = await introspect(e.session, e.base, e.metrics_url)
    doc = build(intro, e.profile.target.declared, request_part(exactness_of(e.profile)))
    return doc, fingerprint_hash(doc)


def corpus_of(profile: Profile) -> Corpus:
    ex = exactness_of(profile)
    if ex.corpus is None:
        return load_corpus(default_corpus_path())
    return load_corpus(profile.resolve(ex.corpus))


def sender_for(e: Engine, ex: Exactness) -> CaseSender:
    spec = TargetSpec(e.base, e.profile.target.api, e.model, ex.timeout_s, headers=dict(e.profile.target.headers))
    return CaseSender(spec, e.session, logprobs=ex.logprobs, seed=ex.seed)


async def capture(e: Engine, corpus: Corpus, name: str) -> bl.Baseline:
    """Replay the corpus solo on `e` (long cases included) and build a baseline from it."""
    ex = exactness_of(e.profile)
    doc, h = await fingerprint_of(e)
    sender = sender_for(e, ex)
    try:
        observed = await sender.send_all(list(corpus.cases), 1, f"baseline-{name}")
    finally:
        sender.close()
    return bl.build(observed, name=name, fingerprint=doc, fingerprint_hash=h, corpus_sha256=corpus.sha256,
                    corpus_path=str(corpus.path))


def reference_profile(profile: Profile) -> Profile:
    """The simulator's reference configuration for `baseline: sim-reference`: the same model
    (seed, vocabulary, near-ties, context) with speculation, divergence knobs and faults off."""
    sim = profile.target.sim
    ref = dataclasses.replace(sim, speculative=dataclasses.replace(sim.speculative, method="none"),
                              divergence=type(sim.divergence)(), faults=type(sim.faults)(),
                              decode_step_us=200.0, decode_us_per_seq=10.0, prefill_us_per_token=1.0)
    return dataclasses.replace(profile, target=dataclasses.replace(profile.target, sim=ref, declared={}))


async def resolve_baseline(profile: Profile, corpus: Corpus) -> bl.Baseline:
    ex = exactness_of(profile)
    if ex.baseline == "sim-reference":
        if profile.target.endpoint != "embedded":
            raise UsageError("exactness.baseline: 'sim-reference' needs target.endpoint: embedded; for a real engine "
                             "write a baseline with `loadgate baseline PROFILE` and name its file")
        ref = reference_profile(profile)
        async with open_engine(ref) as e:
            b = await capture(e, corpus, "sim-reference")
        bl.save(b, Path(profile.output.dir) / "baselines")
        return b
    b = bl.load(profile.resolve(ex.baseline))
    if b.corpus_sha256 != corpus.sha256:
        raise UsageError(f"{b.path}: captured with another corpus (sha256 {b.corpus_sha256[:12]}…) than the "
                         f"profile's ({corpus.path}, {corpus.sha256[:12]}…): capture the baseline again")
    return b


def attestation(fp: dict[str, Any], fp_hash: str, corpus: Corpus, b: bl.Baseline, r: CheckResult) -> dict[str, Any]:
    doc = {
        "kind": "loadgate exactness attestation", "loadgate": __version__,
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "fingerprint_hash": fp_hash, "fingerprint": fp, "corpus_sha256": corpus.sha256, "corpus": str(corpus.path),
        "baseline_sha256": b.sha256, "baseline_fingerprint_hash": b.fingerprint_hash,
        "contract": {"tier": r.contract.tier, "tolerance": r.contract.tolerance, "gap": r.contract.gap,
                     "words": r.contract.words()},
        "scenarios": r.scenarios, "verdicts": r.counts(),
    }
    doc["attestation_sha256"] = hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return doc


@dataclass
class CheckOutcome:
    result: CheckResult
    report: dict[str, Any]
    fingerprint: dict[str, Any]
    fingerprint_hash: str
    attestation: dict[str, Any] | None


async def check_engine(e: Engine, run_dir: Path) -> CheckOutcome:
    """Fingerprint, baseline, check, bundles, attestation; writes exactness.json into run_dir."""
    profile = e.profile
    ex = exactness_of(profile)
    corpus = corpus_of(profile)
    b = await resolve_baseline(profile, corpus)
    fp, fp_hash = await fingerprint_of(e)
    spec_on, source = speculation_declared(fp)
    required = spec_on if ex.speculation == "auto" else ex.speculation == "on"
    c = ex.contract
    contract = Contract(c.tier, c.tolerance, c.gap)
    max_len = context_length(fp)
    sender = sender_for(e, ex)
    try:
        result = await run_check(sender, corpus, b, contract, ex.scenarios, tag=f"{run_dir.name}-check",
                                 max_len=max_len, speculation_required=required, speculation_source=source,
                                 scrape=lambda: scrape(e.session, e.metrics_url))
    finally:
        sender.close()
    report = result_json(result)
    report.update({"fingerprint_hash": fp_hash, "baseline": {"file": str(b.path or ""), "sha256": b.sha256,
                                                             "fingerprint_hash": b.fingerprint_hash},
                   "corpus": {"path": str(corpus.path), "sha256": corpus.sha256, "cases": len(corpus.cases)}})
    report["bundles"] = [str(p) for p in write_bundles(result, b, run_dir / "divergences", fingerprint=fp,
                                                       fingerprint_hash=fp_hash)]
    att = attestation(fp, fp_hash, corpus, b, result) if result.passed else None
    dump_json(run_dir / "exactness.json", report)
    dump_json(run_dir / "fingerprint.json", {"fingerprint_hash": fp_hash, "fingerprint": fp})
    if att is not None:
        dump_json(run_dir / "attestation.json", att)
    return CheckOutcome(result, report, fp, fp_hash, att)


def _show_path(p: str) -> str:
    try:
        return str(Path(p).resolve().relative_to(Path.cwd()))
    except ValueError:
        return p


def context_length(fp: dict[str, Any]) -> int | None:
    """The longest context one request may use: vLLM's `max_model_len`, SGLang's `context_length`,
    llama-server's per-slot `n_ctx`; None when the engine does not say."""
    eng = fp.get("engine") or {}
    for m in eng.get("models") or []:
        if m.get("max_model_len"):
            return int(m["max_model_len"])
    info = eng.get("server_info") or {}
    if isinstance(info.get("context_length"), int):
        return int(info["context_length"])
    n_ctx = ((eng.get("props") or {}).get("default_generation_settings") or {}).get("n_ctx")
    return int(n_ctx) if isinstance(n_ctx, int) and n_ctx > 0 else None


def header(o: CheckOutcome) -> str:
    r = o.report
    return (f"candidate fingerprint {o.fingerprint_hash[:16]} · baseline "
            f"{_show_path(r['baseline']['file']) if r['baseline']['file'] else 'sim-reference'} "
            f"(fingerprint {r['baseline']['fingerprint_hash'][:16]}) · corpus {_show_path(r['corpus']['path'])} "
            f"({r['corpus']['cases']} cases, sha256 {r['corpus']['sha256'][:12]})")


def print_check(o: CheckOutcome) -> None:
    print(render(o.report, header=header(o)))
    if o.report["bundles"]:
        print(f"reproducers: {len(o.report['bundles'])} bundle(s) in {Path(o.report['bundles'][0]).parent}/ "
              "(`loadgate replay BUNDLE` re-runs one)")


def raise_if_failed(o: CheckOutcome) -> None:
    if not o.result.passed:
        raise ExactnessFailed("exactness failed: " + "; ".join(o.result.reasons) + " (see the report above)")


async def verify_fingerprint(e: Engine, att: dict[str, Any], when: str) -> None:
    fp, h = await fingerprint_of(e)
    if h != att["fingerprint_hash"]:
        changes = diff(att["fingerprint"], fp)
        raise ExactnessNotEstablished(
            f"the engine's configuration fingerprint changed {when} ({h[:16]} vs attested "
            f"{att['fingerprint_hash'][:16]}): {describe_diff(changes)}; the speed of this configuration is unproven")


def run_check_only(profile: Profile) -> None:
    """`loadgate check`: the check alone; raises ExactnessFailed (exit 10) when it fails."""
    from loadgate.runner import run_async, run_folder

    profile.check_files(("exactness",))

    async def go() -> CheckOutcome:
        with run_folder(profile) as run_dir:
            async with open_engine(profile) as e:
                return await check_engine(e, run_dir)

    outcome = run_async(go())
    print_check(outcome)
    raise_if_failed(outcome)


def run_baseline(profile: Profile, out: Path) -> Path:
    """`loadgate baseline`: capture the profile's target as a baseline file; returns its path."""
    from loadgate.runner import run_async

    corpus = corpus_of(profile)

    async def go() -> bl.Baseline:
        async with open_engine(profile) as e:
            return await capture(e, corpus, profile.name)

    b = run_async(go())
    return bl.save(b, out)


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


def show_fingerprint(profile: Profile, against: str | None) -> str:
    """`loadgate fingerprint`: the canonical document and hash, or its diff against a saved one."""
    from loadgate.runner import run_async

    async def go() -> tuple[dict[str, Any], str]:
        async with open_engine(profile) as e:
            return await fingerprint_of(e)

    fp, h = run_async(go())
    if against is None:
        return orjson.dumps({"fingerprint_hash": h, "fingerprint": fp}, option=orjson.OPT_INDENT_2 |
                            orjson.OPT_SORT_KEYS).decode()
    old = _saved_fingerprint(Path(against))
    changes = diff(old, fp)
    if not changes:
        return f"identical fingerprints ({h})"
    lines = [f"{len(changes)} field(s) differ ({against} -> {fingerprint_hash(old)[:16]} vs now {h[:16]}):"]
    lines += [f"  {k}: {a!r} -> {b!r}" for k, a, b in changes]
    return "\n".join(lines)


def attestation_meta(att: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a run's meta.json keeps of the attestation that let it measure."""
    if att is None:
        return None
    return {k: att[k] for k in ("fingerprint_hash", "corpus_sha256", "baseline_sha256", "contract", "scenarios",
                                "verdicts", "attestation_sha256", "time")}


def run_replay(bundle: str, endpoint: str | None, times: int) -> None:
    """`loadgate replay`: re-send a bundle's request; raises ExactnessFailed if any answer differs."""
    from loadgate.exactness.bundle import load_bundle, replay
    from loadgate.runner import run_async

    doc = load_bundle(Path(bundle))
    results = run_async(replay(doc, endpoint, times))
    print(f"replaying {doc['case']} ({doc['scenario']['name']}, {doc['scenario']['in_flight_when_sent']} in flight "
          f"when it diverged at token {doc['comparison']['first_divergence'] if doc.get('comparison') else 'n/a'}) "
          f"alone, {times} time(s):")
    bad = 0
    for r in results:
        if "error" in r:
            bad += 1
            print(f"  run {r['run']}: request failed: {r['error']}")
            continue
        bad += not r["token_exact"]
        where = ("same tokens as the baseline" if r["first_divergence"] is None else
                 f"diverges at token {r['first_divergence']} ({r['baseline_token']} -> {r['candidate_token']}, "
                 f"baseline top-2 gap {r['baseline_top2_gap']})")
        print(f"  run {r['run']}: {r['verdict']}: {where}")
    if results and all("error" in r for r in results):
        raise EngineError(f"every replay request failed ({results[0]['error']}): nothing was compared")
    if bad:
        raise ExactnessFailed(f"{bad} of {times} replays differ from the baseline's tokens")
