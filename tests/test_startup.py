"""What a command imports before it runs: the command line declares every command without importing
a stage, and the simulator's own entry point imports nothing of the client."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "aiohttp", "numpy", "jsonschema", "yaml", "tabulate", "loadgate.runs")
CLIENT = ("loadgate.runs", "loadgate.load", "loadgate.analysis", "loadgate.gate", "loadgate.exactness",
          "loadgate.engine", "loadgate.report", "loadgate.verdict", "loadgate.commands", "loadgate.cli")


def imported_after(statement: str, names: tuple[str, ...]) -> list[str]:
    code = (f"import sys, json; {statement}; "
            f"print(json.dumps(sorted(m for m in sys.modules for n in {names!r} if m == n or m.startswith(n + '.'))),"
            f" file=sys.stderr)")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    return json.loads(err.strip().splitlines()[-1])


def test_the_command_line_imports_no_stage_and_no_heavy_library():
    assert imported_after("import loadgate.cli", HEAVY) == []


def test_help_lists_every_command_without_importing_them():
    assert imported_after("import loadgate.cli as c; c.main(['--help'])", HEAVY + ("loadgate.sim.cli",)) == []


def test_the_simulators_entry_point_imports_no_client_code():
    assert imported_after("import loadgate.sim.cli", CLIENT) == []


def test_the_lazy_sim_command_is_described_as_it_describes_itself():
    from loadgate.cli import cli
    from loadgate.sim.cli import sim

    assert type(cli).LAZY["sim"][2] == sim.get_short_help_str(limit=1000)
