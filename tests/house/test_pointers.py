"""Pointers in prose stay true: every module path (`loadgate/x/y.py`, `tests/…/test_x.py`,
`benchmarks/x.py`) or dotted module name (`loadgate.x.y`, optionally with an attribute after it)
that the README, docs/, the benchmarks' READMEs, the profiles and loadgate's own docstrings and help
texts name exists. (docs/validation/
holds recorded outputs, which keep the names of their day.)"""

from __future__ import annotations

import re
from pathlib import Path

import loadgate
from tests.fixtures_path import REPO

FILES = [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("benchmarks/**/*.md"),
         *REPO.glob("profiles/*.yaml"), *REPO.glob("loadgate/**/*.py")]


def _module_exists(parts: list[str]) -> bool:
    base = REPO.joinpath(*parts)
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _show(f: Path) -> str:
    return str(f.relative_to(REPO)) if f.is_relative_to(REPO) else str(f)


def dead_pointers(files: list[Path]) -> list[str]:
    bad = []
    for f in files:
        text = f.read_text()
        for m in re.finditer(r"\b(?:loadgate|tests|benchmarks)/[A-Za-z0-9_/.-]+\.py\b", text):
            if not (REPO / m.group(0)).exists():
                bad.append(f"{_show(f)}: {m.group(0)}")
        for m in re.finditer(r"\bloadgate(?:\.[a-z_][a-z0-9_]*)+", text):
            parts = m.group(0).split(".")
            if len(parts) == 2 and parts[1] in loadgate.__all__:
                continue  # the package's public API
            # a module, or a module and one attribute of it
            if not (_module_exists(parts) or _module_exists(parts[:-1]) and len(parts) > 2):
                bad.append(f"{_show(f)}: {m.group(0)}")
    return bad


def test_every_module_named_in_prose_exists():
    assert len(FILES) > 100
    assert not dead_pointers(FILES)


def test_a_dead_pointer_is_found(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see `loadgate/metrics.py` and `loadgate.load.nowhere.f`, not `loadgate/analysis/metrics.py`, "
                   "`loadgate.analysis.metrics.stats` or `loadgate.run`; `tests/test_structure.py` moved to "
                   "`tests/house/test_structure.py`")
    assert [b.split(": ")[1] for b in dead_pointers([doc])] == ["loadgate/metrics.py", "tests/test_structure.py",
                                                              "loadgate.load.nowhere.f"]
