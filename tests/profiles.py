"""Profile pieces the end-to-end tests share.

`LAX_HEALTH` is for tests whose subject is not the client's health: budgets no busy machine can
exceed, so a test about exactness, thresholds or token counts never ends in exit 30 because
another process took a core. Tests *about* client health set their own budgets."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgate.config.profile import HealthBudgets

LAX_HEALTH = {"stamp_error_p99_ms": 1e9, "loop_lag_p99_ms": 1e9, "gc_pause_max_ms": 1e9, "cpu_max": 1e9, "schedule_lag_p99_ms": 1e9}
LAX_BUDGETS = HealthBudgets(**LAX_HEALTH)


def tiny_corpus(tmp: Path) -> Path:
    """Three short cases (two completions, one chat): an exactness check in about a second."""
    p = tmp / "corpus.jsonl"
    p.write_text("\n".join(orjson.dumps(c).decode() for c in [
        {"id": "a", "kind": "completion", "prompt": "def add(a, b):", "max_tokens": 12, "tags": ["short"]},
        {"id": "b", "kind": "completion", "prompt": "The river ran", "max_tokens": 12, "tags": ["short"]},
        {"id": "c", "kind": "chat", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8},
    ]) + "\n")
    return p
