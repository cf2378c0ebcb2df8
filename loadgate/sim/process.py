"""`SimProcess`: the simulator in a child process, for clients that must not share its loop.

    with SimProcess(cfg) as sim:        # starts `python -m loadgate.sim --port 0 --config <tmp>`
        sim.url                         # "http://127.0.0.1:PORT", read from the child's stdout
        sim.truth_records()             # GET /sim/truth, parsed
On entry the child is started, its `loadgate sim listening on URL` line is read and `/health` is
polled until it answers 200 (or `startup_timeout` passes: RuntimeError, child killed). On exit
it gets SIGTERM, then SIGKILL after 5 s. The child's stderr is inherited.
"""

from __future__ import annotations

import atexit
import os
import selectors
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from loadgate.config.simconfig import SimConfig
from loadgate.errors import UsageError
from loadgate.sim.early import (
    CONFIG_LINE,
    EARLY,
    READY_LINE,
    child_env,
    spawn_for_profile,
    stop_all,
    stop_child,
)


class SimProcess:
    """The simulator served by a child Python process (see the module docstring)."""

    def __init__(self, cfg: SimConfig | None = None, host: str = "127.0.0.1",
                 startup_timeout: float = 30.0, port: int = 0) -> None:
        self.cfg = cfg or SimConfig()
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._cfg_file: str | None = None

    def start(self) -> SimProcess:
        """Start the child and wait until it serves (see the module docstring)."""
        return self.spawn().wait()

    @property
    def spawned(self) -> bool:
        return self._proc is not None

    def spawn(self) -> SimProcess:
        """Start the child, without waiting for it (`wait` does)."""
        fd, self._cfg_file = tempfile.mkstemp(prefix="loadgate-sim-", suffix=".yaml")
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(self.cfg))  # JSON is valid YAML
        # Its own session: a Ctrl-C in the terminal reaches loadgate, which stops it, and not the
        # simulator itself (which would cut the requests in flight). atexit stops it in any case.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "loadgate.sim", "--host", self.host, "--port", str(self.port),
             "--config", self._cfg_file], stdout=subprocess.PIPE, bufsize=0, env=child_env(),
            start_new_session=True)
        atexit.register(self.stop)
        return self

    def wait(self) -> SimProcess:
        """Wait until the spawned child serves (its ready line, then `/health`)."""
        deadline = time.monotonic() + self.startup_timeout
        try:
            self.url = self._read_url(deadline)
            self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_url(self, deadline: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self._proc.stdout, selectors.EVENT_READ)
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    continue
                line = self._proc.stdout.readline().decode("utf-8", "replace")
                if not line:
                    code = self._proc.wait()
                    if code == UsageError.exit_code:  # it refused its settings, in one line on stderr
                        raise UsageError("the simulator refused its settings (its line above says why)")
                    raise RuntimeError(f"loadgate sim exited with code {code} before listening")
                if line.startswith(READY_LINE):
                    return line[len(READY_LINE):].strip()
        finally:
            sel.close()
        raise RuntimeError(f"loadgate sim did not start within {self.startup_timeout} s")

    def _wait_healthy(self, deadline: float) -> None:
        if self.cfg.tls_client_ca:  # every request needs a client certificate: listening is ready enough
            return
        while time.monotonic() < deadline:
            try:
                with self._open("/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"loadgate sim at {self.url} did not become healthy in time")

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after 5 s) and remove the config file."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_child(proc)
        if self._cfg_file:
            Path(self._cfg_file).unlink(missing_ok=True)
            self._cfg_file = None

    def truth_records(self) -> list[dict[str, Any]]:
        """The child's ground-truth log (GET /sim/truth)."""
        with self._open("/sim/truth", timeout=10) as r:
            return [orjson.loads(line) for line in r.read().splitlines() if line]

    def reset_truth(self) -> None:
        """Empty the child's ground-truth log (POST /sim/truth/reset)."""
        with self._open("/sim/truth/reset", timeout=10, data=b""):
            pass

    def _open(self, path: str, timeout: float, data: bytes | None = None) -> Any:
        """A request to this child (its own certificate is not checked; its key is sent)."""
        headers = {}
        if self.cfg.api_key_env and os.environ.get(self.cfg.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.cfg.api_key_env]}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers,
                                     method="GET" if data is None else "POST")
        ctx = ssl._create_unverified_context() if self.url.startswith("https:") else None
        return urllib.request.urlopen(req, timeout=timeout, context=ctx)

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def prestart(profile_path: str) -> None:
    """Start the simulator a profile's `endpoint: embedded` will need while the command imports the
    client, unless the `loadgate` command already did (`loadgate.sim.early`, which says how)."""
    spawn_for_profile(profile_path)


def take_prestarted(cfg: SimConfig, timeout: float = 30.0) -> SimProcess | None:
    """A prestarted simulator whose settings are exactly these, handed over (its ready line is read
    later, by `wait`). One that exited is dropped; one with other settings stays for another taker
    (an A/B run opens its baseline's engine first) and is stopped with the rest at the end."""
    want = orjson.dumps(cfg)
    for child in list(EARLY):
        if child.settings is None:
            child.settings = _config_line(child.proc, time.monotonic() + timeout) or b""
        if not child.settings:  # it exited without serving: not an embedded target, or unreadable
            EARLY.remove(child)
            child.stop()
        elif child.settings == want:
            EARLY.remove(child)
            sim = SimProcess(cfg)
            sim._proc = child.proc
            atexit.register(sim.stop)
            return sim
    return None


def _config_line(proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
    """The settings a child started with `--from-profile` printed, or None when it exited first."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:
                return None
            if line.startswith(CONFIG_LINE.encode()):
                return line[len(CONFIG_LINE):].rstrip(b"\r\n")
    finally:
        sel.close()
    return None


def stop_prestarted() -> None:
    """Stop every prestarted simulator nobody took (the command ends through `os._exit`, which
    runs no atexit handler)."""
    stop_all()
