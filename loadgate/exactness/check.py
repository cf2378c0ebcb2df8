"""The exactness check: replay the corpus in each scenario and judge every sequence.

Scenarios (profile `exactness.scenarios`):
  solo        each non-long case alone, one request at a time
  concurrent  every non-long case with N requests in flight
  repeat      R requests cycling through the non-long cases, `repeat_batch` in flight (drift
              between runs of the same request)
  long        the cases tagged `long`, one at a time
Each sequence is compared with the baseline position by position (`compare`), given a verdict,
and judged under the contract. The check passes when every sequence passes, no request failed,
and, when speculation is on, the engine showed that it ran.

Only compared tokens can fail a check. A request that failed (a 503, a cut connection, a timeout)
compared nothing: it is sent again, at most `RETRIES` times, in its scenario's setting; one that
still fails leaves the check *not established* (exit 11, naming the cases), never failed (10).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from loadgate.analysis.specdec import draft_delta, prefix_cache
from loadgate.config.contract import Contract, Verdict
from loadgate.config.profile import Scenarios
from loadgate.engine.adapters import family_for, identify
from loadgate.exactness.baseline import Baseline, seq_output
from loadgate.exactness.compare import Comparison, compare
from loadgate.exactness.contract import passes, verdict
from loadgate.exactness.corpus import Case, Corpus
from loadgate.exactness.drift import scenario_drift, unstable
from loadgate.exactness.outcome import RETRIES
from loadgate.exactness.replay import CaseSender, Observed
from loadgate.snapshot import Snapshot


@dataclass
class SeqResult:
    scenario: str
    case_id: str
    order: int
    in_flight: int
    verdict: Verdict | None  # None: the request failed
    passed: bool
    why: str | None
    comparison: Comparison | None
    observed: Observed = field(repr=False)
    in_flight_at_divergence: int | None = None  # requests in flight while the diverging token arrived


@dataclass
class CheckResult:
    contract: Contract
    scenarios: dict[str, Any]
    sequences: list[SeqResult]
    speculation: dict[str, Any]
    skipped: list[str]
    passed: bool = False
    reasons: list[str] = field(default_factory=list)  # why it failed: compared tokens, speculation
    not_established: list[str] = field(default_factory=list)  # "scenario/case" whose requests kept failing
    retried: int = 0  # requests sent again after a failure
    protocol: list[dict[str, Any]] = field(default_factory=list)  # gate.protocol checks, as JSON
    sampling: dict[str, Any] = field(default_factory=dict)  # gate.sampling contracts, by name
    drift: dict[str, Any] = field(default_factory=dict)  # scenario -> drift.scenario_drift (prompts sent more than once)

    def add_protocol(self, checks: list[dict[str, Any]]) -> None:
        """The protocol checks' results: a failed one fails the check, one not established leaves
        it not established."""
        self.protocol = checks
        for c in checks:
            if c["status"] == "failed":
                self.reasons.append(f"protocol {c['name']}: {c['detail']}")
            elif c["status"] == "not established":
                self.not_established.append(f"protocol/{c['name']}")
        self.passed = not self.reasons and not self.not_established

    def add_sampling(self, results: dict[str, Any]) -> None:
        """The sampling contracts' results (`seeded_replay`, `distribution_preserving`)."""
        self.sampling = results
        sr = results.get("seeded_replay")
        if sr is not None:
            if not sr["cases"]:
                self.not_established.append("sampling/seeded-replay: the corpus has no short case to replay")
            if sr["differ"]:
                first = sr["differ"][0]
                self.reasons.append(f"seeded-replay: {len(sr['differ'])} of {sr['cases']} cases gave other ids with "
                                    f"the same seed in {sr.get('replays', 2)} sends (first: {first['case']} at token "
                                    f"{first['first_divergence']}; {sr['engine_seeds']})")
            if sr["failed_requests"]:
                self.not_established.append("sampling/seeded-replay")
        dp = results.get("distribution_preserving")
        if dp is not None:
            if dp.get("prefixes") and not dp["passed"]:  # a rejection stands whatever else failed
                bad = [p for p in dp["prefixes"] if p["rejected"]]
                self.reasons.append(
                    f"distribution-preserving: {len(bad)} of {len(dp['prefixes'])} prefixes sample another "
                    f"distribution than the baseline at temperature {dp['temperature']:g} (Holm, alpha "
                    f"{dp['alpha']:g}; first: {bad[0]['case']}, p = {bad[0]['p_value']:.2g}, observed TV "
                    f"{bad[0]['observed_tv']:.3f})")
            elif not dp.get("established", True):
                self.not_established.append(f"sampling/distribution-preserving: {dp.get('reason')}")
        self.passed = not self.reasons and not self.not_established

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.sequences:
            key = s.verdict or ("failed request" if s.observed.decoded.error is not None else "not compared")
            out[key] = out.get(key, 0) + 1
        return out

    def positions(self) -> dict[str, int]:
        """Positions compared before each first divergence, on logprob values or on ids only."""
        c = [s.comparison for s in self.sequences if s.comparison is not None]
        return {"compared": sum(x.positions_compared for x in c), "logprob": sum(x.logprob_positions for x in c),
                "ids_only": sum(x.ids_only_positions for x in c),
                "placeholders": sum(len(s.observed.decoded.placeholder_positions) for s in self.sequences)}


def plan_scenarios(corpus: Corpus, sc: Scenarios, max_len: int | None,
                   prompt_tokens: dict[str, int]) -> tuple[list[tuple[str, int, list[Case]]], list[str]]:
    """(scenario name, requests in flight, cases in send order) for each scenario that is on, and
    the ids of cases skipped because prompt + max_tokens cannot fit the engine's context."""
    skipped: list[str] = []

    def fits(cases: tuple[Case, ...]) -> list[Case]:
        ok = []
        for c in cases:
            est = prompt_tokens.get(c.id, 0) + c.max_tokens
            if max_len is not None and est > max_len:
                skipped.append(c.id)
            else:
                ok.append(c)
        return ok

    short, long_ = fits(corpus.select(long=False)), fits(corpus.select(long=True))
    out: list[tuple[str, int, list[Case]]] = []
    if sc.solo:
        out.append(("solo", 1, short))
    if sc.concurrent:
        out.append((f"concurrent:{sc.concurrent}", sc.concurrent, short))
    if sc.repeat and short:
        out.append((f"repeat:{sc.repeat}x{sc.repeat_batch}", sc.repeat_batch,
                    [short[k % len(short)] for k in range(sc.repeat)]))
    if sc.long:
        out.append(("long", 1, long_))
    return out, sorted(set(skipped))


def speculation_declared(fp: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether the fingerprint says speculative decoding is on, and where it says so."""
    declared = fp.get("declared") or {}
    for key in ("speculative", "speculative_method", "speculation"):
        if key in declared:
            on = str(declared[key]).strip().lower() not in ("", "none", "off", "false", "no", "0")
            return on, f"declared.{key} = {declared[key]!r}"
    engine = fp.get("engine") or {}
    family = identify(engine)
    said = family.speculation(engine) if family is not None else None
    if said is not None:
        return said
    return None, "the fingerprint does not say (declare `speculative` under target.declared)"


def speculation_evidence(observed: list[Observed], before: Snapshot | None, after: Snapshot | None,
                         api: str | None = None) -> dict[str, Any]:
    with_steps = sum(1 for o in observed if o.decoded.spec is not None and any(
        (v or 0) > 0 for v in (o.decoded.spec.verify_steps, o.decoded.spec.draft_tokens, o.decoded.spec.accepted)))
    drafts = None
    if before is not None and after is not None:
        drafts = draft_delta(before, after, family_for(api, after))
    return {"requests_with_draft_activity": with_steps, "requests": len(observed), "counter_drafts_delta": drafts,
            "ran": with_steps > 0 or bool(drafts and drafts > 0)}


def judge(scenario: str, observed: list[Observed], baseline: Baseline, contract: Contract) -> list[SeqResult]:
    out = []
    for o in observed:
        rec = baseline.cases.get(o.case_id)
        if o.decoded.error is None and rec is not None and o.decoded.output_ids is None and o.decoded.text:
            out.append(SeqResult(scenario, o.case_id, o.order, o.in_flight, None, False,
                                 "the engine returned text but no token ids on this route: nothing to compare "
                                 "(for llama-server use api llamacpp or llamacpp-openai-*, which ask it for ids)", None, o))
            continue
        if o.decoded.error is not None or rec is None:
            why = (f"request failed: {o.decoded.error.kind}: {o.decoded.error.detail}" if o.decoded.error
                   else "case missing from the baseline")
            out.append(SeqResult(scenario, o.case_id, o.order, o.in_flight, None, False, why, None, o))
            continue
        c = compare(seq_output(rec), o.output())
        v = verdict(c, contract.near_tie_threshold)
        ok, why_not = passes(c, v, contract)
        out.append(SeqResult(scenario, o.case_id, o.order, o.in_flight, v, ok, why_not, c, o))
    return out


def mark_in_flight_at_divergence(judged: list[SeqResult], observed: list[Observed]) -> None:
    """For each sequence that diverged in a stream, how many of the scenario's requests were in
    flight when its first diverging token arrived, as the client saw it: those whose answer had
    begun (its headers arrived: the engine had taken the request) and not ended by that token's
    stamp, itself included. The count at send says little when the batch around the divergence was
    another. It is the client's view: the engine's batch in the step that produced the token can
    differ by the requests that joined or left it within one engine step of the token."""
    spans = [o.span_ns for o in observed if o.span_ns is not None]
    for sr in judged:
        c, chunks = sr.comparison, sr.observed.decoded.chunks
        if c is None or c.first_divergence is None or len(chunks) < 2:
            continue
        seen, at = 0, None
        for ch in chunks:
            seen += ch.n_tokens
            if seen > c.first_divergence:
                at = ch.t_ns
                break
        if at is None:
            continue
        sr.in_flight_at_divergence = sum(1 for a, b in spans if a <= at <= b)


async def _send_with_retries(sender: CaseSender, cases: list[Case], in_flight: int, tag: str
                             ) -> tuple[list[Observed], int]:
    """The scenario's requests; those that failed are sent again (together, up to the scenario's
    in-flight count) until they succeed or `RETRIES` rounds are spent. Returns the observations
    (a retried case's last try) and how many requests were re-sent."""
    observed = await sender.send_all(cases, in_flight, tag)
    resent = 0
    for attempt in range(1, RETRIES + 1):
        bad = [k for k, o in enumerate(observed) if o.decoded.error is not None]
        if not bad:
            break
        # the scenario's batch size is part of what it tests: other cases of the scenario go along
        # (their answers unused) so a retried request has as many others in flight as the first time
        good = [cases[k] for k in range(len(cases)) if k not in set(bad)] or [cases[k] for k in bad]
        pad = [good[m % len(good)] for m in range(max(0, in_flight - len(bad)))]
        again = await sender.send_all([cases[k] for k in bad] + pad, in_flight, f"{tag}-retry{attempt}")
        resent += len(bad)
        for k, o in zip(bad, again[:len(bad)], strict=True):
            observed[k] = dataclasses.replace(o, order=k)  # its place in the scenario's send order
    return observed, resent


async def run_check(sender: CaseSender, corpus: Corpus, baseline: Baseline, contract: Contract, sc: Scenarios, *,
                    tag: str, max_len: int | None, speculation_required: bool | None, speculation_source: str,
                    scrape: Any = None, reset: Any = None) -> CheckResult:
    """Run every scenario against the candidate and judge it. `scrape` is an async callable giving a
    /metrics Snapshot (or None), used to prove speculation from counter deltas and to count each
    scenario's prefix-cache hits; `reset` an async callable emptying the engine's prefix cache
    before each scenario (returns the route used, or None where the engine has none)."""
    counts = {c.id: await sender.count_tokens(c) for c in corpus.cases} if max_len is not None else {}
    plans, skipped = plan_scenarios(corpus, sc, max_len, counts)
    scrape_before = await scrape() if scrape is not None else None
    sequences: list[SeqResult] = []
    everything: list[Observed] = []
    resent = 0
    scenarios: dict[str, Any] = {}
    last = scrape_before
    for name, in_flight, cases in plans:
        info: dict[str, Any] = {"in_flight": in_flight, "requests": len(cases)}
        if reset is not None:
            info["cache_reset"] = await reset()
            last = await scrape() if scrape is not None else None  # (the reset's own effect is not the scenario's)
        observed, n = await _send_with_retries(sender, cases, in_flight, f"{tag}-{name}")
        now = await scrape() if scrape is not None else None
        if last is not None and now is not None:
            info["prefix_cache"] = prefix_cache(last, now, family_for(sender.spec.api, now))
        last = now
        scenarios[name] = info
        resent += n
        everything += observed
        judged = judge(name, observed, baseline, contract)
        mark_in_flight_at_divergence(judged, observed)
        sequences += judged
    after = last if plans else (await scrape() if scrape is not None else None)
    spec = speculation_evidence(everything, scrape_before, after, sender.spec.api)
    spec.update({"required": bool(speculation_required), "source": speculation_source})
    result = CheckResult(contract, scenarios, sequences, spec, skipped, retried=resent)
    for name, in_flight, _ in plans:
        d = scenario_drift([s for s in sequences if s.scenario == name], in_flight, baseline)
        if d is not None:
            result.drift[name] = d
    lost = [s for s in sequences if s.observed.decoded.error is not None]
    failed = [s for s in sequences if not s.passed and s.observed.decoded.error is None]
    result.not_established = [f"{s.scenario}/{s.case_id}" for s in lost]
    if failed:
        result.reasons.append(f"{len(failed)} of {len(sequences)} sequences do not meet the contract")
    if contract.stable:
        for name, d in result.drift.items():
            if n := unstable(d, logprobs=contract.tier == "bit-exact"):
                result.reasons.append(
                    f"not stable: in {name}, {n} of {d['prompts']} prompts gave more than one output "
                    f"({d['differ_from_modal']} of {d['compared']} requests differ from their prompt's modal output)")
            if d["sent_once"]:  # stability is not shown for a prompt sent once
                result.not_established.append(f"stable/{name}: {d['sent_once']} of {d['prompts']} prompts sent once "
                                              "(repeat at least twice the number of cases)")
        if not result.drift:
            result.not_established.append("stable/no scenario sent a prompt more than once (exactness.scenarios.repeat "
                                           "at least twice the number of cases)")
    if speculation_required and not spec["ran"] and len(lost) < len(sequences):
        result.reasons.append(
            f"speculation is on ({speculation_source}) but no request showed draft activity and the server's "
            "draft counters did not move: the check would prove nothing about speculative decoding")
    if not sequences:
        result.reasons.append("no sequence was checked")
    result.passed = not result.reasons and not result.not_established
    return result
