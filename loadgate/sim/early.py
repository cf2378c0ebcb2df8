"""Starting the embedded engine the moment a command starts, before the command imports anything.

`loadgate run profile.yaml` and `loadgate check profile.yaml` spend ~0.5 s importing the client
(click, aiohttp, numpy, the stages) before they can talk to an engine, and the simulator's child
spends as long importing its own modules. Started first, the child imports on the machine's other
core meanwhile: the `loadgate` command calls `spawn_for_profile` with the profile's path before it
imports click, and the child (`python -m loadgate.sim --from-profile PATH`) reads the profile's
`target` section itself, so the parent parses nothing here. This module imports only the standard
library's `os`, `subprocess` and `sys`, for that reason.

The child prints `CONFIG_LINE` + its settings (JSON) once it has read them, before its own imports;
a profile whose target is not `endpoint: embedded`, or one it cannot read, makes it exit at once
without a word (the command's own loading reports the profile's faults). When the command has loaded
the profile it hands the child over with `loadgate.sim.process.take_prestarted(settings)`, which
compares those settings byte for byte (a child that does not match stays for another taker, and is
stopped with the rest when the command ends). The child's stdin is
a pipe from the command: when the command ends in any way (an error before it ever loads the
profile, `os._exit`, SIGKILL), the pipe closes and the child stops itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

READY_LINE = "loadgate sim listening on "  # loadgate.sim.cli prints it once it serves
CONFIG_LINE = "loadgate sim config "  # loadgate.sim.cli prints it in --from-profile mode

_COMMANDS = ("run", "check")  # the commands whose profile may name the embedded engine
CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")  # where OpenSSL looks for the system's CA store


class EarlyChild:
    """A simulator child started for a profile, not yet handed over."""

    def __init__(self, proc: subprocess.Popen[bytes], profile: str) -> None:
        self.proc = proc
        self.profile = profile
        self.settings: bytes | None = None  # its config line, once read (b"": it exited first)

    def stop(self) -> None:
        stop_child(self.proc)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Close its pipes and end it: SIGTERM, then SIGKILL after 5 s (an early child also stops on
    its own when its stdin closes)."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


EARLY: list[EarlyChild] = []


def child_env() -> dict[str, str]:
    """The simulator child's environment: this checkout's package first on PYTHONPATH, and the
    system's CA store out of the way. The simulator makes no outgoing TLS connection, yet importing
    aiohttp builds two client TLS contexts from that store (~90 ms, a sixth of the child's start on
    the 2-core machine); an empty store makes them cheap. A simulator serving TLS names its own
    certificate and client CA by path, which this does not touch."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(dict.fromkeys(CA_VARIABLES, os.devnull))
    return env


def spawn_for_profile(profile: str, host: str = "127.0.0.1") -> None:
    """Start a simulator child for this profile (see the module docstring); nothing when the path is
    not a file."""
    if not os.path.isfile(profile) or any(c.profile == profile for c in EARLY):
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgate.sim", "--from-profile", profile, "--host", host, "--port", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=child_env(),
        start_new_session=True)  # a Ctrl-C reaches loadgate, which stops it, not the simulator itself
    EARLY.append(EarlyChild(proc, profile))


def command_of(argv: list[str]) -> str | None:
    """The command a command line runs (its first word), or None when it only asks for help."""
    if not argv or "-h" in argv or "--help" in argv:
        return None
    return argv[0]


def spawn_for_argv(argv: list[str]) -> None:
    """`spawn_for_profile` for a command line that is `run` or `check` with one profile path among its
    arguments (anything else starts nothing: click reads the line properly afterwards, and a child
    started for a path click reads otherwise is stopped when it is not handed over)."""
    if command_of(argv) not in _COMMANDS:
        return
    paths = [a for a in argv[1:] if not a.startswith("-")]
    if len(paths) == 1:
        spawn_for_profile(paths[0])


def stop_all() -> None:
    """Stop every early child nobody took."""
    while EARLY:
        EARLY.pop().stop()
