"""One figure registry: thresholds, A/B, the tables and `ab.decide_on` list exactly its figures, and
adding a figure is one entry (docs/contributing.md's own example, run here)."""

from __future__ import annotations

import re

import pytest

from loadgate.analysis import abstats
from loadgate.analysis.summary import level_summary
from loadgate.config.profile import AB
from loadgate.core import figures, thresholds
from loadgate.core.figures import Figure
from loadgate.records import Record
from loadgate.report.html import level_table_html
from loadgate.report.table import level_table
from tests.fixtures_path import REPO
from tests.recs import make_record

RECIPES = REPO / "docs" / "contributing.md"
PROFILE = {"workload": {"token_mismatch_limit": 0.0}}


def records() -> list[Record]:
    return [make_record(i=k, start_ns=0, end_ns=40_000_000 + k, chunk_ns=[10_000_000 + k, 20_000_000, 30_000_000],
                        chunk_tokens=[1, 1, 2], completion_tokens=4, output_tokens_planned=4) for k in range(5)]


def table_names(text: str) -> list[str]:
    """The metric column of a console level table."""
    return [line.split("  ")[0].strip() for line in text.splitlines()[2:]]


def test_thresholds_ab_and_tables_list_exactly_the_registrys_figures():
    dist = [f for f in figures.FIGURES if f.kind == "distribution"]
    scalars = [f.name for f in figures.FIGURES if f.kind == "scalar"]
    adjusted = [f.name + "_error_adjusted" for f in dist if f.error_adjusted]
    assert set(thresholds.metrics()) == {f.name for f in dist} | set(adjusted) | set(scalars)
    assert list(abstats.figures()) == [f.name if s == "value" else f"{f.name}.{s}" for f in figures.FIGURES
                                       for s in f.ab]
    s = level_summary(records(), None, [], PROFILE)
    # no request streamed reasoning: the summary and the tables leave out the figures of a reasoning
    # phase (ttfa and itl_answer would repeat ttft and itl)
    assert list(s.metrics) == [n for n in figures.metric_names() if not figures.figure(n.removesuffix(
        "_error_adjusted")).reasoning]
    rows = [f.name for f in dist if f.table and not f.reasoning]
    shown = table_names(level_table(s))
    assert [n.removesuffix(" (errors as +inf)") for n in shown if "errors as" not in n] == rows
    assert len(shown) == len(figures.table_rows(s.metrics)) == len(figures.table_rows()) < \
        len(figures.table_rows({"reasoning_tokens": {"count": 1}}))
    assert level_table_html(s).count("<tr><td>") == len(figures.table_rows(s.metrics))


def recipe_example() -> str:
    text = RECIPES.read_text()
    block = text[text.index("## Add a figure"):]
    return re.search(r"```python\n(.*?)```", block, re.S).group(1)  # type: ignore[union-attr]


def test_adding_a_figure_is_one_registry_entry(monkeypatch):
    """docs/contributing.md's example entry, added to the registry: the summary computes it, the table shows
    it, a threshold on it parses and is judged, A/B compares it, `ab.decide_on` accepts it."""
    code = recipe_example()
    ns: dict = {"Record": Record, "Figure": Figure}
    exec(code.replace("\n\nFigure(", "\n\nentry = Figure(").rstrip().rstrip(","), ns)  # the entry, named
    new: Figure = ns["entry"]
    assert new.name not in {f.name for f in figures.FIGURES}
    monkeypatch.setattr(figures, "FIGURES", (*figures.FIGURES, new))
    s = level_summary(records(), None, [], PROFILE)
    assert s.metrics[new.name]["p50"] == pytest.approx(20.0, abs=1e-3)  # the second chunk at 20 ms
    assert new.name in table_names(level_table(s))
    t = thresholds.parse(new.name, "p(99) < 300ms")
    assert thresholds.evaluate(t, s).passed
    assert f"{new.name}.p50" in abstats.figures()
    assert AB(decide_on=(f"{new.name}.p50",)).check() == []
    assert AB(decide_on=("no_such.p50",)).check()
