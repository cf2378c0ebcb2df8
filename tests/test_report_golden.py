"""`loadgate report` and `compare` on run folders written by the previous version (record schema
v1, no verdict.json): the tables they print are the ones that version printed (its output, kept
in tests/data/runs-v1/golden/), apart from lines added since, which are listed here by pattern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadgate.cli import main
from loadgate.records import read_records

RUNS = Path(__file__).parent / "data" / "runs-v1"
GOLDEN = RUNS / "golden"
# Lines a newer loadgate may print that the previous version did not (each a regex, whole line).
ADDED: tuple[str, ...] = ()


def assert_golden_plus_added(new: str, golden: str) -> None:
    """Every golden line appears in order in the new output; every other new line is an ADDED one."""
    want = golden.splitlines()
    k = 0
    extra = []
    for line in new.splitlines():
        if k < len(want) and line == want[k]:
            k += 1
        else:
            extra.append(line)
    assert k == len(want), f"golden line {k + 1} missing or changed: {want[k]!r}"
    unexplained = [x for x in extra if not any(re.fullmatch(p, x) for p in ADDED)]
    assert not unexplained, f"lines the previous version did not print: {unexplained[:5]}"


def test_the_fixtures_are_schema_v1_runs():
    line = (RUNS / "single" / "records.jsonl").read_bytes().split(b"\n", 1)[0]
    assert line.startswith(b'{"v":1,')
    recs = list(read_records(RUNS / "single" / "records.jsonl", include_warmup=True))
    assert len(recs) == 34 and all(r.v == 2 for r in recs)  # read into today's Record


@pytest.mark.parametrize("run", ["single", "failing", "sweep", "openloop", "ab"])
@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
def test_report_prints_what_the_previous_version_printed(run, fmt, capsys, monkeypatch):
    monkeypatch.chdir(RUNS)
    main(["report", "--format", fmt, run])
    assert_golden_plus_added(capsys.readouterr().out, (GOLDEN / f"{run}.{fmt}.txt").read_text())


@pytest.mark.parametrize("args,golden", [(["single", "failing"], "compare-single-failing"), (["ab"], "compare-ab")])
def test_compare_prints_what_the_previous_version_printed(args, golden, capsys, monkeypatch):
    monkeypatch.chdir(RUNS)
    main(["compare", *args])
    assert_golden_plus_added(capsys.readouterr().out, (GOLDEN / f"{golden}.table.txt").read_text())
