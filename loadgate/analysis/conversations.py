"""Conversations' figures (`workload.sessions`; records v8): the cached prompt tokens engines report
per request, and a level's conversations with the turns not sent. Pure functions of records."""

from __future__ import annotations

from typing import Any

from loadgate.records import Record


def cached_tokens(records: list[Record]) -> dict[str, Any] | None:
    """The prompt tokens the engine said its prefix cache served, per request that said (succeeded
    ones): how many said, their mean and total, and the mean prompt length beside it; None when none said."""
    said = [r for r in records if r.succeeded and r.cached_tokens is not None]
    if not said:
        return None
    prompts = [r.prompt_tokens for r in said if r.prompt_tokens is not None]
    return {"requests": len(said), "mean": sum(r.cached_tokens or 0 for r in said) / len(said),
            "total": sum(r.cached_tokens or 0 for r in said),
            "prompt_tokens_mean": sum(prompts) / len(prompts) if prompts else None}


MAX_BROKEN = 20  # conversations listed by name in a level's `conversations.broken`


def conversation_counts(records: list[Record]) -> dict[str, Any] | None:
    """A level's conversations (records with `conversation`): how many began, finished every turn,
    their turns sent, and the turns not sent (a turn that failed ends its conversation; a stop ends
    it too), with the first `MAX_BROKEN` conversations that ended early: which turn failed (its
    error) and which turns were not sent. None without conversations."""
    convs: dict[int, list[Record]] = {}
    for r in records:
        if r.conversation is not None:
            convs.setdefault(r.conversation, []).append(r)
    if not convs:
        return None
    broken: list[dict[str, Any]] = []
    not_sent = complete = 0
    for c in sorted(convs):
        recs = sorted(convs[c], key=lambda r: r.turn or 0)
        last = recs[-1]
        planned = last.turns or len(recs)
        missing = planned - len(recs)
        if missing <= 0:
            complete += 1
            continue
        not_sent += missing
        if len(broken) < MAX_BROKEN:
            broken.append({"conversation": c, "turn": last.turn, "turns": planned,
                           "error": None if last.error is None else f"{last.error.kind}: {last.error.detail[:120]}",
                           "not_sent": [len(recs) + 1, planned]})
    return {"conversations": len(convs), "complete": complete, "turns_sent": sum(len(v) for v in convs.values()),
            "not_sent": not_sent, "ended_early": len(convs) - complete, "broken": broken}
