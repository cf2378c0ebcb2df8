"""Replicas (`target.endpoints`, docs/replicas.md): one configuration served by several engines.

Each replica's fingerprint is read from its own URL (its introspection routes and `/metrics`) with
the profile's declared part and request side, and all of them must be equal: a fleet with one odd
replica (another build, another flag, another seed) has no one configuration to attest, so the
run stops there (exit 11), naming the replica and the fields that differ from replica 0. The
exactness check then runs once, on replica 0 (`check_engine_of`); the attestation lists every
replica's fingerprint hash, and the gate reads them all again after the run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgate.errors import ExactnessNotEstablished
from loadgate.gate.fingerprint import build, describe_diff, diff, fingerprint_hash, introspect
from loadgate.net.connect import Engine


@dataclass(frozen=True)
class ReplicaFingerprint:
    """One replica's fingerprint: its index in target.endpoints, base URL, document and hash."""

    index: int
    url: str
    doc: dict[str, Any]
    hash: str


async def replica_fingerprints(e: Engine, request: dict[str, Any]) -> list[ReplicaFingerprint]:
    """Every replica's fingerprint, in target.endpoints order (request: the fingerprint's request side)."""
    t = e.profile.target
    out = []
    for k, url in enumerate(t.replicas):
        doc = build(await introspect(e.session, url), t.declared, request)
        out.append(ReplicaFingerprint(k, url, doc, fingerprint_hash(doc)))
    return out


def require_equal(fps: list[ReplicaFingerprint], when: str) -> None:
    """Raise ExactnessNotEstablished (exit 11) naming the first replica whose fingerprint is not
    replica 0's, and the fields that differ."""
    first = fps[0]
    for fp in fps[1:]:
        if fp.hash != first.hash:
            raise ExactnessNotEstablished(
                f"replica {fp.index} ({fp.url}) is not configured like replica 0 ({first.url}) {when} "
                f"({fp.hash[:16]} vs {first.hash[:16]}): {describe_diff(diff(first.doc, fp.doc))}; one "
                "configuration must serve every replica of target.endpoints for its speed to be proven")


def replicas_doc(fps: list[ReplicaFingerprint]) -> dict[str, Any]:
    """What the attestation and meta.json keep: each replica's URL and fingerprint hash, and the
    replica the exactness check ran on (always replica 0)."""
    return {"checked_on": 0, "endpoints": [{"url": fp.url, "fingerprint_hash": fp.hash} for fp in fps]}


def check_engine_of(e: Engine) -> Engine:
    """The engine the exactness check sends to: replica 0 for target.endpoints, else `e` itself."""
    replicas = e.profile.target.replicas
    return dataclasses.replace(e, base=replicas[0]) if replicas else e


def replicas_meta(target: Any, checked: bool) -> dict[str, Any] | None:
    """meta.json's `replicas` (None for one endpoint): the route, the replicas' URLs, the router
    (route via_router) and the replica the exactness check ran on (None: `--unverified`, no check)."""
    if not target.replicas:
        return None
    return {"route": target.route, "endpoints": list(target.replicas),
            "router": target.endpoint if target.route == "via_router" else None,
            "exactness_checked_on": 0 if checked else None}


def check_words(target: Any) -> str:
    """The line the run prints before the check: where it runs, and that every replica is fingerprinted."""
    n = len(target.replicas)
    return (f"replicas: {n} (target.endpoints); the exactness check runs once, on replica 0 ({target.replicas[0]}); "
            f"all {n} fingerprints are read and must be equal, before and after the run")


def spread_over(target: Any) -> tuple[str, ...]:
    """The endpoints the load's requests spread over (every route but via_router), () for one
    endpoint or a router (`via_router`: every request to target.endpoint)."""
    return () if target.route == "via_router" else target.replicas
