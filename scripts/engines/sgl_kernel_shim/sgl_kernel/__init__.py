"""A stand-in for SGLang's CUDA-only kernel package: importable, computes nothing.

Every public attribute is a function that records its name to ``$LOADGATE_SGL_KERNEL_SHIM_LOG``
(one line per call, written before raising, so a caller that swallows the exception is still
caught) and raises :class:`ShimCalled` (a ``NotImplementedError``). See ``../README.md``.
Written for loadgate's engine tests; nothing here comes from SGLang.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

LOG_ENV = "LOADGATE_SGL_KERNEL_SHIM_LOG"
IS_LOADGATE_SHIM = True


class ShimCalled(NotImplementedError):
    """A shim function was called: the computation it stands for does not exist here."""


def record_call(name: str) -> None:
    """Append ``name<TAB>pid<TAB>argv0`` to the log file (no-op without the environment variable)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = f"{name}\t{os.getpid()}\t{os.path.basename(sys.argv[0]) if sys.argv else ''}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _stub(name: str) -> Callable[..., NoReturn]:
    def stub(*args: Any, **kwargs: Any) -> NoReturn:
        record_call(name)
        raise ShimCalled(f"sgl_kernel.{name} was called, but sgl_kernel here is loadgate's import shim "
                         "(no CPU build of SGLang's kernels exists on PyPI)")

    stub.__name__ = stub.__qualname__ = name
    return stub


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    fn = _stub(name)
    globals()[name] = fn
    return fn
