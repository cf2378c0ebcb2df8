"""The `loadgate` command's entry point (`python -m loadgate` too): it starts the embedded engine
for `run` and `check` before anything else is imported (`loadgate.sim.early`), then runs the command
line (`loadgate.cli.main`) and exits at once."""

from __future__ import annotations

import os
import sys

from loadgate.sim.early import spawn_for_argv


def main() -> None:
    """`loadgate.cli.main`, with the embedded engine started first, then exit at once. Everything is
    written and closed by then (records, summary, verdict; the simulator and workers stopped), so the
    interpreter's teardown (100-150 ms with numpy and scipy loaded, on the 2-core machine) is skipped."""
    spawn_for_argv(sys.argv[1:])
    from loadgate.cli import main as cli_main

    code = cli_main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
