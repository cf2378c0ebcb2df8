"""loadgate's `sgl_kernel` import shim and the guard that fails an engine session when it is used.

Not marked `engine`: these need no server and run in the fast suite. The guard is proven on a
real inner pytest session that uses the very fixture the SGLang tests use.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .sgl_kernel_guard import SHIM_LOG_ENV, shim_calls

REPO = Path(__file__).resolve().parents[2]
SHIM_DIR = REPO / "scripts" / "engines" / "sgl_kernel_shim"


@pytest.fixture
def shim(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(SHIM_DIR))
    monkeypatch.setenv(SHIM_LOG_ENV, str(tmp_path / "calls.log"))
    sys.modules.pop("sgl_kernel", None)
    mod = importlib.import_module("sgl_kernel")
    yield mod
    sys.modules.pop("sgl_kernel", None)


def test_every_shim_function_raises_naming_itself_and_logs_the_call_even_when_caught(shim, tmp_path):
    assert shim.IS_LOADGATE_SHIM
    with pytest.raises(NotImplementedError, match="sgl_kernel.fused_add_rmsnorm was called"):
        shim.fused_add_rmsnorm(1, 2, eps=3)
    try:
        from sgl_kernel import silu_and_mul

        silu_and_mul()
    except NotImplementedError:
        pass  # a caller that swallows the error is still seen in the log
    names = [ln.split("\t")[0] for ln in shim_calls(tmp_path / "calls.log")]
    assert names == ["fused_add_rmsnorm", "silu_and_mul"]
    assert all(ln.split("\t")[1] == str(os.getpid()) for ln in shim_calls(tmp_path / "calls.log"))


def test_the_shim_has_no_dunders_or_submodules_to_pass_for_a_real_package(shim, tmp_path):
    assert not hasattr(shim, "__version__")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sgl_kernel.speculative")
    assert shim_calls(tmp_path / "calls.log") == []  # looking up a name is not a call


INNER_CONFTEST = """
import sys
from pathlib import Path
import pytest
sys.path.insert(0, {guard_dir!r})
from sgl_kernel_guard import sgl_kernel_shim_log  # noqa: F401  (the SGLang tests' own fixture)

@pytest.fixture(scope="session")
def engine_logs(tmp_path_factory):
    return tmp_path_factory.mktemp("logs")
"""
INNER_TEST = """
import os, sys
sys.path.insert(0, {shim_dir!r})

def test_a_server_process_swallows_a_shim_error(sgl_kernel_shim_log):
    os.environ[{env!r}] = str(sgl_kernel_shim_log)
    import sgl_kernel
    try:
        sgl_kernel.copy_all_layer_kv_cache_cpu()
    except NotImplementedError:
        pass
    assert True  # the test itself passes: only the guard can catch it

def test_another_test_that_never_touches_the_shim():
    assert True
"""


def run_inner(tmp_path: Path, test_body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST.format(guard_dir=str(Path(__file__).parent)))
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(test_body).format(shim_dir=str(SHIM_DIR), env=SHIM_LOG_ENV))
    env = {k: v for k, v in os.environ.items() if k != SHIM_LOG_ENV}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_the_engine_session_fails_when_any_shim_function_was_called(tmp_path):
    out = run_inner(tmp_path, INNER_TEST)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "2 passed, 1 error" in text, text
    assert "sgl_kernel shim functions were called during this test session (1 calls: copy_all_layer_kv_cache_cpu)" in text


def test_the_engine_session_passes_when_no_shim_function_was_called(tmp_path):
    out = run_inner(tmp_path, INNER_TEST.replace("sgl_kernel.copy_all_layer_kv_cache_cpu()", "sgl_kernel.copy_all_layer_kv_cache_cpu"))
    assert out.returncode == 0 and "2 passed" in out.stdout and "error" not in out.stdout, out.stdout + out.stderr
