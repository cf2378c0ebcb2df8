"""The house runs one way: the package's imports (read with `ast`, late imports in functions
included) form no cycle and never reach from a lower stage up into a higher one; the simulator is
imported only by the embedded launch and the command line; and only the command layer writes to
stdout or stderr."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures_path import REPO

PKG = REPO / "loadgate"

# Stages, lowest first: the package's folders in their import order, with the top-level modules
# placed among them. A module belongs to the longest prefix that names it; it may import only
# modules of its own stage or lower ones. So the folders themselves show the layers: the bottom
# is the top-level vocabulary modules (exit codes, records, Prometheus snapshots) and `core/` (the
# figure registry, the threshold grammar, the API names), which every stage reads.
STAGES: tuple[tuple[str, ...], ...] = (
    ("loadgate.errors", "loadgate.jsonutil", "loadgate.version", "loadgate.secrets", "loadgate.runstate",
     "loadgate.records", "loadgate.snapshot", "loadgate.documents"),
    ("loadgate.core",),
    ("loadgate.engine",),
    ("loadgate.config",),
    ("loadgate.analysis",),
    ("loadgate.sim",),
    ("loadgate.net",),
    ("loadgate.load",),
    ("loadgate.exactness",),
    ("loadgate.gate",),
    ("loadgate.verdict",),
    ("loadgate.report",),
    ("loadgate.runs",),
    ("loadgate.commands", "loadgate.cli", "loadgate.entry", "loadgate", "loadgate.__main__"),
)
FOLDERS = sorted({p.parent.name for p in PKG.glob("*/__init__.py")})
COMMAND_LAYER = {"loadgate.entry", "loadgate.cli", "loadgate.commands", "loadgate.sim.cli",
                 "loadgate.sim.serve"}  # serve: the early child's command line, which has no click
SIM_IMPORTERS = {"loadgate.net.connect", "loadgate.entry", "loadgate.cli", "loadgate.commands"}  # entry, commands: the early start


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(PKG.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


MODULES = modules()


def imports(name: str) -> Iterator[tuple[str, int]]:
    """(imported loadgate module, line) for every import statement in the module, wherever it is."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" for a in node.names]  # a name that is no module: `mod` itself
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t, node.lineno


def stage(name: str) -> int:
    best, depth = -1, -1
    for k, prefixes in enumerate(STAGES):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > depth:
                best, depth = k, len(p)
    assert best >= 0, f"{name} is in no stage: add it to STAGES"
    return best


@functools.cache
def graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in imports(m) if t != "loadgate" or m == "loadgate"} for m in MODULES}


def test_no_import_reaches_up_into_a_higher_stage():
    upward = [f"{m}:{line} imports {t} (stage {stage(t)} > {stage(m)})"
              for m in MODULES for t, line in imports(m) if stage(t) > stage(m)]
    assert not upward, "\n".join(upward)


def find_cycles(g: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(g[m]):
            if state.get(t) == 1:
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    return cycles


def test_the_imports_form_no_cycle():
    cycles = find_cycles(graph())
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles[:5])


def folder_of(name: str) -> str:
    """`loadgate.<folder>` for a module inside a folder, the module's own name otherwise."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or MODULES[name].name == "__init__.py" else name


def folder_graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in graph().items():
        out.setdefault(folder_of(m), set()).update(folder_of(t) for t in targets if folder_of(t) != folder_of(m))
    return out


def test_every_folder_is_a_stage_of_its_own_and_the_folders_import_no_cycle():
    """Each folder is one stage in STAGES (the order is the folders', not a list of modules), and at
    folder level the imports form no cycle either."""
    assert FOLDERS and all(any(p == f"loadgate.{f}" for ps in STAGES for p in ps) for f in FOLDERS)
    prefixes = [p for ps in STAGES for p in ps]
    assert all(p.count(".") <= 1 for p in prefixes), "a stage names a module inside a folder"
    cycles = find_cycles(folder_graph())
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles[:5])


def reach(name: str) -> set[str]:
    """Every module `name` imports, directly or through others."""
    g, seen, todo = graph(), set(), [name]
    while todo:
        for t in g[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_nothing_the_load_and_analysis_stages_import_reaches_the_stages_above_them():
    above = ("loadgate.runs", "loadgate.gate", "loadgate.verdict", "loadgate.report", "loadgate.commands")
    bad = [f"{m} reaches {t}" for m in MODULES if m.startswith(("loadgate.load", "loadgate.analysis"))
           for t in reach(m) if t.startswith(above)]
    assert not bad, "\n".join(bad[:10])


def test_only_the_embedded_launch_and_the_command_line_import_the_simulator():
    bad = [f"{m}:{line} imports {t}" for m in MODULES if not m.startswith("loadgate.sim")
           for t, line in imports(m) if t.startswith("loadgate.sim") and m not in SIM_IMPORTERS]
    assert not bad, "\n".join(bad)


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (none for any other node)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""] if isinstance(node, ast.ImportFrom) else []


def writes_to_the_terminal(name: str) -> list[str]:
    """Calls of print / click.echo / click.secho / sys.stdout|stderr.write, any use of sys.stdout
    or sys.stderr (handing them to a library that writes, such as tqdm), and click imports."""
    path = MODULES[name]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "echo",
                                                                                               "secho"):
            found.append(f"{where} calls {node.func.id}()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "sys" and node.attr in ("stdout", "stderr", "__stdout__", "__stderr__"):
                found.append(f"{where} uses sys.{node.attr}")
            elif node.value.id == "click" and node.attr in ("echo", "secho", "echo_via_pager"):
                found.append(f"{where} calls click.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("click", "sys", "builtins") and any(
                a.name in ("echo", "secho", "stdout", "stderr", "print") for a in node.names):
            found.append(f"{where} imports a writer from {node.module}")
        elif "click" in imported(node):
            found.append(f"{where} imports click")
    return found


def test_only_the_command_layer_writes_to_stdout_or_stderr():
    bad = [w for m in MODULES if m not in COMMAND_LAYER for w in writes_to_the_terminal(m)]
    assert not bad, "\n".join(bad)


def test_the_checks_find_what_they_look_for(tmp_path):
    """The rules above are not vacuous: the command layer does write, the simulator is imported,
    and a planted upward import would be caught."""
    assert writes_to_the_terminal("loadgate.commands")
    assert any(t.startswith("loadgate.sim") for t, _ in imports("loadgate.net.connect"))
    assert stage("loadgate.records") < stage("loadgate.load.plan") < stage("loadgate.gate.policy")
    assert stage("loadgate.core.figures") < stage("loadgate.config.contract") < stage("loadgate.exactness.contract")
    assert "loadgate.engine" in folder_graph()["loadgate.load"]
    assert any(t.startswith("loadgate.gate.") for t in reach("loadgate.commands"))
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_classes_in_loadgate_share_a_name():
    """One name, one thing: a reader (or an import) never has to ask which `Engine` is meant."""
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{name}:{node.lineno}")
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


def test_the_run_orchestration_holds_no_loop_over_load_levels():
    """The level loop is the load stage's (`loadgate.load.levels.run_levels`): `runs.py` neither
    iterates levels nor builds a phase."""
    tree = ast.parse(MODULES["loadgate.runs"].read_text())
    loops = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor))
             and "level" in ast.unparse(n.target).lower() + ast.unparse(n.iter).lower()]
    phases = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "Phase"]
    assert loops == [] and phases == [], (loops, phases)


ENGINE_NAME = re.compile(r"^(vllm|sglang|llamacpp|llama)\b", re.IGNORECASE)
# one module per engine family: the only place of the client that names one. The simulator is the
# other side of the wire: it plays several engines' formats (`style="sglang"`), and is exempt.
ENGINE_HOMES = ("loadgate.engine.adapters", "loadgate.sim")


def _engine_strings(node: ast.AST) -> list[str]:
    """The engine-name string constants in `node` (a constant, or a tuple / list / set of them)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
            and ENGINE_NAME.match(i.value)]


def engine_name_tests(source: str, where: str) -> list[str]:
    """Comparisons with an engine's name (`==`, `!=`, `in`, `match` cases) and prefix or suffix
    tests of one (`startswith`, `endswith`): a branch on which engine it is."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hits: list[str] = []
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                hits += _engine_strings(side)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix"):
            for arg in node.args:
                hits += _engine_strings(arg)
        elif isinstance(node, ast.MatchValue):
            hits += _engine_strings(node.value)
        found += [f"{where}:{node.lineno} tests for {h!r}" for h in hits]  # type: ignore[attr-defined]
    return found


def test_no_module_but_the_engine_families_branches_on_an_engine_name():
    bad = [w for m, path in MODULES.items() if not m.startswith(ENGINE_HOMES)
           for w in engine_name_tests(path.read_text(), m)]
    assert not bad, "\n".join(bad)


def test_the_engine_name_check_finds_a_branch_on_an_engine():
    planted = ("if api.startswith('llamacpp'): pass\nx = e == 'vllm'\ny = k in ('sglang', 'other')\n"
               "match n:\n    case 'vllm:x': pass\nz = s.startswith(('a', 'llama'))\nok = 'vllm' + api\n")
    assert sorted(w.split(" tests for ")[1] for w in engine_name_tests(planted, "p")) == [
        "'llama'", "'llamacpp'", "'sglang'", "'vllm'", "'vllm:x'"]
    assert engine_name_tests(MODULES["loadgate.engine.adapters.vllm"].read_text(), "vllm")  # it may, and does


# Text for people is assembled only in report/ and the command layer. What counts: joining pieces
# into lines (a `join` whose separator holds a newline) and tables (`tabulate`). One-line messages
# (an error's, a reason kept in a run file) may be written where they arise. The simulator writes
# server responses, and a Prometheus text is data, not prose.
TEXT_HOMES = ("loadgate.report", "loadgate.sim", *COMMAND_LAYER)
NOT_PROSE = {"loadgate.net.scrape": "keeps the lines of a Prometheus text"}


def builds_text(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str) \
                and "\n" in node.func.value.value:
            found.append(f"{where}:{node.lineno} joins lines of text")
        elif "tabulate" in imported(node):
            found.append(f"{where}:{node.lineno} imports tabulate")
    return found


def test_text_for_people_is_assembled_only_in_the_report_and_the_command_layer():
    bad = [w for m, path in MODULES.items() if not m.startswith(TEXT_HOMES) and m not in NOT_PROSE
           for w in builds_text(path.read_text(), m)]
    assert not bad, "\n".join(bad)
    planted = "from tabulate import tabulate\nx = '\\n'.join(lines)\ny = ', '.join(xs)\nz = b'\\n'.join(bs)\n"
    assert sorted(w.split(" ", 1)[1] for w in builds_text(planted, "p")) == ["imports tabulate", "joins lines of text"]
