"""Fixtures shared by the real-engine tests (vLLM, llama-server and SGLang).

- ``models`` (session): paths of the project's tiny models, as ``scripts/engines/make_models.py
  --paths`` prints them (keys ``root``, ``target``, ``draft`` — Hugging Face folders — and
  ``target_f32_gguf``, ``target_bf16_gguf``, ``draft_f32_gguf``, ``draft_bf16_gguf``), as Paths.
  Skips with the command to run when the vLLM venv or the models are missing.
- ``engine_logs`` (session): a folder for server logs (kept under the cache, printed on failure).
- ``small_corpus`` (session): a 9-case JSONL corpus (7 completions, 2 chats, max_tokens <= 32)
  that fits the tiny models' 2048-token context; the same bytes every run.
- ``write_profile`` / ``profile_factory``: write a loadgate profile YAML for a real endpoint
  (:func:`profile_file`), bound to the test's ``tmp_path`` or taking the folder first.
- ``sgl_kernel_shim_log`` (session, from ``sgl_kernel_guard.py``): the call log of the SGLang
  servers' kernel shim; the session fails at its end when any shim function was called.

The helpers in ``scripts/engines/`` are importable here as ``common`` (and ``vllm_engine``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENGINES = REPO / "scripts" / "engines"
if str(ENGINES) not in sys.path:
    sys.path.insert(0, str(ENGINES))

import common  # noqa: E402

from .sgl_kernel_guard import sgl_kernel_shim_log  # noqa: E402,F401  (a fixture)


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One plain request with urllib (independent of loadgate's transport); the JSON answer."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return dict(json.loads(r.read()))


def first_difference(a: list[int], b: list[int]) -> int | None:
    """First index where two id lists differ (the shorter length when one is a prefix), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


load_script = common.load_script


SMALL_CORPUS: list[dict[str, Any]] = [
    {"id": "prose-river", "kind": "completion", "max_tokens": 32, "tags": ["prose"],
     "prompt": "The quiet river walked over the old garden"},
    {"id": "prose-story", "kind": "completion", "max_tokens": 32, "tags": ["prose"],
     "prompt": "Once upon a time, in a small village by the sea, there lived"},
    {"id": "code-def", "kind": "completion", "max_tokens": 32, "tags": ["code"],
     "prompt": "def load_cache(data, limit):"},
    {"id": "code-method", "kind": "completion", "max_tokens": 32, "tags": ["code"],
     "prompt": "class TokenQueue:\n    def __init__(self, size):\n        self.size = size\n\n    def"},
    {"id": "code-branch", "kind": "completion", "max_tokens": 32, "tags": ["code", "stops-early"],
     "prompt": "def merge_index(tu, value):\n    result = tu + value\n    if result"},
    {"id": "code-loop", "kind": "completion", "max_tokens": 24, "tags": ["code", "stops-early"],
     "prompt": "    for i in range(count):\n        total"},
    {"id": "unicode", "kind": "completion", "max_tokens": 16, "tags": ["unicode"],
     "prompt": "Les élèves ont écrit : « Le matin, la rivière"},
    {"id": "chat-one", "kind": "chat", "max_tokens": 24, "tags": ["chat"],
     "messages": [{"role": "user", "content": "How do I merge the cache?"}]},
    {"id": "chat-multi", "kind": "chat", "max_tokens": 24, "tags": ["chat", "multi-turn"],
     "messages": [{"role": "system", "content": "You are a concise assistant."},
                  {"role": "user", "content": "How do I sort the table?"},
                  {"role": "assistant", "content": "To sort the table, read the small index first."},
                  {"role": "user", "content": "How do I check the stream?"}]},
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test module that defines `server_phase(test_name) -> int` has its tests run in the order of
    their phases (stable within a phase; a parametrized test's name carries its parameters), so that
    a module starting its engine's variants on demand, one at a time, starts each of them once:
    a server start costs ~30 s of CI on two cores. Other modules' tests keep their places."""
    by_module: dict[Any, list[int]] = {}
    for k, item in enumerate(items):
        phase = getattr(getattr(item, "module", None), "server_phase", None)
        if callable(phase):
            by_module.setdefault(item.module, []).append(k)
    for module, places in by_module.items():
        ordered = sorted((items[k] for k in places), key=lambda it: module.server_phase(it.name))
        for k, item in zip(places, ordered, strict=True):
            items[k] = item


def _skip(reason: str) -> None:
    if os.environ.get("LOADGATE_ENGINE_TESTS_REQUIRED") == "1":
        pytest.fail(reason + " (LOADGATE_ENGINE_TESTS_REQUIRED=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def models() -> dict[str, Path]:
    """Paths of the tiny models (HF folders and GGUF files); skips when they are not built."""
    vpy = common.cache_dir() / "vllm-venv" / "bin" / "python"
    if not vpy.exists():
        _skip(f"no vLLM venv at {vpy.parent.parent}: run scripts/engines/setup_vllm.sh, "
              "then its python on scripts/engines/make_models.py")
    out = subprocess.run([str(vpy), str(ENGINES / "make_models.py"), "--paths"], capture_output=True, text=True)
    if out.returncode != 0:
        _skip("tiny models not built: run `$(python scripts/engines/common.py cache-dir)/vllm-venv/bin/python "
              f"scripts/engines/make_models.py` ({out.stderr.strip()})")
    paths = {k: Path(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        _skip(f"tiny model build incomplete, missing: {', '.join(missing)}")
    return paths


@pytest.fixture(scope="session")
def engine_logs() -> Path:
    """Folder for this session's server logs (under the cache, so they outlive tmp dirs)."""
    path = common.cache_dir() / "logs" / time.strftime("%Y%m%dT%H%M%S")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small corpus as a JSONL file (same bytes, so the same corpus hash, every time)."""
    path = tmp_path_factory.mktemp("corpus") / "small.jsonl"
    path.write_text("".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in SMALL_CORPUS))
    return path


def profile_file(directory: Path, name: str, endpoint: str, declared: dict[str, str], corpus: Path, *,
                 baseline: str | None = None, contract: dict[str, Any] | None = None,
                 scenarios: dict[str, Any] | None = None, api: str = "openai-completions",
                 headers: dict[str, str] | None = None, **sections: Any) -> Path:
    """Write a loadgate profile for a real endpoint as ``directory/<name>.yaml``; results go to
    ``directory/out/<name>/``.

    Defaults suit the tiny models on 2 shared cores: a small closed-loop workload (24 requests of
    64 prompt + 32 output tokens, 4 in flight, 2 warmup) and generous client-health budgets (the
    engine shares the client's two cores, so loop lag says nothing about loadgate here).
    Keyword arguments replace whole top-level sections (``workload``, ``load`` …); ``contract``
    and ``scenarios`` replace those inside ``exactness``; ``headers`` are ``target.headers``.
    """
    doc: dict[str, Any] = {
        "name": name, "seed": 7,
        "target": {"endpoint": endpoint, "api": api, "declared": dict(declared), "timeout_s": 120},
        "workload": {"requests": 24, "input_len": {"dist": "fixed", "value": 64},
                     "output_len": {"dist": "fixed", "value": 32}},
        "load": {"concurrency": 4, "warmup_requests": 2},
        "exactness": {"corpus": str(corpus), "contract": contract or {"tier": "bit-exact"},
                      "scenarios": scenarios or {"solo": True, "concurrent": 4}, "timeout_s": 120},
        "health": {"loop_lag_p99_ms": 60000.0, "gc_pause_max_ms": 60000.0, "cpu_max": 16.0,
                   "schedule_lag_p99_ms": 60000.0, "stamp_error_p99_ms": 60000.0},
        "output": {"dir": str(directory / "out"), "run_id": name},
    }
    if baseline is not None:
        doc["exactness"]["baseline"] = baseline
    if headers:
        doc["target"]["headers"] = dict(headers)
    doc.update(sections)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def profile_factory() -> Callable[..., Path]:
    """:func:`profile_file` itself (first argument: the folder), for module-scoped fixtures."""
    return profile_file


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[..., Path]:
    """:func:`profile_file` bound to this test's ``tmp_path``."""

    def write(name: str, endpoint: str, declared: dict[str, str], corpus: Path, **kw: Any) -> Path:
        return profile_file(tmp_path, name, endpoint, declared, corpus, **kw)

    return write
