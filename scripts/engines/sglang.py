"""Start and stop SGLang (``cache_dir()/sglang-venv``, on CPU) on loopback.

Variants (:data:`VARIANTS`): the project's tiny model served in float32 (the baseline), float16
and bfloat16 (the planted differences), without SGLang's prefix (radix) cache, and float32 with
it (SGLang's default; a cached prompt prefix changes the prefill's shapes, and with them the first
output token's logprob by a float32 ULP). Every server is started as::

    VENV/bin/python -m sglang.launch_server --model-path DIR --served-model-name tiny
        --device cpu --attention-backend torch_native --disable-overlap-schedule
        --host 127.0.0.1 --port P --enable-metrics --max-total-tokens 16384
        --dtype float32|float16|bfloat16 --random-seed 0 [--disable-radix-cache]

with ``SGLANG_USE_CPU_ENGINE=1``, the hub switched off, and ``PYTHONPATH`` holding loadgate's
``sgl_kernel`` import shim (``scripts/engines/sgl_kernel_shim/``: SGLang's kernel package is
CUDA-only on PyPI; every shim function raises and appends its name to the file named by
``LOADGATE_SGL_KERNEL_SHIM_LOG``, :func:`shim_calls` reads it). It waits for ``/health`` and is
stopped by PID (SIGTERM to its process group, then SIGKILL): see ``common.Server``.
(``--enable-deterministic-inference`` is refused with ``torch_native``; speculative decoding needs
CPU kernels that only build from SGLang's own repository, so no variant speculates.)

:func:`declared_for` gives the loadgate ``target.declared`` fields of a variant (SGLang serves
its launch flags at ``/server_info``; the weights' hash is declared).

Manual use (prints the URL, serves until Ctrl-C)::

    python scripts/engines/sglang.py f32
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Server, cache_dir, free_port, load_script, serve_until_interrupted  # noqa: E402

SERVED_NAME = "tiny"
MAX_TOTAL_TOKENS = 16384
SHIM_DIR = Path(__file__).resolve().parent / "sgl_kernel_shim"
SHIM_LOG_ENV = "LOADGATE_SGL_KERNEL_SHIM_LOG"


@dataclass(frozen=True)
class Variant:
    """One SGLang configuration: the dtype the weights are served in."""

    name: str
    dtype: str = "float32"
    radix_cache: bool = False  # SGLang's prefix cache (on by default in SGLang)


VARIANTS: dict[str, Variant] = {
    "f32": Variant("f32"),
    "f32-radix": Variant("f32-radix", radix_cache=True),
    "f16": Variant("f16", dtype="float16"),
    "bf16": Variant("bf16", dtype="bfloat16"),
}


def venv_python() -> Path:
    """The SGLang venv's Python (``scripts/engines/setup_sglang.sh`` creates it)."""
    return cache_dir() / "sglang-venv" / "bin" / "python"


def argv_for(v: Variant, model_dir: str, port: int) -> list[str]:
    """The server's command line."""
    return [str(venv_python()), "-m", "sglang.launch_server", "--model-path", model_dir,
            "--served-model-name", SERVED_NAME, "--device", "cpu", "--attention-backend", "torch_native",
            "--disable-overlap-schedule", "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
            "--max-total-tokens", str(MAX_TOTAL_TOKENS), "--dtype", v.dtype, "--random-seed", "0"] + (
                [] if v.radix_cache else ["--disable-radix-cache"])


def weights_sha256(model_dir: str) -> str:
    """sha256 of a model folder's safetensors and config files (the same as vLLM's fingerprint)."""
    return str(load_script("vllm", "vllm_engine").weights_sha256(model_dir))


def declared_for(v: Variant, model_dir: str) -> dict[str, str]:
    """loadgate ``target.declared`` fields for a variant (all strings, as the profile wants)."""
    return {"engine": "sglang-cpu", "model_sha256": weights_sha256(model_dir), "dtype": v.dtype,
            "attention_backend": "torch_native", "radix_cache": str(v.radix_cache).lower(),
            "sgl_kernel": "loadgate import shim (no kernel may run)"}


def server_env(shim_log: Path) -> dict[str, str]:
    """Environment for the server: CPU engine, the kernel shim and its call log, no hub."""
    path = os.environ.get("PYTHONPATH")
    return {"SGLANG_USE_CPU_ENGINE": "1", SHIM_LOG_ENV: str(shim_log),
            "PYTHONPATH": str(SHIM_DIR) + (os.pathsep + path if path else ""),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "DO_NOT_TRACK": "1"}


def shim_calls(shim_log: Path) -> list[str]:
    """The lines of the shim's call log (``name<TAB>pid<TAB>process``); empty when none was called."""
    if not shim_log.exists():
        return []
    return [ln for ln in shim_log.read_text(errors="replace").splitlines() if ln.strip()]


def make_server(v: Variant | str, model_dir: str, *, shim_log: Path, log_dir: Path | None = None,
                port: int | None = None, ready_timeout_s: float = 300.0) -> Server:
    """A not-yet-started :class:`common.Server` for a variant of the model in ``model_dir`` (an HF
    folder). ``server.info`` holds ``variant``, ``declared`` and ``shim_log``."""
    variant = VARIANTS[v] if isinstance(v, str) else v
    if not venv_python().exists():
        raise FileNotFoundError(f"{venv_python()} missing: run scripts/engines/setup_sglang.sh")
    port = port or free_port()
    log_dir = log_dir or cache_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    return Server(argv_for(variant, model_dir, port), port=port,
                  log_path=log_dir / f"sglang-{variant.name}-{port}.log", env=server_env(shim_log),
                  ready_timeout_s=ready_timeout_s, grace_s=20.0, cwd=log_dir,
                  info={"variant": variant.name, "declared": declared_for(variant, model_dir),
                        "shim_log": str(shim_log)})


def start(v: Variant | str, model_dir: str, **kw: Any) -> Server:
    """Start a variant and wait until ``/health`` answers; stop it with ``server.stop()``."""
    return make_server(v, model_dir, **kw).start()


if __name__ == "__main__":  # pragma: no cover - manual use
    name = sys.argv[1] if len(sys.argv) > 1 else "f32"
    if name not in VARIANTS:
        raise SystemExit(f"usage: python scripts/engines/sglang.py [{'|'.join(VARIANTS)}]")
    vllm = load_script("vllm", "vllm_engine")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill PID` stops the server too
    log = cache_dir() / "logs" / "sgl_kernel_shim_calls.log"
    try:
        serve_until_interrupted(start(name, vllm.models_from_make_models()["target"], shim_log=log))
    finally:
        calls = shim_calls(log)
        if calls:
            print(f"sgl_kernel shim functions were called ({len(calls)}):\n" + "\n".join(calls), file=sys.stderr)
