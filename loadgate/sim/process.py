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

READY_LINE = "loadgate sim listening on "  # loadgate.sim.cli prints it


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
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # Its own session: a Ctrl-C in the terminal reaches loadgate, which stops it, and not the
        # simulator itself (which would cut the requests in flight). atexit stops it in any case.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "loadgate.sim", "--host", self.host, "--port", str(self.port),
             "--config", self._cfg_file], stdout=subprocess.PIPE, env=env, start_new_session=True)
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
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
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


_PRESTARTED: list[SimProcess] = []


def prestart(profile_path: str) -> None:
    """Spawn the simulator a profile's `endpoint: embedded` will need, before the command imports
    the client (~0.8 s on the 2-core machine, spent while the child starts too). Reads only the
    profile's `target` section; anything odd (no such file, bad YAML, another endpoint, settings the
    simulator refuses) spawns nothing and is left to the profile's own loading to report."""
    try:
        import yaml

        from loadgate.sim.settings import config_from_mapping

        with open(profile_path, "rb") as f:
            doc = yaml.safe_load(f)
        target = doc.get("target") if isinstance(doc, dict) else None
        if not isinstance(target, dict) or target.get("endpoint") != "embedded":
            return
        sim = target.get("sim") or {}
        cfg = config_from_mapping(sim, file=profile_path, lines={}) if isinstance(sim, dict) else None
    except Exception:  # noqa: BLE001 - the real loading reports it, in one line
        return
    if cfg is not None:
        _PRESTARTED.append(SimProcess(cfg).spawn())


def take_prestarted(cfg: SimConfig) -> SimProcess | None:
    """A prestarted simulator with exactly these settings, handed over (stopped at exit otherwise)."""
    for k, sim in enumerate(_PRESTARTED):
        if sim.cfg == cfg:
            return _PRESTARTED.pop(k)
    return None


def stop_prestarted() -> None:
    """Stop every prestarted simulator nobody took (the command ends through `os._exit`, which
    runs no atexit handler)."""
    while _PRESTARTED:
        _PRESTARTED.pop().stop()
