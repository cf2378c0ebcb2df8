"""The run folder's JSON documents besides the records and the summary, typed: `server.json`
(`ServerLevel` per level), `health.json` (`HealthPhase` per worker and level), `fingerprint.json`
(`FingerprintFile`), `attestation.json` (`AttestationDoc`) and `exactness.json` (`ExactnessDoc`).

The writers build these and write `to_json()`, whose keys come in field order, so what a run
writes is what it wrote before they were typed (a golden test holds committed files to the byte).
`from_json` reads a document back: a key it does not know is a `DocumentError` naming where; a
key missing takes its default, as files of older versions lack later keys. `ABSENT` marks a key
written only sometimes (not the same as null, which is written).

What the engine itself answered (a fingerprint's `engine` part) and the check's per-scenario,
drift, protocol and sampling details stay mappings: their keys are the engine's or the
scenario's, not loadgate's."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, Union


class DocumentError(ValueError):
    """A JSON document that does not have its type's shape (the message names where)."""


class _Absent:
    """The value of a key that is not written (see `ABSENT`)."""

    _instance: ClassVar[_Absent | None] = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT = _Absent()
Absent = _Absent


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _document_type(tp: Any) -> tuple[str, type[Document]] | None:
    """("one"|"list"|"map", the Document class) when `tp` holds documents."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, Document):
        return "one", tp
    if origin in (Union, types.UnionType):
        for a in args:
            found = _document_type(a)
            if found is not None:
                return found
        return None
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], Document):
        return "list", args[0]
    if origin is dict and len(args) == 2:
        inner = _document_type(args[1])
        if inner is not None and inner[0] == "one":
            return "map", inner[1]
    return None


def _out(v: Any) -> Any:
    if isinstance(v, Document):
        return v.to_json()
    if isinstance(v, list):
        return [_out(x) for x in v]
    if isinstance(v, dict):
        return {k: _out(x) for k, x in v.items()}
    return v


class Document:
    """A typed JSON object: the fields in order are its keys (`ABSENT` ones left out)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: _out(v) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if (v := getattr(self, f.name)) is not ABSENT}

    @classmethod
    def from_json(cls, d: Any, where: str = "document") -> Self:
        if not isinstance(d, dict):
            raise DocumentError(f"{where}: expected a JSON object, got {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = [k for k in d if k not in fields]
        if unknown:
            raise DocumentError(f"{where}: unknown key {unknown[0]!r} (a newer loadgate wrote it?)")
        kwargs: dict[str, Any] = {}
        for name in fields:
            if name not in d:
                continue
            v, kind = d[name], _document_type(_hints(cls)[name])  # type: ignore[arg-type]
            if kind is not None and v is not None:
                shape, sub = kind
                if shape == "one":
                    v = sub.from_json(v, f"{where}.{name}")
                elif shape == "list":
                    v = [sub.from_json(x, f"{where}.{name}[{i}]") for i, x in enumerate(_as(list, v, where, name))]
                else:
                    v = {k: None if x is None else sub.from_json(x, f"{where}.{name}.{k}")
                         for k, x in _as(dict, v, where, name).items()}
            kwargs[name] = v
        try:
            return cls(**kwargs)
        except TypeError as e:  # a required key missing
            raise DocumentError(f"{where}: {e}") from None


def _as(tp: type, v: Any, where: str, name: str) -> Any:
    if not isinstance(v, tp):
        raise DocumentError(f"{where}.{name}: expected a JSON {'array' if tp is list else 'object'}")
    return v


# --- server.json ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class GaugeStats(Document):
    """One gauge sampled during a level: how many samples, their min, mean and max."""

    samples: int
    min: float
    mean: float
    max: float


@dataclass(frozen=True)
class ServerLevel(Document):
    """One level of server.json: the engine's metrics at the measured window's edges (samples of
    the engine families' metrics as [name, [[label, value], ...], value]), the gauges sampled
    during it, the route that emptied the prefix cache before it (None: not asked), and what the
    scraper process reports of the window (`loadgate.net.scraper`: scrapes, its CPU seconds, the
    interval, warnings; absent from files written before it)."""

    before: list[list[Any]] | None = None
    after: list[list[Any]] | None = None
    gauges: dict[str, GaugeStats | None] | None = None
    prefix_cache_reset: str | None | Absent = ABSENT
    scrape: dict[str, Any] | Absent = ABSENT


# --- health.json ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class HealthPhase(Document):
    """One worker's health during one measured phase (health.json holds a list per level). A worker
    that got no share of the phase wrote an empty object: every key ABSENT."""

    cpu_s: float | Absent = ABSENT
    loop_lag_ms: dict[str, float | None] | Absent = ABSENT
    gc_pauses: int | Absent = ABSENT
    gc_pause_max_ms: float | Absent = ABSENT
    gc_pause_total_ms: float | Absent = ABSENT
    client_cpu_fraction: float | None | Absent = ABSENT
    host_steal_fraction: float | None | Absent = ABSENT
    decode_cpu_s: float | Absent = ABSENT


# --- fingerprint.json ----------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestSide(Document):
    """The request side of a fingerprint: the API, every sampling parameter sent, and the profile's
    `target.extra_body` as written where it has any key."""

    api: str | Absent = ABSENT  # (fingerprints saved before it was named lack it)
    sampling: dict[str, Any] = field(default_factory=dict)
    logprobs: int | None = None
    check_scenarios: Any = ABSENT  # (written by early versions; left out of comparisons)
    extra_body: dict[str, Any] | Absent = ABSENT  # (absent without one: the hash is as before)


@dataclass(frozen=True)
class Fingerprint(Document):
    """The configuration fingerprint: what the engine answered about itself (its own keys), what
    the profile declares, and the request side."""

    engine: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, Any] = field(default_factory=dict)
    request: RequestSide = field(default_factory=RequestSide)


@dataclass(frozen=True)
class FingerprintFile(Document):
    fingerprint_hash: str
    fingerprint: Fingerprint


# --- attestation.json and exactness.json ---------------------------------------------------------

@dataclass(frozen=True)
class ContractDoc(Document):
    """The contract as the check applied it, with its words."""

    tier: str
    tolerance: float | None
    gap: float | None
    words: str
    stable: bool | Absent = ABSENT  # written only when true


@dataclass(frozen=True)
class AttestationDoc(Document):
    """What a passed check proved (attestation.json); `attestation_sha256` hashes the rest."""

    kind: str
    loadgate: str
    time: str
    fingerprint_hash: str
    fingerprint: Fingerprint
    corpus_sha256: str
    corpus: str
    baseline_sha256: str
    baseline_fingerprint_hash: str
    contract: ContractDoc
    scenarios: dict[str, Any]
    verdicts: dict[str, int]
    protocol: dict[str, Any] | Absent = ABSENT
    sampling: dict[str, Any] | Absent = ABSENT
    drift: dict[str, Any] | Absent = ABSENT
    replicas: dict[str, Any] | Absent = ABSENT  # target.endpoints: each replica's URL and hash, the one checked
    attestation_sha256: str | Absent = ABSENT


@dataclass(frozen=True)
class NonIdentical(Document):
    """A sequence whose verdict is not `identical` (or that did not pass), with its first divergence."""

    scenario: str
    case: str
    order: int | None = None
    in_flight: int | None = None
    in_flight_at_divergence: Any = None
    verdict: str | None = None
    passed: bool = False
    why: str | None = None
    first_divergence: int | None = None
    baseline_token: int | None = None
    candidate_token: int | None = None
    baseline_top2_gap: float | None = None
    max_ulp: int | None = None
    ids_only_positions: Any = None
    output_sha256: str | None = None


@dataclass(frozen=True)
class BaselineRef(Document):
    file: str
    sha256: str
    fingerprint_hash: str


@dataclass(frozen=True)
class CorpusRef(Document):
    path: str
    sha256: str
    cases: int


@dataclass(frozen=True)
class ExactnessDoc(Document):
    """The check's result (exactness.json): passed or not and why, the contract, what each
    scenario sent, every non-identical sequence, and where its baseline and corpus came from."""

    passed: bool
    reasons: list[str] = field(default_factory=list)
    not_established: list[str] | Absent = ABSENT
    retried: int | Absent = ABSENT
    contract: ContractDoc | None = None
    drift: dict[str, Any] | Absent = ABSENT
    protocol: list[dict[str, Any]] | None | Absent = ABSENT
    sampling: dict[str, Any] | None | Absent = ABSENT
    scenarios: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    positions: dict[str, Any] = field(default_factory=dict)
    speculation: dict[str, Any] = field(default_factory=dict)
    skipped_cases: list[str] = field(default_factory=list)
    non_identical: list[NonIdentical] = field(default_factory=list)
    fingerprint_hash: str | Absent = ABSENT
    baseline: BaselineRef | Absent = ABSENT
    corpus: CorpusRef | Absent = ABSENT
    bundles: list[str] | Absent = ABSENT
