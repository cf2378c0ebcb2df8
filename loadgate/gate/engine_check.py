"""The exactness check against a live engine: resolve the baseline (a file, or the simulator's
reference output), fingerprint the engine, replay the corpus in every scenario, judge each sequence
under the contract, write exactness.json, the reproducer bundles and, when it passed, the
attestation document (`loadgate.gate.attestation`). Also `capture`, which writes a baseline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadgate.config.profile import Exactness, Profile, SamplingContract
from loadgate.documents import BaselineRef, CorpusRef, Fingerprint, FingerprintFile
from loadgate.engine.adapters import context_length as family_context_length
from loadgate.engine.adapters.base import Sampling
from loadgate.errors import EngineError, UsageError
from loadgate.exactness import baseline as bl
from loadgate.exactness.bundle import session_doc, write_bundles
from loadgate.exactness.check import CheckResult, run_check, speculation_declared
from loadgate.exactness.corpus import Corpus, default_corpus_path, load_corpus
from loadgate.exactness.replay import CaseSender
from loadgate.exactness.result import result_doc
from loadgate.gate.attestation import attestation_doc
from loadgate.gate.fingerprint import build, fingerprint_hash, introspect
from loadgate.gate.protocol import run_protocol
from loadgate.gate.replicas import check_engine_of, replica_fingerprints, replicas_doc, require_equal
from loadgate.gate.sampling import baseline_samples, distribution_preserving, seed_claim, seeded_replay
from loadgate.jsonutil import dump_json
from loadgate.load.target import target_spec
from loadgate.net.connect import Engine, open_engine, reference_target
from loadgate.net.http import empty_prefix_cache
from loadgate.net.scrape import scrape


def exactness_of(profile: Profile) -> Exactness:
    return profile.exactness or Exactness()


def request_part(ex: Exactness, api: str, extra_body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request side of the fingerprint: the API the requests go through (its routes follow from
    it), every sampling parameter sent, and `target.extra_body` as the profile writes it (`${NAME}`
    unexpanded) when it has any key: a body key can change what the engine does with a prompt
    (`chat_template_kwargs`), so a baseline captured with other keys does not match. The check's own
    scenarios are not part of it: they describe the experiment, not the engine, and a baseline's
    fingerprint and a candidate's compare engine to engine (the scenarios are in exactness.json and
    the attestation)."""
    out = {"api": api, "sampling": dataclasses.asdict(Sampling(seed=ex.seed)), "logprobs": ex.logprobs}
    if extra_body:
        out["extra_body"] = extra_body
    return out


async def fingerprint_of(e: Engine, when: str = "before anything was measured") -> tuple[dict[str, Any], str]:
    """The engine's fingerprint and hash; with target.endpoints, the replicas' one fingerprint
    (ExactnessNotEstablished, naming the odd replica, when they differ: `loadgate.gate.replicas`)."""
    doc, h, _ = await fingerprints_of(e, when)
    return doc, h


async def fingerprints_of(e: Engine, when: str) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """`fingerprint_of`, and each replica's URL and hash (`replicas_doc`; None for one endpoint)."""
    t = e.profile.target
    request = request_part(exactness_of(e.profile), t.api, t.extra_body)
    if t.replicas:
        fps = await replica_fingerprints(e, request)
        require_equal(fps, when)
        return fps[0].doc, fps[0].hash, replicas_doc(fps)
    doc = build(await introspect(e.session, e.base, e.metrics_url), t.declared, request)
    return doc, fingerprint_hash(doc), None


def corpus_of(profile: Profile) -> Corpus:
    ex = exactness_of(profile)
    if ex.corpus is None:
        return load_corpus(default_corpus_path())
    return load_corpus(profile.resolve(ex.corpus))


def sender_for(e: Engine, ex: Exactness) -> CaseSender:
    spec = target_spec(e.profile, e.settings, e.base, e.model, timeout_s=ex.timeout_s)
    return CaseSender(spec, e.session, logprobs=ex.logprobs, seed=ex.seed)


async def capture(e: Engine, corpus: Corpus, name: str) -> bl.Baseline:
    """Replay the corpus solo on `e` (long cases included) and build a baseline from it; with
    `exactness.sampling.distribution_preserving`, the baseline's samples too."""
    ex = exactness_of(e.profile)
    doc, h = await fingerprint_of(e)
    sender = sender_for(check_engine_of(e), ex)  # with target.endpoints: on replica 0, as the check
    try:
        observed = await sender.send_all(list(corpus.cases), 1, f"baseline-{name}")
        samples = (await baseline_samples(sender, corpus, ex.sampling, f"baseline-{name}-samples")
                   if ex.sampling is not None and ex.sampling.distribution_preserving else None)
    finally:
        sender.close()
    return bl.build(observed, name=name, fingerprint=doc, fingerprint_hash=h, corpus_sha256=corpus.sha256,
                    corpus_path=str(corpus.path), sampling=samples)


async def sampling_contracts(sender: CaseSender, corpus: Corpus, cfg: SamplingContract, b: bl.Baseline,
                             fp: dict[str, Any], tag: str) -> dict[str, Any]:
    """The sampling contracts the profile asks for, against the candidate behind `sender`."""
    out: dict[str, Any] = {}
    if cfg.seeded_replay:
        out["seeded_replay"] = await seeded_replay(sender, corpus, cfg, tag, seed_claim(fp))
    if cfg.distribution_preserving:
        out["distribution_preserving"] = await distribution_preserving(sender, corpus, cfg, b.doc.get("sampling"),
                                                                       f"{tag}-samples")
    return out


async def resolve_baseline(profile: Profile, corpus: Corpus) -> bl.Baseline:
    ex = exactness_of(profile)
    if ex.baseline == "sim-reference":
        ref = reference_target(profile)
        async with open_engine(ref) as e:
            b = await capture(e, corpus, "sim-reference")
        bl.save(b, Path(profile.output.dir) / "baselines")
        return b
    b = bl.load(profile.resolve(ex.baseline))
    if b.corpus_sha256 != corpus.sha256:
        raise UsageError(f"{b.path}: captured with another corpus (sha256 {b.corpus_sha256[:12]}…) than the "
                         f"profile's ({corpus.path}, {corpus.sha256[:12]}…): capture the baseline again")
    return b


def refuse_other_routes(b: bl.Baseline, corpus: Corpus, sender: CaseSender, api: str) -> None:
    """A baseline answers through the routes it was captured on: a candidate that would send a case
    to another route (a chat API for completion cases, another engine's native route) compares
    nothing that means anything, so it is refused in one line before anything is sent."""
    for case in corpus.cases:
        rec = b.cases.get(case.id)
        if not isinstance(rec, dict) or not rec.get("route"):
            continue
        was, now = urlsplit(str(rec["route"])).path, urlsplit(sender.targets[case.kind].url).path
        if not (was.endswith(now) or now.endswith(was)):  # a gateway's path prefix is the same route
            captured = ((b.doc.get("fingerprint") or {}).get("request") or {}).get("api")
            through = f"through api {captured} " if captured else ""
            raise UsageError(f"{b.path or 'baseline'}: captured {through}on {was}, but this profile (target.api {api}) "
                             f"sends case {case.id} to {now}: capture a baseline through this API, or set target.api "
                             "to the baseline's")


@dataclass
class CheckOutcome:
    result: CheckResult
    report: dict[str, Any]
    fingerprint: dict[str, Any]
    fingerprint_hash: str
    attestation: dict[str, Any] | None


async def reset_or_none(e: Engine) -> str | None:
    """Empty the engine's prefix cache before a scenario; None where it has no route (the check goes
    on: each scenario's hits are reported, so a warm scenario shows)."""
    try:
        return await empty_prefix_cache(e.session, e.base, e.profile.target.api)
    except EngineError:
        return None


async def check_engine(e: Engine, run_dir: Path) -> CheckOutcome:
    """Fingerprint, baseline, check, bundles, attestation; writes exactness.json into run_dir."""
    profile = e.profile
    ex = exactness_of(profile)
    corpus = corpus_of(profile)
    b = await resolve_baseline(profile, corpus)
    fp, fp_hash, replicas = await fingerprints_of(e, "before anything was measured")
    e = check_engine_of(e)  # with target.endpoints: the check runs once, on replica 0
    spec_on, source = speculation_declared(fp)
    required = spec_on if ex.speculation == "auto" else ex.speculation == "on"
    contract = ex.contract
    max_len = context_length(fp)
    sender = sender_for(e, ex)
    try:
        refuse_other_routes(b, corpus, sender, profile.target.api)
        result = await run_check(sender, corpus, b, contract, ex.scenarios, tag=f"{run_dir.name}-check",
                                 max_len=max_len, speculation_required=required, speculation_source=source,
                                 scrape=lambda: scrape(e.session, e.metrics_url),
                                 reset=(lambda: reset_or_none(e)) if ex.scenarios.reset_prefix_cache else None)
        if ex.protocol is not None:
            checks = await run_protocol(sender, e.session, corpus, ex.protocol, tag=run_dir.name,
                                        scrape=lambda: scrape(e.session, e.metrics_url), max_len=max_len,
                                        fingerprint=fp)
            result.add_protocol([c.to_json() for c in checks])
        if ex.sampling is not None:
            result.add_sampling(await sampling_contracts(sender, corpus, ex.sampling, b, fp, run_dir.name))
    finally:
        sender.close()
    bundles = write_bundles(result, b, run_dir / "divergences", fingerprint=fp, fingerprint_hash=fp_hash,
                            session=session_doc(profile.target))
    doc = dataclasses.replace(
        result_doc(result), fingerprint_hash=fp_hash,
        baseline=BaselineRef(str(b.path or ""), b.sha256, b.fingerprint_hash),
        corpus=CorpusRef(str(corpus.path), corpus.sha256, len(corpus.cases)), bundles=[str(p) for p in bundles])
    report = doc.to_json()
    att = attestation_doc(fp, fp_hash, corpus, b, result, replicas) if result.passed else None
    dump_json(run_dir / "exactness.json", report)
    dump_json(run_dir / "fingerprint.json", FingerprintFile(fp_hash, Fingerprint.from_json(fp, "fingerprint")).to_json())
    if att is not None:
        dump_json(run_dir / "attestation.json", att)
    return CheckOutcome(result, report, fp, fp_hash, att)


def context_length(fp: dict[str, Any]) -> int | None:
    """The longest context one request may use (vLLM's `max_model_len`, SGLang's `context_length`,
    llama-server's per-slot `n_ctx`: each family's reading); None when the engine does not say."""
    return family_context_length(fp.get("engine") or {})
