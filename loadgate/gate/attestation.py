"""The attestation: the record that the exactness check passed for one configuration fingerprint,
corpus and contract (`attestation.json`, hashed), and the tokens the performance phase requires.

`Attestation` and `Unverified` are issued only by `loadgate.gate.policy` (`attested`, `unverified`):
the policy keeps the tokens it issued, and `policy.admit` refuses any other, so a token built
anywhere else cannot start a measurement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import orjson

from loadgate.documents import ABSENT, AttestationDoc, Fingerprint
from loadgate.exactness import baseline as bl
from loadgate.exactness.check import CheckResult
from loadgate.exactness.corpus import Corpus
from loadgate.exactness.result import contract_doc
from loadgate.version import __version__


def attestation_doc(fp: dict[str, Any], fp_hash: str, corpus: Corpus, b: bl.Baseline, r: CheckResult,
                    replicas: dict[str, Any] | None = None) -> dict[str, Any]:
    """The attestation document, hashed; `replicas` (target.endpoints): every replica's URL and
    fingerprint hash, and the one the check ran on (`loadgate.gate.replicas.replicas_doc`)."""
    doc = AttestationDoc(
        kind="loadgate exactness attestation", loadgate=__version__,
        time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        fingerprint_hash=fp_hash, fingerprint=Fingerprint.from_json(fp, "fingerprint"), corpus_sha256=corpus.sha256,
        corpus=str(corpus.path), baseline_sha256=b.sha256, baseline_fingerprint_hash=b.fingerprint_hash,
        contract=contract_doc(r.contract), scenarios=r.scenarios, verdicts=r.counts(),
        # what the interface checks proved (each passed or did not apply, or there is no attestation)
        protocol={c["name"]: {"status": c["status"], "proved": c["proved"]} for c in r.protocol}
        if r.protocol else ABSENT,
        # which sampling contracts held, and what the distribution test could detect
        sampling={k: {"passed": v.get("passed"), **({"detectable_tv": v["detectable_tv"]} if "detectable_tv" in v
                                                    else {})} for k, v in r.sampling.items()}
        if r.sampling else ABSENT,
        drift={name: {k: d[k] for k in ("compared", "differ_from_baseline", "differ_from_modal", "prompts",
                                        "prompts_varying")} for name, d in r.drift.items()} if r.drift else ABSENT,
        replicas=ABSENT if replicas is None else replicas)
    body = doc.to_json()
    return {**body, "attestation_sha256": hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()}



def attestation_meta(att: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a run's meta.json keeps of the attestation that let it measure."""
    if att is None:
        return None
    return {k: att[k] for k in ("fingerprint_hash", "corpus_sha256", "baseline_sha256", "contract", "scenarios",
                                "verdicts", "attestation_sha256", "time", "replicas") if k in att}


class Attestation:
    """A passing check's attestation for one configuration fingerprint (see the module docstring)."""

    __slots__ = ("doc", "fingerprint_hash", "__weakref__")

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.fingerprint_hash: str = doc["fingerprint_hash"]

    def meta(self) -> dict[str, Any] | None:
        return attestation_meta(self.doc)


class Unverified:
    """The explicit choice to measure without an exactness check (`loadgate run --unverified`):
    every figure is marked UNVERIFIED and the exit code is 11."""

    __slots__ = ("__weakref__",)

    def meta(self) -> dict[str, Any] | None:
        return None


Token = Attestation | Unverified
