"""Run-to-run drift: how the outputs of one prompt, sent several times in one scenario, vary.

A scenario that sends a prompt more than once (`repeat`) answers a question the comparison with
the baseline does not: given the same request under the same conditions, does the engine give
the same output each time? Per prompt, the outputs are grouped into *versions* (equal token ids
and finish reason); the *modal* version is the most common one (a tie goes to the one equal to
the baseline, else to the one seen first). Every other output is a *deviant*, listed with:
  repeat    how many earlier requests of the scenario sent the same prompt (0 for the first)
  batch     its send order // the scenario's requests in flight (the group of `in_flight`
            requests it was sent among; the loop is closed, so groups overlap in time)
  position  its send order % requests in flight
and its first divergence from the modal output. Distinct outputs are counted twice: by token ids,
and by token ids with their logprobs (the same ids with other logprob bits are another output).

The totals read as the source documents quote them: "x of N differ from the baseline; y of N
differ from their prompt's modal output; z of P prompts vary". Requests that failed compared
nothing and are counted apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgate.exactness.baseline import Baseline, seq_output


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """First index where two id lists differ (the shorter length when one extends the other)."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class _Version:
    ids: tuple[int, ...]
    equals_baseline: bool
    members: list[dict[str, int]] = field(default_factory=list)
    logprob_keys: set[tuple[Any, ...]] = field(default_factory=set)


def scenario_drift(sequences: Sequence[Any], in_flight: int, baseline: Baseline) -> dict[str, Any] | None:
    """The drift of one scenario's judged sequences (`check.SeqResult`, in send order), or None when
    no prompt was sent more than once in it."""
    sent = Counter(s.case_id for s in sequences)
    if not sent or max(sent.values()) < 2:
        return None
    repeat_of: dict[str, int] = {}
    versions: dict[str, dict[tuple[Any, ...], _Version]] = {}
    failed = 0
    for s in sorted(sequences, key=lambda s: s.order):
        rep = repeat_of.get(s.case_id, 0)
        repeat_of[s.case_id] = rep + 1
        if s.observed.decoded.error is not None:
            failed += 1
            continue
        out = s.observed.output()
        key = (out.ids, out.finish_reason)
        base = baseline.cases.get(s.case_id)
        vs = versions.setdefault(s.case_id, {})
        if key not in vs:
            b = seq_output(base) if base is not None else None
            vs[key] = _Version(out.ids, b is not None and (b.ids, b.finish_reason) == key)
        v = vs[key]
        v.members.append({"order": s.order, "repeat": rep, "batch": s.order // max(1, in_flight),
                          "position": s.order % max(1, in_flight)})
        v.logprob_keys.add(out.logprobs or ())
    prompts: list[dict[str, Any]] = []
    compared = differ_base = differ_modal = 0
    for case_id, vs in versions.items():
        ordered = list(vs.values())
        top = max(len(v.members) for v in ordered)
        modal = next((v for v in ordered if len(v.members) == top and v.equals_baseline),
                     next(v for v in ordered if len(v.members) == top))
        n = sum(len(v.members) for v in ordered)
        compared += n
        differ_base += sum(len(v.members) for v in ordered if not v.equals_baseline)
        differ_modal += n - len(modal.members)
        with_lp = sum(len(v.logprob_keys) for v in ordered)
        if len(ordered) > 1 or with_lp > 1:
            prompts.append({
                "case": case_id, "requests": n, "distinct_outputs": len(ordered),
                "distinct_with_logprobs": with_lp, "modal_count": len(modal.members),
                "modal_equals_baseline": modal.equals_baseline,
                "versions": [{"count": len(v.members), "modal": v is modal, "equals_baseline": v.equals_baseline,
                              "first_divergence_from_modal": None if v is modal else first_difference(modal.ids, v.ids),
                              "requests": v.members} for v in ordered]})
    return {"requests": len(sequences), "failed": failed, "compared": compared, "prompts": len(sent),
            "sent_once": sum(1 for n in sent.values() if n < 2),
            "differ_from_baseline": differ_base, "differ_from_modal": differ_modal,
            "prompts_varying": sum(1 for p in prompts if p["distinct_outputs"] > 1),
            "prompts_varying_with_logprobs": len(prompts), "varying": prompts}


def unstable(drift: dict[str, Any], logprobs: bool) -> int:
    """How many prompts broke `stable: true` in a scenario's drift: more than one output by ids and
    finish reason (`logprobs`: or by logprob bits)."""
    return int(drift["prompts_varying_with_logprobs" if logprobs else "prompts_varying"])
