"""The exactness check's result as JSON (`exactness.json`): the contract verbatim, every
non-identical sequence with its first divergence, and what was proven. Its text for people is
`loadgate.report.exactness`'s."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from loadgate.config.contract import Contract
from loadgate.documents import ABSENT, ContractDoc, ExactnessDoc, NonIdentical
from loadgate.exactness.check import CheckResult


def contract_doc(c: Contract) -> ContractDoc:
    return ContractDoc(c.tier, c.tolerance, c.gap, c.words(), True if c.stable else ABSENT)


def result_doc(r: CheckResult) -> ExactnessDoc:
    """The check's result (exactness.json without where its inputs came from, which the caller adds)."""
    return ExactnessDoc(
        passed=r.passed, reasons=r.reasons, not_established=r.not_established, retried=r.retried,
        contract=contract_doc(r.contract), drift=r.drift, protocol=r.protocol, sampling=r.sampling,
        scenarios=r.scenarios, verdicts=r.counts(), positions=r.positions(), speculation=r.speculation,
        skipped_cases=r.skipped,
        non_identical=[NonIdentical(
            scenario=s.scenario, case=s.case_id, order=s.order, in_flight=s.in_flight,
            in_flight_at_divergence=s.in_flight_at_divergence, verdict=s.verdict, passed=s.passed, why=s.why,
            first_divergence=None if s.comparison is None else s.comparison.first_divergence,
            baseline_token=None if s.comparison is None else s.comparison.base_token,
            candidate_token=None if s.comparison is None else s.comparison.cand_token,
            baseline_top2_gap=None if s.comparison is None else s.comparison.base_gap,
            max_ulp=None if s.comparison is None else s.comparison.max_ulp,
            ids_only_positions=None if s.comparison is None else s.comparison.ids_only_positions,
            output_sha256=_output_sha(s),
        ) for s in r.sequences if s.verdict != "identical" or not s.passed])


def _output_sha(s: Any) -> str:
    """A short hash of a sequence's whole output (ids, finish reason, logprobs): equal outputs of a
    repeated prompt share it, so the report folds only what is really the same."""
    out = s.observed.output()
    return hashlib.sha256(orjson.dumps([list(out.ids), out.finish_reason, list(out.logprobs or ())])).hexdigest()[:16]
