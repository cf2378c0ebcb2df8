"""The suite's layout: one folder per stage of the package (`core/`, `engine/`, `config/`,
`analysis/`, `sim/`, `load/`, `exactness/`, `gate/`, `report/`; `vocabulary/` for the top-level
modules every stage reads, `house/` for the structure and the pointers), whose tests run in-process
on the stage's own inputs; `e2e/`, whose tests go through the command line, a run folder or a
spawned process; and `engines/`, against real engines (marked `engine`, run by CI's engine step).

Every test under `e2e/` is marked `e2e` here, so `python -m pytest -q -m "not e2e"` runs the
stage tests alone (about a minute) and `-m e2e` the end-to-end tier."""

from __future__ import annotations

from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject's addopts): one worker per core, except for the tiers that must have
    the machine to themselves: the timing tests (`-m timing`) and the real engines (`-m engine`,
    whose servers each worker would start again) run in one process."""
    expr = config.getoption("markexpr") or ""
    if any(f"not {m}" not in expr and m in expr for m in ("timing", "engine")):
        return 0
    return None
