"""The exactness check's report for people, from its JSON (`exactness.json`, written by
`loadgate.exactness.result`): the contract verbatim, every non-identical sequence, and what was
proven.

A summary never hides outliers: every sequence whose verdict is not `identical` is listed with
its scenario and first divergence, however good the pass rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgate.exactness.outcome import RETRIES, lost_requests


def drift_totals(name: str, d: dict[str, Any]) -> str:
    """'repeat:…: 47 of 1,200 differ from the baseline; 11 of 1,200 differ from their prompt's modal
    output; 2 of 24 prompts vary (2 counting logprobs)'."""
    n = d["compared"]
    line = (f"{name}: {d['differ_from_baseline']:,} of {n:,} differ from the baseline; {d['differ_from_modal']:,} of "
            f"{n:,} differ from their prompt's modal output; {d['prompts_varying']} of {d['prompts']} prompts vary "
            f"({d['prompts_varying_with_logprobs']} counting logprobs)")
    if d["failed"]:
        line += f"; {d['failed']} failed request(s) not counted"
    return line


def drift_rows(d: dict[str, Any], limit: int = 6) -> list[list[str]]:
    """One row per prompt that varies: requests, distinct outputs, modal count, and its deviants
    as repeat/batch/position @ first divergence from the modal output."""
    rows = []
    for p in d["varying"]:
        deviants = [f"r{m['repeat']} b{m['batch']}/{m['position']} @{v['first_divergence_from_modal']}"
                    for v in p["versions"] if not v["modal"] for m in v["requests"]]
        shown = ", ".join(deviants[:limit]) + (f", … {len(deviants) - limit} more" if len(deviants) > limit else "")
        rows.append([p["case"], str(p["requests"]), f"{p['distinct_outputs']} ({p['distinct_with_logprobs']})",
                     f"{p['modal_count']}{'' if p['modal_equals_baseline'] else ' (not the baseline)'}",
                     shown or "(logprobs only)"])
    return rows


DRIFT_HEADERS = ["case", "requests", "outputs (with logprobs)", "modal", "deviants: repeat batch/position @ divergence"]


def _tok(v: Any) -> str:
    return "end" if v is None else str(v)


def _grouped(rows: list[list[Any]], repeated: set[str], outputs: list[Any]) -> list[list[Any]]:
    """In scenarios that repeat prompts, rows of one output (`outputs`: their hashes) alike but for
    the in-flight count become one row, its
    case marked ×N and its in-flight counts given as a range (every sequence stays counted, and
    listed in exactness.json); other scenarios keep a row per sequence."""
    out: list[list[Any]] = []
    groups: dict[tuple[Any, ...], tuple[list[Any], list[str]]] = {}
    for r, output in zip(rows, outputs, strict=True):
        if r[0] not in repeated:
            out.append(r)
            continue
        key = (r[0], r[1], output, *r[3:])
        if key in groups:
            groups[key][1].append(r[2])
        else:
            groups[key] = (r, [r[2]])
            out.append(r)
    for r, flights in groups.values():
        if len(flights) > 1:
            nums = sorted(int(str(f).split()[0]) for f in flights)
            r[1] = f"{r[1]} ×{len(flights)}"
            r[2] = f"{nums[0]}–{nums[-1]}" if nums[0] != nums[-1] else str(nums[0])
    return out


def protocol_lines(checks: list[dict[str, Any]]) -> list[str]:
    """The protocol block: one line per check, what it proved (or its name), and what it saw."""
    mark = {"passed": "ok", "failed": "FAILED", "not applicable": "n/a", "not established": "NOT ESTABLISHED"}
    lines = [f"protocol: {sum(c['status'] == 'passed' for c in checks)} of {len(checks)} passed"]
    for c in checks:
        what = c["proved"] if c["status"] == "passed" else c["status"]
        lines.append(f"  {mark[c['status']]:<6} {c['name']}: {what} ({c['detail']})")
    return lines


def sampling_lines(s: dict[str, Any]) -> list[str]:
    """The sampling contracts' block: seeded replay, and the distribution test with its power."""
    lines = []
    sr = s.get("seeded_replay")
    if sr is not None:
        state = "passed" if sr["passed"] else "NOT ESTABLISHED" if sr["failed_requests"] and not sr["differ"] else "FAILED"
        agreed = sr["cases"] - len(sr["differ"]) - len(sr["failed_requests"])
        lines.append(f"seeded-replay at temperature {sr['temperature']:g}: {state}: {agreed} "
                     f"of {sr['cases']} cases gave the same ids in all {sr.get('replays', 2)} sends with their seed "
                     f"({sr['engine_seeds']})")
        for d in sr["differ"][:8]:
            lines.append(f"  {d['case']}: {d.get('versions', 2)} outputs in {sr.get('replays', 2)} sends, first "
                         f"divergence at token {d['first_divergence']}")
    dp = s.get("distribution_preserving")
    if dp is not None and dp.get("prefixes") is None:
        lines.append(f"distribution-preserving: NOT ESTABLISHED: {dp.get('reason')}")
    elif dp is not None:
        state = "passed" if dp["passed"] else "FAILED"
        if not dp.get("established", True):
            state = "NOT ESTABLISHED"
        share = dp.get("verify_share")
        lines.append(
            f"distribution-preserving at temperature {dp['temperature']:g}, alpha {dp['alpha']:g} (Holm over "
            f"{len(dp['prefixes'])} prefixes): {state}; {dp['samples']} samples a side per prefix detect, with "
            "probability >= 0.8, "
            + (f"a shift toward the likeliest tokens (what a wrong acceptance rule makes) of total-variation "
               f"distance >= {dp['detectable_shift_tv']:.3f}, and any " if "detectable_shift_tv" in dp else "any ")
            + f"difference of total-variation distance >= {dp['detectable_tv']:.3f} over the pooled categories"
            + ("" if share is None else f"; in {share:.0%} of the candidate's sample requests (the least of the "
               "prefixes) the engine showed draft activity")
            + (f"; NOT ESTABLISHED: {dp['reason']}" if dp.get("reason") else ""))
        for p in dp["prefixes"]:
            lines.append(f"  {p['case']}: p = {p['p_value']:.3g}{' REJECTED' if p['rejected'] else ''}, "
                         f"observed TV {p['observed_tv']:.3f} over {len(p['categories'])} categories (chi-square "
                         f"{p['statistic']:.1f}, df {p['df']})")
    return lines


def _cache_note(scenario: dict[str, Any]) -> str:
    """', cache emptied, 0% prefix-cache hits' for a scenario of a check that recorded them (a check
    written before they were is rendered as it was)."""
    out = ""
    if "cache_reset" in scenario:
        reset = scenario["cache_reset"]
        out += (", no cache-reset route" if not reset else ", prompt cache off" if str(reset).startswith("cache_prompt")
                else ", cache emptied")
    pc = scenario.get("prefix_cache")
    if pc and pc.get("hit_rate") is not None:
        out += f", {pc['hit_rate']:.0%} prefix-cache hits"
    return out


def render(j: dict[str, Any], *, header: str = "") -> str:
    """Human-readable report from `result_json` output (so old runs render the same)."""
    from tabulate import tabulate

    lines = [header] if header else []
    lost = j.get("not_established") or []
    state = "PASSED" if j["passed"] else "FAILED" if j["reasons"] or not lost else "NOT ESTABLISHED"
    lines.append(f"exactness check: {state}")
    lines.append(f"contract: {j['contract']['words']}")
    sc = " · ".join(f"{k} ({v['requests']} requests, {v['in_flight']} in flight{_cache_note(v)})"
                    for k, v in j["scenarios"].items())
    lines.append(f"scenarios: {sc}")
    if j["skipped_cases"]:
        lines.append(f"skipped (prompt + max_tokens exceed the engine's context): {', '.join(j['skipped_cases'])}")
    lines.append("verdicts: " + " · ".join(f"{k} {v}" for k, v in sorted(j["verdicts"].items())))
    p = j["positions"]
    note = ""
    if p["ids_only"]:
        note = (f"; {p['ids_only']:,} on ids only, where the engine gave no real logprob (in all, it marked "
                f"{p['placeholders']:,} positions as placeholders, e.g. llama-server's 0.0 with an empty top list "
                "for tokens of a speculative step): those positions support no bit-exact claim")
    lines.append(f"positions compared before each first divergence: {p['compared']:,} "
                 f"({p['logprob']:,} on logprob values{note})")
    s = j["speculation"]
    if s["required"]:
        proof = (f"{s['requests_with_draft_activity']} of {s['requests']} requests showed draft activity"
                 + (f", server draft counters +{s['counter_drafts_delta']:,.0f}" if s["counter_drafts_delta"] else ""))
        lines.append(f"speculation: on ({s['source']}); {'proven: ' + proof if s['ran'] else 'NOT PROVEN: ' + proof}")
    for name, d in (j.get("drift") or {}).items():
        lines.append(f"run-to-run drift, {drift_totals(name, d)}")
        if d["varying"]:
            lines.append(tabulate(drift_rows(d), headers=DRIFT_HEADERS, tablefmt="simple", disable_numparse=True))
            lines.append("deviants: rK = the prompt's K-th repeat (from 0), bB/P = sent in group B of the scenario's "
                         "in-flight count, at position P; @N = first position differing from the modal output")

    def flight(n: dict[str, Any]) -> str:
        at = n.get("in_flight_at_divergence")
        return str(n["in_flight"]) if at is None else f"{n['in_flight']} ({at} at it)"

    rows = _grouped([[n["scenario"], n["case"], flight(n), n["verdict"] or "request failed", _tok(n["first_divergence"]),
                      f"{_tok(n['baseline_token'])} → {_tok(n['candidate_token'])}"
                      if n["first_divergence"] is not None else "",
                      "n/a" if n["baseline_top2_gap"] is None else f"{n['baseline_top2_gap']:.4f}",
                      "n/a" if n["max_ulp"] is None else n["max_ulp"], "yes" if n["passed"] else "NO"]
                     for n in j["non_identical"]], set(j.get("drift") or {}),
                    [n.get("output_sha256") for n in j["non_identical"]])
    if rows:
        lines.append(f"\nevery non-identical sequence ({len(j['non_identical'])}"
                     + (f", in {len(rows)} rows: a repeated prompt's equal outputs share one" if len(rows) < len(j["non_identical"]) else "")
                     + "):")
        lines.append(tabulate(rows, headers=["scenario", "case", "in flight", "verdict", "first divergence",
                                             "baseline → candidate", "baseline top-2 gap", "max ULP", "meets contract"],
                              tablefmt="simple", disable_numparse=True))
        if any(n.get("in_flight_at_divergence") is not None for n in j["non_identical"]):
            lines.append("in flight: requests in flight when the request was sent (and, in brackets, while its first "
                         "diverging token arrived, as the client saw it: sent and not yet answered; the engine's "
                         "batch in that step may differ by requests that came or went within one engine step)")
        why = [f"  {n['scenario']} {n['case']}: {n['why']}" for n in j["non_identical"]
               if not n["passed"] and n["why"] and n["why"] != n["verdict"]]
        if why:
            lines.append("why the failing ones fail:\n" + "\n".join(why[:20])
                         + (f"\n  … and {len(why) - 20} more" if len(why) > 20 else ""))
    if j.get("protocol"):
        lines += protocol_lines(j["protocol"])
    if j.get("sampling"):
        lines += sampling_lines(j["sampling"])
    if j.get("retried"):
        lines.append(f"retried: {j['retried']} request(s) sent again after a failure (at most {RETRIES} times each)")
    if lost:
        requests = lost_requests(lost)
        if requests:
            lines.append(f"NOT ESTABLISHED: {len(requests)} request(s) still failed after {RETRIES} retries, so nothing was "
                         f"compared for them: {', '.join(requests[:8])}{' …' if len(requests) > 8 else ''}")
        for item in (x for x in lost if x not in requests):
            lines.append(f"NOT ESTABLISHED: {item}")
    for reason in j["reasons"]:
        lines.append(f"FAILED: {reason}")
    return "\n".join(lines)


def _show_path(p: str) -> str:
    try:
        return str(Path(p).resolve().relative_to(Path.cwd()))
    except ValueError:
        return p


def header_of(report: dict[str, Any]) -> str:
    """The check's first line: candidate fingerprint, baseline, corpus (from exactness.json)."""
    b, c = report["baseline"], report["corpus"]
    return (f"candidate fingerprint {report['fingerprint_hash'][:16]} · baseline "
            f"{_show_path(b['file']) if b['file'] else 'sim-reference'} "
            f"(fingerprint {b['fingerprint_hash'][:16]}) · corpus {_show_path(c['path'])} "
            f"({c['cases']} cases, sha256 {c['sha256'][:12]})")


def report_text(report: dict[str, Any]) -> str:
    """The whole check report, as printed by `loadgate run`, `check` and `report`, from the
    exactness.json document."""
    text = render(report, header=header_of(report))
    if report.get("bundles"):
        text += (f"\nreproducers: {len(report['bundles'])} bundle(s) in {Path(report['bundles'][0]).parent}/ "
                 "(`loadgate replay BUNDLE` re-runs one)")
    return text
