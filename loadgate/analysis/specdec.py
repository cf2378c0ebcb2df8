"""Acceptance length of speculative decoding, from two independent sources, reconciled.

One definition throughout: **acceptance length** = mean tokens emitted per target verify step,
bonus token included = 1 + accepted draft tokens / verify steps. A step that accepts nothing
still emits one token (the target's own), so the figure is >= 1; without speculation it is 1.

Sources
1. Per request (response fields), pooled over the measured requests (a ratio of sums, not a mean
   of per-request ratios, so long requests weigh by their steps):
   - vLLM `metrics.speculative_decoding`: verify steps = `num_spec_steps`, accepted =
     `num_accepted_draft_tokens`;
   - SGLang `meta_info`: verify steps = `spec_verify_ct`; accepted = `spec_num_correct_drafts`
     when given, else completion_tokens - 1 - spec_verify_ct (every token but the one from
     prefill comes from a verify step, one per step is not a draft). SGLang's own
     `spec_accept_length` = completion_tokens / spec_verify_ct counts the prefill token too;
     it is kept as reported, never mixed in;
   - llama.cpp `timings`: accepted = `draft_n_accepted`; it gives no step count, so verify steps
     = completion_tokens - 1 - accepted (each step emits exactly one non-draft token).
2. Prometheus counter deltas over the measured window: 1 + Δaccepted / Δdrafts, acceptance rate
   = Δaccepted / Δdraft_tokens.
   - vLLM `vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`: a draft is one
     verify step, so the length has the per-request definition; per-position acceptance from
     `…num_accepted_tokens_per_pos_total{position}` / Δdrafts;
   - llama.cpp `llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`: `drafts`
     counts only the steps that verified a draft; a step where the draft proposed nothing is
     not counted, so 1 + Δaccepted / Δdrafts is the length *per drafting step*, >= the
     per-request figure. What both sides count alike are tokens: accepted and drafted.

The two sources are reconciled on what they define alike (vLLM: the acceptance length; llama.cpp:
the accepted and drafted token counts), and must agree when the server saw only loadgate's
measured traffic; the **contamination check** proves that: the server's Δ successful requests
(vLLM) and Δ generation tokens (`vllm:generation_tokens_total`, `llamacpp:tokens_predicted_total`,
`sglang:generation_tokens_total`)
must equal the client's own totals for the window.
"""

from __future__ import annotations

from typing import Any

from loadgate.engine.adapters import FAMILIES, family_named
from loadgate.engine.adapters.base import Family
from loadgate.records import Record
from loadgate.snapshot import Snapshot, delta


def per_request_steps(r: Record) -> tuple[int, int] | None:
    """(verify_steps, accepted) for one record under the single definition, or None."""
    s = r.spec
    if not s:
        return None
    steps, acc = s.verify_steps, s.accepted
    ct = r.output_tokens
    if steps is not None and acc is None and ct:
        acc = max(ct - 1 - steps, 0)
    if steps is None and acc is not None and ct:
        steps = max(ct - 1 - acc, 0)
    if steps is None or acc is None:
        return None
    return int(steps), int(acc)


def from_records(records: list[Record]) -> dict[str, Any] | None:
    pairs = [p for r in records if r.succeeded and (p := per_request_steps(r)) is not None]
    if not pairs:
        return None
    steps = sum(p[0] for p in pairs)
    acc = sum(p[1] for p in pairs)
    sources = sorted({r.spec.source for r in records if r.spec})
    drafted = [r.spec.draft_tokens for r in records if r.succeeded and r.spec and r.spec.draft_tokens is not None]
    return {
        "source": ", ".join(sources), "requests": len(pairs), "verify_steps": steps, "accepted": acc,
        "draft_tokens": sum(drafted) if len(drafted) == len(pairs) else None,
        "acceptance_length": 1 + acc / steps if steps else None,
        "acceptance_rate": (acc / sum(drafted)) if drafted and len(drafted) == len(pairs) and sum(drafted) else None,
        "formula": "1 + sum(accepted) / sum(verify_steps) over successful measured requests",
    }


def from_counters(before: Snapshot, after: Snapshot, family: Family | None) -> dict[str, Any] | None:
    """The counters' acceptance over the window, for an engine of `family` (None: no family known)."""
    spec = family.spec if family is not None else None
    drafts = None if spec is None else delta(before, after, spec.drafts)
    if family is None or spec is None or drafts is None:
        return None
    acc = delta(before, after, spec.accepted) or 0.0
    dtok = delta(before, after, spec.draft_tokens)
    per_pos: dict[str, float] = {}
    if spec.per_position and drafts:
        pos_before = before.by_label(spec.per_position, "position")
        per_pos = {k: (v - pos_before.get(k, 0.0)) / drafts
                   for k, v in after.by_label(spec.per_position, "position").items()}
    return {
        "source": "prometheus counter deltas", "engine": family.name, "drafts": drafts, "accepted": acc,
        "draft_tokens": dtok,
        "acceptance_length": 1 + acc / drafts if drafts else None,
        "acceptance_rate": acc / dtok if dtok else None,
        "per_position_acceptance": dict(sorted(per_pos.items(), key=lambda kv: int(kv[0]))),
        "formula": "1 + Δ num_accepted_tokens_total / Δ num_drafts_total"
                   + ("" if spec.drafts_are_steps else
                      f" ({family.title} counts only steps that verified a draft: per drafting step)"),
    }


def draft_delta(before: Snapshot, after: Snapshot, family: Family | None) -> float | None:
    """Drafts the server counted in the window (None: no such counter)."""
    spec = family.spec if family is not None else None
    return None if spec is None else delta(before, after, spec.drafts)


def accepted_then_failed(r: Record) -> bool:
    """A request that failed after the server may have taken it as its own: the response began (HTTP
    200) and broke later, or it failed before any status came back in a way that does not rule the
    server out (a timeout, a cut connection; not a refused connect)."""
    if r.succeeded:
        return False
    if r.status == 200:
        return True
    return r.status is None and (r.error is None or r.error.kind != "connect")


def contamination(before: Snapshot, after: Snapshot, records: list[Record], family: Family | None
                  ) -> dict[str, Any] | None:
    """Compare the server's view of the window with the client's; `clean` False flags the run.

    Only traffic the client did not send is contamination. A request the client saw fail after the
    server accepted it (`accepted_then_failed`: cut off mid-stream, an error event, a malformed
    line, a timeout) may be a success in the server's counters, with up to its planned tokens; so
    the server's counts must lie between the client's successes and the successes plus those
    failures (requests), and between the tokens the client received and that plus the failures'
    planned rest (tokens). Foreign traffic smaller than that slack cannot be told apart; the slack
    is reported."""
    if family is None:
        return None
    d_req = None if family.successes is None else delta(before, after, family.successes)
    if d_req is not None and family.successes is not None:  # aborted and failed requests are no successes
        for reason in ("abort", "error"):
            d_req -= delta(before, after, family.successes, finished_reason=reason) or 0.0
    d_gen = None if family.generated is None else delta(before, after, family.generated)
    if d_req is None and d_gen is None:
        return None
    ok = [r for r in records if r.succeeded]
    failed = [r for r in records if accepted_then_failed(r)]
    client_req = len(ok)
    client_gen = sum(r.output_tokens for r in ok)
    failed_got = sum(sum(r.chunk_tokens) for r in failed)  # what the failures delivered before failing
    failed_most = sum(max(r.output_tokens_planned, sum(r.chunk_tokens)) for r in failed)
    problems = []
    slack = f" (of which {len(failed)} failed after the server took them)" if failed else ""
    if d_req is not None and not client_req <= int(d_req) <= client_req + len(failed):
        problems.append(f"server finished {int(d_req)} requests in the window, the client "
                        f"{client_req + len(failed) if int(d_req) > client_req else client_req}{slack}")
    if d_gen is not None and not client_gen <= int(d_gen) <= client_gen + failed_most:
        got = client_gen + failed_got
        problems.append(f"server generated {int(d_gen)} tokens in the window, the client received {got}"
                        + (f" and its {len(failed)} failed requests could account for {failed_most - failed_got} more"
                           if failed else ""))
    return {"clean": not problems, "server_requests": d_req, "client_requests": client_req,
            "server_generation_tokens": d_gen, "client_generation_tokens": client_gen,
            "client_failed_after_accept": len(failed), "failed_tokens_received": failed_got,
            "failed_tokens_planned": failed_most, "problems": problems}


def prefix_cache(before: Snapshot, after: Snapshot, family: Family | None = None) -> dict[str, Any] | None:
    """Prompt tokens the server's prefix cache served in the window (`hits` of `queries`), from
    `family`'s counters (None: the first family whose counters the snapshots hold); None for an
    engine without such counters (llama-server)."""
    for f in (FAMILIES.values() if family is None else (family,)):
        if f.prefix_cache is None:
            continue
        hits_name, queries_name = f.prefix_cache
        hits, queries = delta(before, after, hits_name), delta(before, after, queries_name)
        if hits is not None and queries is not None:
            return {"hits": hits, "queries": queries, "hit_rate": hits / queries if queries else None,
                    "counters": [hits_name, queries_name]}
    return None


def groups_add_up(groups: dict[str, dict[str, Any]], counters: dict[str, Any] | None,
                  tol: float = 0.01) -> dict[str, Any] | None:
    """Whether the groups' per-request acceptance (each group's accepted tokens, verify steps and
    drafted tokens, summed) adds up to the level's counter deltas, which cannot be split by group
    in a mixed window: accepted against Δ accepted; verify steps against Δ drafts where the engine
    counts every step (vLLM), drafted tokens against Δ draft tokens where both say."""
    per = [g["acceptance"]["per_request"] for g in groups.values() if g["acceptance"]["per_request"]]
    if not per or not counters:
        return None
    family = family_named(counters.get("engine"))
    sums = {"accepted": sum(p["accepted"] for p in per), "verify_steps": sum(p["verify_steps"] for p in per),
            "draft_tokens": None if any(p.get("draft_tokens") is None for p in per)
            else sum(p["draft_tokens"] for p in per)}
    pairs: dict[str, tuple[float, float]] = {"accepted": (sums["accepted"], counters.get("accepted") or 0.0)}
    if family is not None and family.spec is not None and family.spec.drafts_are_steps and counters.get("drafts"):
        pairs["verify_steps"] = (sums["verify_steps"], counters["drafts"])
    if sums["draft_tokens"] is not None and counters.get("draft_tokens"):
        pairs["draft_tokens"] = (sums["draft_tokens"], counters["draft_tokens"])
    rels = {k: (abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))) for k, (a, b) in pairs.items()}
    rel = max(rels.values())
    return {"groups": len(per), "values": {k: list(v) for k, v in pairs.items()}, "relative_difference": rel,
            "agree": rel <= tol, "tolerance": tol}


def reconcile(resp: dict[str, Any] | None, counters: dict[str, Any] | None, tol: float = 0.01) -> dict[str, Any] | None:
    """Compare the two sources on what they define alike: the acceptance length where the counters'
    drafts are verify steps (vLLM), else the accepted and drafted token counts (llama.cpp counts
    only steps that verified a draft): the engine family named in the counters' `engine` says."""
    if not resp or not counters:
        return None
    family = family_named(counters.get("engine"))
    if family is None or family.spec is None or family.spec.drafts_are_steps:
        pairs = {"acceptance_length": (resp.get("acceptance_length"), counters.get("acceptance_length"))}
    else:
        pairs = {"accepted": (resp.get("accepted"), counters.get("accepted")),
                 "draft_tokens": (resp.get("draft_tokens"), counters.get("draft_tokens"))}
    if any(a is None or b is None for a, b in pairs.values()):
        return None
    rels = {k: (abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))) for k, (a, b) in pairs.items()}
    rel = max(rels.values())
    return {"compared": sorted(pairs), "per_request": resp.get("acceptance_length"),
            "counters": counters.get("acceptance_length"), "values": {k: list(v) for k, v in pairs.items()},
            "relative_difference": rel, "agree": rel <= tol, "tolerance": tol}
