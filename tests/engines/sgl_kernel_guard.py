"""The guard around loadgate's ``sgl_kernel`` import shim (``scripts/engines/sgl_kernel_shim/``).

SGLang's kernel package is CUDA-only on PyPI, so the SGLang servers of the engine tests import a
shim whose every function raises and appends its name to a log file. A caller may catch the
exception and carry on (a fallback, a feature probe), so the exception alone proves nothing; the
log does. ``sgl_kernel_shim_log`` (session scope) gives the log's path to the servers and, when
the session ends, fails it if the log holds any line: no test can pass on a stubbed computation.
``tests/engines/test_sgl_kernel_shim.py`` proves that it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

SHIM_LOG_ENV = "LOADGATE_SGL_KERNEL_SHIM_LOG"


def shim_calls(log: Path) -> list[str]:
    """The log's lines (``name<TAB>pid<TAB>process``), empty when no shim function was called."""
    if not log.exists():
        return []
    return [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]


def fail_if_shim_called(log: Path, when: str) -> None:
    """pytest.fail naming every shim function called, when any was."""
    calls = shim_calls(log)
    if calls:
        names = sorted({ln.split("\t", 1)[0] for ln in calls})
        pytest.fail(f"sgl_kernel shim functions were called {when} ({len(calls)} calls: {', '.join(names)}); "
                    f"a result computed around a stubbed kernel proves nothing. Log: {log}", pytrace=False)


@pytest.fixture(scope="session")
def sgl_kernel_shim_log(engine_logs: Path) -> Iterator[Path]:
    """The shim's call log for this session; the session fails at its end when it holds a call."""
    log = engine_logs / "sgl_kernel_shim_calls.log"
    log.unlink(missing_ok=True)
    yield log
    fail_if_shim_called(log, "during this test session")
