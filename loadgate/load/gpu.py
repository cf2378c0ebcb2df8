"""GPU telemetry during a run: a child process (`python -m loadgate.net.nvml`) reads NVML every
`target.gpu.interval_s` into the run folder's `gpu.jsonl` while the levels run, off the measuring
loop (NVML's calls block in the driver, and a thread here would hold the interpreter lock against
the stamps' accounting: `loadgate.load.turns.no_other_threads`). The child ends when its standard
input closes, so it never outlives the run.

`target.gpu.telemetry`: `nvml` reads the GPUs of this host, or says in gpu.jsonl why it could not;
`auto` (the default) does so only where the engine runs on this host (an embedded simulator has no
GPU: nothing) and NVIDIA's management library is installed; `off` never."""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import ipaddress
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from loadgate.analysis.gpu import GPU_FILE
from loadgate.config.profile import Profile

READY_S = 10.0  # the longest the run waits for the reader's first readings


def engine_is_local(endpoint: str) -> bool:
    """Whether the engine's URL names this host (a loopback address, or one of this host's names)."""
    if endpoint == "embedded":
        return False
    host = urlsplit(endpoint).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host in ("localhost", socket.gethostname(), socket.getfqdn())


def wanted(profile: Profile) -> bool:
    """Whether this run reads NVML (`target.gpu.telemetry`, see the module docstring)."""
    mode = profile.target.gpu.telemetry
    if mode == "nvml":
        return True
    if mode == "off" or not engine_is_local(profile.target.endpoint):
        return False
    return importlib.util.find_spec("pynvml") is not None and ctypes.util.find_library("nvidia-ml") is not None


@contextlib.contextmanager
def gpu_telemetry(profile: Profile, run_dir: Path) -> Iterator[None]:
    """Readings of this host's GPUs into run_dir/gpu.jsonl for as long as the block runs (see the module)."""
    if not wanted(profile):
        yield
        return
    g = profile.target.gpu
    child = subprocess.Popen(
        [sys.executable, "-m", "loadgate.net.nvml", str(run_dir / GPU_FILE), repr(g.interval_s),
         str(int(g.max_mb * 2**20))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        # the levels start once the first readings are written (or the reader said why there are
        # none), so the first window has a reading before it; a reader that hangs costs READY_S
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], READY_S)
        if ready:
            child.stdout.readline()
        yield
    finally:
        assert child.stdin is not None
        with contextlib.suppress(OSError):
            child.stdin.close()  # the child's signal to write its end line and go
        try:
            child.wait(timeout=max(5.0, 3 * g.interval_s))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        assert child.stdout is not None
        child.stdout.close()
