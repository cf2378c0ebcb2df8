"""The suite's layout: one folder per stage of the package (`core/`, `engine/`, `config/`,
`analysis/`, `sim/`, `load/`, `exactness/`, `gate/`, `report/`; `vocabulary/` for the top-level
modules every stage reads, `house/` for the structure and the pointers), whose tests run on the
stage's own inputs where they can; `e2e/`, whose tests go through the command line, a run folder or a
spawned process; and `engines/`, against real engines (marked `engine`, run by CI's engine step).

Every test under `e2e/` is marked `e2e` here, so
`python -m pytest -q -m "not e2e and not engine and not timing"` runs the stage tests alone and
`-m e2e` the end-to-end tier (a `-m` on the command line replaces the default one)."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent / "e2e"
PACKAGE = Path(__file__).resolve().parents[1] / "loadgate"


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package to bytecode once, in the controlling process, before any test runs: the
    suite starts ~150 child processes (embedded simulators, load workers, `python -m loadgate`), and
    where PYTHONDONTWRITEBYTECODE is set (CI sandboxes, this project's development machine) each of
    them would otherwise compile every module it imports from source (~0.1 s a process on 2 cores).
    A normal install, or any first import without that variable, leaves the same files."""
    if not hasattr(config, "workerinput"):  # pytest-xdist's workers find them made
        compileall.compile_dir(PACKAGE, quiet=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject's addopts): one worker per core, unless the selection can hold a test of
    the tiers that must have the machine to themselves: the timing tests (`-m timing`) and the real
    engines (`-m engine`, whose servers each worker would start again) then run in one process.
    The mark expression is evaluated, so `-m "not e2e"` (which selects timing tests too) is one
    process, and the default `not engine and not timing` is not."""
    from _pytest.mark.expression import Expression

    expr = config.getoption("markexpr") or ""
    if not expr:
        return 0
    compiled = Expression.compile(expr)
    if any(compiled.evaluate(lambda name, _m=m, **kw: name == _m) for m in ("timing", "engine", "ray")):
        return 0
    return None
