"""Exit codes are an API: one table (`loadgate.errors.Exit`), which the README's table must match
row for row, the exceptions and the verdict take their codes from, and nothing writes as a bare
number."""

from __future__ import annotations

import ast
import re

from loadgate import errors
from loadgate.errors import EXIT_CODES, Exit, LoadgateError
from tests.fixtures_path import REPO


def readme_exit_table() -> dict[int, str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows: dict[int, str] = {}
    for line in section.splitlines():
        m = re.match(r"^\| ([\d, ]+) \| (.*) \|$", line)
        if m:
            for code in m.group(1).split(","):
                rows[int(code)] = m.group(2)
    return rows


def test_the_readmes_exit_code_table_is_the_enum_row_for_row():
    assert readme_exit_table() == {int(e): e.meaning for e in Exit}


def test_every_code_has_one_member_and_the_short_words_come_from_it():
    assert len({int(e) for e in Exit}) == len(Exit) and EXIT_CODES == {int(e): e.words for e in Exit}


def test_every_exception_ends_with_a_code_of_the_table():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, LoadgateError)]
    assert len(classes) >= 8
    assert all(c.exit_code in EXIT_CODES for c in classes), [(c.__name__, c.exit_code) for c in classes]


def test_no_verdict_is_built_from_a_bare_number():
    """`Verdict(30, ...)` or `return 22, "inconclusive", ...` in loadgate/: the code belongs to `Exit`."""
    bad = []
    for path in (REPO / "loadgate").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Verdict" and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 3 \
                    and isinstance(node.value.elts[0], ast.Constant) and isinstance(node.value.elts[0].value, int) \
                    and path.name == "verdict.py":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, bad
