"""Shared helpers for the real-engine scripts and tests (vLLM and llama.cpp).

Stable API (the llama.cpp helpers import it):

- :func:`cache_dir` — where everything built or downloaded lives, outside the repository
  (``$LOADGATE_CACHE``, default ``~/.cache/loadgate``).
- :func:`free_port` — a free TCP port on loopback.
- :func:`wait_healthy` — poll an URL until it answers 200 (fails fast if the server died).
- :class:`Server` — a context manager around one server process: started in its own process
  group, output sent to a log file, stopped by PID (SIGTERM to the group, then SIGKILL).
- :func:`llama_cpp_source` — the llama.cpp source tree bundled in the ``llama-cpp-python``
  sdist, downloaded and extracted once under ``cache_dir()/src/`` behind a file lock.
- :func:`file_lock` — an exclusive ``fcntl`` lock on a file, as a context manager.
- :func:`idle_policy_for` — put the processes of a server's tree with a given name on the
  ``SCHED_IDLE`` policy (a process that spin-waits and would starve the others of its core).

Nothing here imports loadgate, torch or vLLM: it runs under any Python >= 3.11.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
"""The ``llama-cpp-python`` sdist whose ``vendor/llama.cpp`` both engines' scripts use."""


class EngineStartError(RuntimeError):
    """A server process exited or never became healthy; the message ends with its log's tail."""


def load_script(name: str, module_name: str) -> ModuleType:
    """Import ``scripts/engines/<name>.py`` under ``module_name`` (so ``vllm.py`` does not shadow
    the vllm package); imported once per process."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


def cache_dir() -> Path:
    """The cache root (``$LOADGATE_CACHE`` or ``~/.cache/loadgate``), created if missing."""
    root = os.environ.get("LOADGATE_CACHE") or str(Path.home() / ".cache" / "loadgate")
    path = Path(root).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def log_tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note when there is none."""
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_healthy(
    url: str,
    timeout_s: float,
    *,
    proc: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
    interval_s: float = 0.25,
) -> float:
    """Poll ``url`` until it answers HTTP 200; return the seconds waited.

    Raises :class:`EngineStartError` when ``proc`` exits first or ``timeout_s`` passes; the
    message carries the tail of ``log_path``.
    """
    start = time.monotonic()
    last_error = "no answer yet"
    while True:
        if proc is not None and proc.poll() is not None:
            raise EngineStartError(
                f"server exited with code {proc.returncode} before {url} was healthy; "
                f"log {log_path}:\n{log_tail(log_path)}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return time.monotonic() - start
                last_error = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last_error = f"HTTP {exc.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last_error = str(exc)
        if time.monotonic() - start > timeout_s:
            raise EngineStartError(
                f"{url} not healthy after {timeout_s:.0f} s (last: {last_error}); "
                f"log {log_path}:\n{log_tail(log_path)}"
            )
        time.sleep(interval_s)


class Server:
    """One server process on loopback, as a context manager.

    ``argv`` is started in a new session (its own process group) with stdout and stderr
    appended to ``log_path``; :meth:`start` waits until ``url + health_path`` answers 200.
    :meth:`stop` sends SIGTERM to the process group, waits ``grace_s``, then SIGKILL.
    ``info`` carries whatever the starter wants to attach (e.g. loadgate ``declared`` fields);
    ``cwd`` is the process's working folder (default: the caller's).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log_path: Path,
        health_path: str = "/health",
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 300.0,
        grace_s: float = 20.0,
        info: Mapping[str, object] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.health_url = self.url + health_path
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.info: dict[str, object] = dict(info or {})
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    @property
    def pid(self) -> int | None:
        """The server's PID (also its process-group id), or None before start."""
        return self.proc.pid if self.proc is not None else None

    def start(self) -> Server:
        """Start the process and wait until it is healthy; returns self."""
        if self.proc is not None:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, cwd=self.cwd,
            )
        try:
            self.ready_s = wait_healthy(
                self.health_url, self.ready_timeout_s, proc=self.proc, log_path=self.log_path
            )
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace_s``; return the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        # Children that outlived the leader (same group) get SIGKILL too.
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.returncode

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server(url={self.url!r}, pid={self.pid}, log={str(self.log_path)!r})"


def _children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid`` (from ``/proc/<pid>/task/*/children``)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            out += [int(x) for x in (task / "children").read_text().split()]
    return out


def idle_policy_for(root_pid: int, name_prefix: str) -> list[int]:
    """Every thread of the processes under ``root_pid`` (itself included) whose name (``comm``)
    starts with ``name_prefix`` is put on ``SCHED_IDLE``, the scheduler's lowest weight (against the
    other processes of its session; sessions still share the machine fairly). Returns those
    processes' PIDs (none where the OS has no such policy or no process has that name).

    For an engine process that spin-waits with ``sched_yield`` (vLLM's CPU engine core polls its
    worker's shared-memory queue that way for a second after every reply): on a 2-core virtual
    machine it kept the API server and the client off the core it shared with them for hundreds of
    milliseconds at a time, so replies that vLLM had generated token by token reached the client in
    one piece at the end (client TTFT p50 566 ms against the server's own 7.6 ms, loop lag p99 2.6 s,
    244 output tok/s at 2 in flight). Idle, it gave way: in the same run's setting TTFT p50 9.2 ms,
    loop lag p99 2.1 ms, 470 tok/s. A thread it starts later inherits the policy."""
    if not hasattr(os, "SCHED_IDLE"):
        return []
    found: list[int] = []
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        todo += _children(pid)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if not comm.startswith(name_prefix):
            continue
        found.append(pid)
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                os.sched_setscheduler(int(task.name), os.SCHED_IDLE, os.sched_param(0))
    return found


def serve_until_interrupted(srv: Server) -> None:
    """A script's `main`: print where the started server listens and its declared configuration,
    then wait until Ctrl-C or `kill PID`, and stop it."""
    import json

    try:
        print(f"{srv.url} (pid {srv.pid}, log {srv.log_path}, ready in {srv.ready_s:.1f} s)", flush=True)
        print(json.dumps(srv.info["declared"], indent=2))
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def llama_cpp_source(python: str | None = None) -> Path:
    """The ``vendor/llama.cpp`` folder of the ``llama-cpp-python`` sdist, fetched once.

    Downloads ``llama-cpp-python==LLAMA_CPP_PYTHON_VERSION`` as an sdist with pip into
    ``cache_dir()/src/`` and extracts it there, all under a file lock so that concurrent callers
    (the model builder and the llama-server build) do it once. Extraction goes to a temporary
    folder renamed into place, so a half-extracted tree is never seen.
    """
    src = cache_dir() / "src"
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    tree = src / name
    vendor = tree / "vendor" / "llama.cpp"
    with file_lock(src / ".llama_cpp_source.lock"):
        if (tree / ".extracted").exists() and vendor.is_dir():
            return vendor
        pattern = f"llama[-_]cpp[-_]python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
        sdists = _glob_sdists(src)
        if not sdists:
            subprocess.run(
                [python or sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--no-binary", ":all:", "--dest", str(src),
                 f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"],
                check=True,
            )
            sdists = _glob_sdists(src)
        if not sdists:
            raise RuntimeError(f"pip download left no {pattern} in {src}")
        tmp = src / f".{name}.partial"
        if tmp.exists():
            subprocess.run(["rm", "-rf", str(tmp)], check=True)
        tmp.mkdir()
        with tarfile.open(sdists[0]) as archive:
            archive.extractall(tmp, filter="data")
        tops = [p for p in tmp.iterdir() if p.is_dir()]
        if len(tops) != 1:
            raise RuntimeError(f"unexpected sdist layout in {sdists[0]}: {tops}")
        inner = tops[0]
        if tree.exists():
            subprocess.run(["rm", "-rf", str(tree)], check=True)
        inner.rename(tree)
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        (tree / ".extracted").write_text(f"{sdists[0].name}\n")
        if not vendor.is_dir():
            raise RuntimeError(f"{vendor} missing from the sdist")
        return vendor


def _glob_sdists(folder: Path) -> list[Path]:
    """The llama-cpp-python sdists of the pinned version in ``folder`` (either name spelling)."""
    return sorted(
        p for p in folder.glob("llama*cpp*python-*.tar.gz")
        if p.name.endswith(f"-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
    )


if __name__ == "__main__":  # pragma: no cover - manual use
    if sys.argv[1:] == ["llama-cpp-source"]:
        print(llama_cpp_source())
    elif sys.argv[1:] == ["cache-dir"]:
        print(cache_dir())
    else:
        print("usage: python scripts/engines/common.py cache-dir | llama-cpp-source", file=sys.stderr)
        sys.exit(2)
