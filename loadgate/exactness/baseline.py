"""Baseline files: what the reference configuration produced for every corpus case.

`loadgate baseline profile.yaml` replays the corpus solo (one request at a time) against the
profile's target and writes `<dir>/<name>-<hash12>.json`, where the hash is the sha256 of the
file's canonical content (everything but the `sha256` field itself), so the name says which
content it holds and a modified file is detected on load. Per case it keeps the request body as
sent, the output token ids, the raw logprobs (never rounded: the engines' shortest round-trip
text, parsed to the same float64), the top alternatives (for near-tie gaps), the placeholder
positions, the finish reason, the text and the engine's speculation stats; plus the baseline's
fingerprint and the corpus hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from loadgate.errors import UsageError
from loadgate.exactness.compare import SeqOutput
from loadgate.exactness.replay import Observed
from loadgate.jsonutil import write_atomic
from loadgate.version import __version__

FORMAT = 1


def case_record(o: Observed) -> dict[str, Any]:
    d = o.decoded
    return {
        "request": o.body, "route": o.route,
        "output_ids": d.output_ids, "logprobs": d.logprobs,
        "top_logprobs": None if d.top_logprobs is None else [[[i, v] for i, v in pos] for pos in d.top_logprobs],
        "placeholders": d.placeholder_positions, "finish_reason": d.finish_reason, "text": d.text,
        "error": None if d.error is None else {"kind": d.error.kind, "detail": d.error.detail},
        "spec": None if d.spec is None else {"source": d.spec.source, "verify_steps": d.spec.verify_steps,
                                             "draft_tokens": d.spec.draft_tokens, "accepted": d.spec.accepted},
    }


def seq_output(rec: dict[str, Any]) -> SeqOutput:
    top = rec.get("top_logprobs")
    return SeqOutput(
        ids=tuple(rec.get("output_ids") or ()),
        logprobs=None if rec.get("logprobs") is None else tuple(rec["logprobs"]),
        top=None if top is None else tuple(tuple((int(i), v) for i, v in pos) for pos in top),
        finish_reason=rec.get("finish_reason"), placeholders=frozenset(rec.get("placeholders") or ()))


def _content_hash(doc: dict[str, Any]) -> str:
    """The baseline's id: the hash of what it says about the engine (corpus, requests, ids,
    logprobs, finish reasons, fingerprint), not of when it was written, by which loadgate, or on
    which address and port, or where the corpus file lay (`created`, `loadgate`, `corpus` — its
    sha256 stays — and the host of each case's route are left out), so capturing the same engine
    twice gives the same id and the same file."""
    body = {k: v for k, v in doc.items() if k not in ("sha256", "created", "loadgate", "corpus")}
    cases = doc.get("cases")
    if isinstance(cases, dict):
        body["cases"] = {cid: {**rec, "route": urlsplit(str(rec.get("route") or "")).path} if isinstance(rec, dict)
                         else rec for cid, rec in cases.items()}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _whole_hash(doc: dict[str, Any]) -> str:
    """How baselines written before the stable id were hashed (every field): still read."""
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class Baseline:
    path: Path | None
    doc: dict[str, Any]

    @property
    def sha256(self) -> str:
        return str(self.doc["sha256"])

    @property
    def cases(self) -> dict[str, dict[str, Any]]:
        return self.doc["cases"]  # type: ignore[no-any-return]

    @property
    def corpus_sha256(self) -> str:
        return str(self.doc["corpus_sha256"])

    @property
    def fingerprint_hash(self) -> str:
        return str(self.doc["fingerprint_hash"])


def build(observed: list[Observed], *, name: str, fingerprint: dict[str, Any], fingerprint_hash: str,
          corpus_sha256: str, corpus_path: str, sampling: dict[str, Any] | None = None) -> Baseline:
    """The baseline document (`sampling`: the distribution-preserving contract's samples, part of
    its content and so of its id)."""
    failed = [o.case_id for o in observed if o.decoded.error is not None]
    no_ids = [o.case_id for o in observed if o.decoded.error is None and o.decoded.output_ids is None
              and o.decoded.text]
    if no_ids:
        raise UsageError(f"baseline not written: the engine returned text but no token ids for {len(no_ids)} "
                         f"case(s) (first: {no_ids[0]}); use a route that returns ids (e.g. api: llamacpp)")
    if failed:
        raise UsageError(f"baseline not written: {len(failed)} case(s) failed on the baseline engine "
                         f"(first: {failed[0]}); a baseline must be complete")
    doc: dict[str, Any] = {
        "format": FORMAT, "loadgate": __version__, "name": name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "fingerprint_hash": fingerprint_hash, "fingerprint": fingerprint,
        "corpus_sha256": corpus_sha256, "corpus": corpus_path,
        "cases": {o.case_id: case_record(o) for o in observed},
    }
    if sampling is not None:
        doc["sampling"] = sampling
    doc["sha256"] = _content_hash(doc)
    return Baseline(None, doc)


def save(b: Baseline, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{b.doc['name']}-{b.sha256[:12]}.json"
    write_atomic(path, orjson.dumps(b.doc, option=orjson.OPT_INDENT_2))
    return path


def load(path: Path) -> Baseline:
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{path}: baseline file not found (write one with `loadgate baseline PROFILE`)") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read the baseline file: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{path}: not a baseline file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "cases" not in doc:
        raise UsageError(f"{path}: not a loadgate baseline file (format {FORMAT} expected)")
    if doc.get("sha256") not in (_content_hash(doc), _whole_hash(doc)):
        raise UsageError(f"{path}: baseline content does not match its sha256: the file was modified")
    return Baseline(path, doc)
