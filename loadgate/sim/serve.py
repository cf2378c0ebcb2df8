"""Serving the simulator until it is stopped, without the command line (click): `loadgate sim` runs
it through `loadgate.sim.cli`, and the embedded engine a `loadgate run` starts early
(`loadgate.sim.early`) through `python -m loadgate.sim --from-profile PROFILE --host H --port P`,
which `loadgate.sim.__main__` hands straight to `serve_profile_main` (no click: the child's start is
the critical path of the run's first request)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from loadgate.config.simconfig import SimConfig
from loadgate.errors import LoadgateError, UsageError
from loadgate.sim.early import CONFIG_LINE, READY_LINE
from loadgate.sim.settings import config_from_mapping

TRUTH_LOG_ENV = "LOADGATE_SIM_TRUTH_LOG"  # a file to write the truth log to when the server stops


async def serve(cfg: SimConfig, host: str, port: int, on_ready: Callable[[str], None],
                watch_stdin: bool = False) -> None:
    """Serve until SIGINT/SIGTERM; `on_ready(url)` is called once listening. With the environment
    variable LOADGATE_SIM_TRUTH_LOG set, the truth log (`loadgate.sim.truth`, JSON lines) is written
    to that file when it stops (the embedded engine of a `loadgate run` too: it inherits the
    variable), and beside it, in `<file>.first`, when the first request of any route but /health
    arrived (perf_counter_ns); `{pid}` in the name becomes the server's process id. With
    `watch_stdin`, it also stops when its stdin reaches its end (the command that started it ended)."""
    from loadgate.sim.server import running_sim

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if watch_stdin:
        def on_stdin() -> None:
            try:
                data = os.read(0, 4096)
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(0)
                stop.set()

        loop.add_reader(0, on_stdin)
    async with running_sim(cfg, host, port) as sim:
        on_ready(sim.url)
        await stop.wait()
        if path := os.environ.get(TRUTH_LOG_ENV):  # for benchmarks of a whole `loadgate run`
            path = path.replace("{pid}", str(os.getpid()))
            with contextlib.suppress(OSError):
                Path(path).write_bytes(sim.truth.jsonl())
                Path(path + ".first").write_text(str(sim.state.first_request_ns))


def run_server(cfg: SimConfig, host: str, port: int, watch_stdin: bool = False) -> None:
    """Serve `cfg` on host:port until stopped (see `serve`); a port that cannot be had is a UsageError."""
    def ready(url: str) -> None:
        # Everything allocated so far lives as long as the server: keep the collector off it,
        # so full collections stay short while thousands of streams run.
        gc.freeze()
        sys.stdout.write(READY_LINE + url + "\n")
        sys.stdout.flush()

    try:
        import uvloop
        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            runner.run(serve(cfg, host, port, ready, watch_stdin))
        except OSError as e:  # address in use, unknown host, ...
            raise UsageError(f"loadgate sim: cannot listen on {host}:{port}: {e.strerror or e}") from None


def profile_settings(path: str) -> SimConfig | None:
    """The settings of a profile's `target.sim` when its target is `endpoint: embedded`, else None;
    None too for anything odd (no such file, bad YAML, settings refused): the command that loads the
    profile reports those itself, in one line."""
    try:
        import yaml

        with open(path, "rb") as f:
            doc = yaml.safe_load(f)
        target = doc.get("target") if isinstance(doc, dict) else None
        if not isinstance(target, dict) or target.get("endpoint") != "embedded":
            return None
        section = target.get("sim") or {}
        return config_from_mapping(section, file=path, lines={}) if isinstance(section, dict) else None
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def serve_profile(profile: str, host: str, port: int) -> None:
    """Serve the settings of a profile's `target.sim` (when its target is embedded: else return at
    once, without a word), printing them on one line first, and stop when stdin ends."""
    import orjson

    settings = profile_settings(profile)
    if settings is None:
        return
    sys.stdout.write(CONFIG_LINE + orjson.dumps(settings).decode() + "\n")
    sys.stdout.flush()
    run_server(settings, host, port, watch_stdin=True)


def serve_profile_main(argv: list[str]) -> None:
    """`python -m loadgate.sim --from-profile PROFILE --host H --port P` (exactly that order, as
    `loadgate.sim.early` writes it); a fault is one line and its exit code."""
    try:
        profile, _, host, _, port = argv
        serve_profile(profile, host, int(port))
    except LoadgateError as e:
        sys.stderr.write(f"loadgate: {e.message}\n")
        sys.exit(e.exit_code)
    except ValueError:
        sys.stderr.write("loadgate sim: usage: --from-profile PROFILE --host HOST --port PORT\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)
