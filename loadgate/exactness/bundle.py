"""Reproducer bundles: one self-contained JSON file per non-identical sequence, and `replay`.

`results/<run>/divergences/<scenario>-<case>-<order>.json` holds the exact request body, where
it was sent, the baseline's and the candidate's outputs (ids, logprobs, top alternatives, text,
finish reason), the comparison, both fingerprints, the scenario (requests in flight when it was
sent, its position in the send order) and the engines' speculation stats. `loadgate replay
BUNDLE` sends that request again, alone, and compares the answer with the bundle's baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import orjson

from loadgate.config.contract import DEFAULT_NEAR_TIE_NATS, Contract
from loadgate.config.profile import is_http_url
from loadgate.engine.adapters import api_for_path, apis
from loadgate.errors import UsageError
from loadgate.exactness.baseline import Baseline, case_record, seq_output
from loadgate.exactness.check import CheckResult
from loadgate.exactness.compare import compare
from loadgate.exactness.contract import passes, verdict
from loadgate.exactness.replay import Observed
from loadgate.jsonutil import write_atomic
from loadgate.load.target import LiveTarget, TargetSpec, decode, fetch
from loadgate.net.http import SessionSettings, expand_json, make_session, session_settings
from loadgate.secrets import MASK, redact_headers, registered
from loadgate.version import __version__


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def session_doc(target: Any) -> dict[str, Any]:
    """What replay needs to reach the engine as the run did, with no secret in it: header
    templates (`${NAME}` kept, credential headers masked), `api_key_env` (a name), TLS settings."""
    tls = target.tls
    return {"headers": redact_headers(target.headers), "api_key_env": target.api_key_env,
            "tls": {"ca_file": tls.ca_file, "client_cert": tls.client_cert, "client_key": tls.client_key,
                    "insecure": tls.insecure}}


def write_bundles(result: CheckResult, baseline: Baseline, out_dir: Path, *, fingerprint: dict[str, Any],
                  fingerprint_hash: str, session: dict[str, Any] | None = None) -> list[Path]:
    """One bundle per distinct output that is not identical to the baseline or fails the contract:
    sequences of one scenario and case with the same output (ids, finish reason, logprobs; a
    prompt repeated in `repeat`) share the bundle of the first sent, which lists all their send
    orders (`scenario.same_output_orders`)."""
    paths = []
    first: dict[tuple[Any, ...], list[int]] = {}
    chosen = []
    for s in result.sequences:
        if s.verdict == "identical" and s.passed:
            continue
        out = s.observed.output()
        key = (s.scenario, s.case_id, out.ids, out.finish_reason, out.logprobs, s.observed.decoded.error is None)
        if key in first:
            first[key].append(s.order)
            continue
        first[key] = [s.order]
        chosen.append((s, first[key]))
    for s, orders in chosen:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{_safe(s.scenario)}-{_safe(s.case_id)}-{s.order}.json"
        doc = {
            "format": 1, "loadgate": __version__, "case": s.case_id,
            "scenario": {"name": s.scenario, "in_flight_when_sent": s.in_flight, "send_order": s.order,
                         "same_output_orders": orders},
            "verdict": s.verdict, "meets_contract": s.passed, "why": s.why,
            "contract": result.contract.words(),
            "route": s.observed.route, "api": s.observed.api, "request": s.observed.body,
            "baseline": baseline.cases.get(s.case_id), "candidate": case_record(s.observed),
            "comparison": None if s.comparison is None else dataclasses.asdict(s.comparison),
            "fingerprints": {"candidate_hash": fingerprint_hash, "candidate": fingerprint,
                             "baseline_hash": baseline.fingerprint_hash, "baseline_file": str(baseline.path or "")},
            "session": session or {},
        }
        write_atomic(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        paths.append(path)
    return paths


def replay_settings(session: dict[str, Any]) -> SessionSettings:
    """The run's session settings from a bundle: `${NAME}` and `api_key_env` read from this
    environment again; a header the bundle holds masked cannot be sent (UsageError says why)."""
    headers = session.get("headers") or {}
    masked = [k for k, v in headers.items() if v == MASK]
    if masked:
        raise UsageError(f"the run sent header {masked[0]!r} with a literal value, which bundles do not keep: "
                         f"give it as ${{NAME}} or target.api_key_env in the profile, then replay can send it")
    tls = session.get("tls") or {}
    target = SimpleNamespace(headers=headers, api_key_env=session.get("api_key_env"), tls=SimpleNamespace(
        ca_file=tls.get("ca_file"), client_cert=tls.get("client_cert"), client_key=tls.get("client_key"),
        insecure=bool(tls.get("insecure"))))
    return session_settings(target, Path)


def load_bundle(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise UsageError(f"{path}: cannot read reproducer bundle: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != 1:
        raise UsageError(f"{path}: not a loadgate reproducer bundle")
    shape = {"route": str, "request": dict, "baseline": dict, "case": str, "scenario": dict}
    bad = [k for k, t in shape.items() if not isinstance(doc.get(k), t)]
    if not bad:
        sc = doc["scenario"]
        checks = {"scenario.name": isinstance(sc.get("name"), str),
                  "scenario.in_flight_when_sent": isinstance(sc.get("in_flight_when_sent"), int),
                  "comparison": doc.get("comparison") is None or isinstance(doc["comparison"], dict),
                  "api": doc.get("api") is None or doc["api"] in apis(),
                  "session": _is_session(doc.get("session")),
                  "baseline": _is_seq_record(doc["baseline"])}
        bad = [k for k, ok in checks.items() if not ok]
    if bad:
        raise UsageError(f"{path}: {bad[0]}: missing or of the wrong type; not a complete reproducer bundle "
                         "(a null baseline: the case was not in the baseline, nothing to replay against)")
    return doc


def _is_session(session: Any) -> bool:
    """A bundle's `session` as `replay_settings` reads it: absent, or headers str -> str and a tls
    object of paths (strings or null) and an insecure flag."""
    if session is None:
        return True
    if not isinstance(session, dict):
        return False
    headers, tls = session.get("headers") or {}, session.get("tls") or {}
    return (isinstance(headers, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
            and isinstance(tls, dict) and all(v is None or isinstance(v, (str, bool)) for v in tls.values())
            and (session.get("api_key_env") is None or isinstance(session["api_key_env"], str)))


def _is_seq_record(rec: dict[str, Any]) -> bool:
    """A baseline sequence as `seq_output` reads it: int ids, numeric (or null) logprobs, and
    top alternatives as [id, logprob] pairs."""
    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    ids, lps, top = rec.get("output_ids"), rec.get("logprobs"), rec.get("top_logprobs")
    return (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            and (lps is None or (isinstance(lps, list) and all(v is None or num(v) for v in lps)))
            and (top is None or (isinstance(top, list) and all(
                isinstance(pos, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
                                              and (p[1] is None or num(p[1])) for p in pos) for pos in top)))
            and isinstance(rec.get("placeholders") or [], list))


async def replay(doc: dict[str, Any], endpoint: str | None, times: int, concurrency: int = 1) -> list[dict[str, Any]]:
    """Send the bundle's request `times` times and compare each answer with its baseline: alone, or
    with `concurrency` - 1 companions in flight beside it (copies of the same request, started
    together with it: the bundle keeps its own request, not its neighbours', so the companions
    recreate the batch's size, not its contents)."""
    u = urlsplit(doc["route"])
    path = u.path
    api = doc.get("api") or api_for_path(path)
    if api is None:
        raise UsageError(f"bundle route {doc['route']!r} is not a generation route loadgate knows")
    base = (endpoint or f"{u.scheme}://{u.netloc}").rstrip("/")
    if not is_http_url(base):
        where = "--endpoint" if endpoint else "bundle route"
        raise UsageError(f"{where}: expected an http:// or https:// URL with a valid host and port, got {base!r}")
    model = str(doc["request"].get("model", ""))
    base_out = seq_output(doc["baseline"])
    settings = replay_settings(doc.get("session") or {})
    results = []
    async with make_session(settings.headers, settings.ssl_for(base)) as session:
        t = LiveTarget(TargetSpec(base, api, model, 600.0, headers=settings.headers, tls=settings.tls,
                              secrets=registered()), session)
        # the body as the run's profile wrote it: `${NAME}` in target.extra_body read from this environment
        body = orjson.dumps(expand_json(doc["request"], "the bundle's request"))
        try:
            for k in range(times):
                companions = [asyncio.ensure_future(fetch(t, body, f"replay-{doc['case']}-{k}-with-{j}"))
                              for j in range(concurrency - 1)]
                raw = await fetch(t, body, f"replay-{doc['case']}-{k}")
                for f in companions:
                    with contextlib.suppress(Exception):
                        await f
                d = decode(t.adapter, bool(doc["request"].get("stream", True)), raw, t.spec.max_event_bytes)
                if d.error is not None:
                    results.append({"run": k, "error": f"{d.error.kind}: {d.error.detail}"})
                    continue
                o = Observed(doc["case"], doc["request"], t.url, d)
                c = compare(base_out, o.output())
                v = verdict(c, DEFAULT_NEAR_TIE_NATS)
                results.append({"run": k, "verdict": v, "first_divergence": c.first_divergence,
                                "baseline_token": c.base_token, "candidate_token": c.cand_token,
                                "baseline_top2_gap": c.base_gap, "max_ulp": c.max_ulp,
                                "token_exact": passes(c, v, Contract("token-exact"))[0]})
        finally:
            if t.pool is not None:
                t.pool.close()
    return results
