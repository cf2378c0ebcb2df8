"""What a command imports before it runs: the command line declares every command without importing
a stage, and the simulator's own entry point imports nothing of the client."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fixtures_path import REPO

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


def test_the_stages_a_run_needs_before_its_first_request_load_no_numeric_library():
    """The profile, the run's orchestration and the engine connection: numpy, tabulate and the
    Prometheus parser are imported where figures, tables and metrics are computed (after the check
    has begun), not before the first request."""
    got = imported_after("import loadgate.cli, loadgate.runs, loadgate.config.profile, loadgate.net.connect",
                         ("numpy", "scipy", "tabulate", "prometheus_client", "jsonschema"))
    assert got == []


def test_the_entry_point_starts_the_embedded_engine_before_it_imports_click():
    code = ("import sys; sys.argv = ['loadgate', 'run', 'profiles/quickstart.yaml', '--help']; "
            "import loadgate.sim.early as e; e.spawn_for_argv(['run', 'profiles/quickstart.yaml']); "
            "print(len(e.EARLY), 'click' in sys.modules, file=sys.stderr); e.stop_all()")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert err.strip().splitlines()[-1] == "1 False"


def test_the_early_childs_path_imports_neither_the_client_nor_the_command_line():
    assert imported_after("import loadgate.sim.serve, loadgate.sim.server", CLIENT + ("click", "loadgate.sim.cli")) == []


def test_the_analysis_stage_and_the_verdict_load_no_network_code():
    """Summaries, A/B statistics and the verdict read run folders: the Prometheus snapshots they
    compare are `loadgate.snapshot`, and the verdict's words for a check that was not established
    come from `loadgate.exactness.outcome`, not from the live check and its transport."""
    pkg = REPO / "loadgate"
    mods = [f"loadgate.{d.replace('/', '.')}.{p.stem}" for d in ("analysis", "core", "engine/adapters")
            for p in (pkg / d).glob("*.py") if p.stem != "__init__"]  # the engine families: pure too
    assert len(mods) >= 14
    statement = "import " + ", ".join(mods + ["loadgate.verdict"])
    assert imported_after(statement, ("aiohttp", "loadgate.exactness.check", "loadgate.load.target", "loadgate.net.http")) == []
