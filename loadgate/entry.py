"""The `loadgate` command's entry point (`python -m loadgate` too): it starts the embedded engine
for `run` and `check` before anything else is imported (`loadgate.sim.early`), then runs the command
line (`loadgate.cli.main`) and exits at once."""

from __future__ import annotations

import os
import sys

from loadgate.sim.early import CA_VARIABLES, command_of, spawn_for_argv

# The commands that import aiohttp (they talk to an engine, or serve as one)
_AIOHTTP_COMMANDS = frozenset({"baseline", "check", "fingerprint", "replay", "run", "sim"})


def import_aiohttp_without_system_cas() -> None:
    """Import aiohttp with the system's CA store out of the way, then put the environment back.

    Importing aiohttp builds two client TLS contexts from the system's CA store (~140 ms of the
    `loadgate run` start on the 2-core machine, a fifth of its time to first request) that loadgate
    never uses: every session it opens to an https URL carries its own context, built when the
    session is made from the profile's `target.tls` (`net.http.SessionSettings.ssl_for`, the
    load transport, the protocol gate's probes), with the system's CAs read then, the environment
    restored. A request that reached aiohttp's own default would fail its certificate check, loudly."""
    saved = {k: os.environ.get(k) for k in CA_VARIABLES}
    os.environ.update(dict.fromkeys(CA_VARIABLES, os.devnull))
    try:
        import aiohttp  # noqa: F401  (imported here for the sake of its import-time contexts)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    """`loadgate.cli.main`, with the embedded engine started first, then exit at once. Everything is
    written and closed by then (records, summary, verdict; the simulator and workers stopped), so the
    interpreter's teardown (100-150 ms with numpy and scipy loaded, on the 2-core machine) is skipped."""
    argv = sys.argv[1:]
    spawn_for_argv(argv)
    if command_of(argv) in _AIOHTTP_COMMANDS:
        import_aiohttp_without_system_cas()
    from loadgate.cli import main as cli_main

    code = cli_main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
