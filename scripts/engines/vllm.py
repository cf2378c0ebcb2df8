"""Start and stop vLLM (the CPU build in ``cache_dir()/vllm-venv``) on loopback.

Variants (:data:`VARIANTS`): no speculation, ngram speculation and draft-model speculation in
float32, and no speculation in bfloat16 (the planted divergence). Every server is started as::

    VENV/bin/python -m vllm.entrypoints.openai.api_server --model DIR --served-model-name tiny
        --host 127.0.0.1 --port P --dtype float32|bfloat16 --max-model-len 2048 --enforce-eager
        --enable-auto-tool-choice --tool-call-parser hermes
        --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'
        [--speculative-config JSON] [--per-request-spec-decode-metrics summary]

with ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB), ``VLLM_SERVER_DEV_MODE=1`` and the hub switched off, waits for ``/health`` and is
stopped by PID (SIGTERM to its process group, then SIGKILL): see ``common.Server``. Once healthy, its
engine core process (``VLLM::EngineCore``, which spin-waits on its worker with ``sched_yield``) is put
on ``SCHED_IDLE`` so that it cannot starve the API server and the client (``common.idle_policy_for``).
(``vllm serve`` does not work with the ``vllm-cpu`` distribution: it asks for ``vllm``'s version.)

:func:`declared_for` gives the loadgate ``target.declared`` fields that describe a variant
(vLLM does not serve its launch flags, so the profile must declare them).

Manual use (prints the URL, serves until Ctrl-C)::

    python scripts/engines/vllm.py ngram
"""

from __future__ import annotations

import functools
import hashlib
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Server, cache_dir, free_port, idle_policy_for, serve_until_interrupted  # noqa: E402

SERVED_NAME = "tiny"
MAX_MODEL_LEN = 2048
KV_CACHE_GIB = 1
SPEC_FLAG = "--per-request-spec-decode-metrics"
# A named tool_choice needs a parser (loaded only with auto tool choice on). Its arguments come from
# guided JSON of the tool's schema with no free whitespace, which a tiny random model would fill
# max_tokens with; VLLM_ENFORCE_STRICT_TOOL_CALLING=0 keeps that path (the structural-tag path
# ignores disable_any_whitespace).
TOOL_CALL_PARSER = "hermes"
ENGINE_CORE_NAME = "VLLM::EngineCor"  # the engine core process's name (comm: 15 characters)


@dataclass(frozen=True)
class Variant:
    """One vLLM configuration: weights dtype, speculation method and draft tokens per step."""

    name: str
    dtype: str = "float32"
    speculative: str = "none"  # none | ngram | draft_model
    k: int = 4
    max_num_seqs: int | None = None  # None: vLLM's default
    enforce_eager: bool = True
    model: str = "target"  # which of make_models' models it serves (a key of its --paths)
    reasoning_parser: str | None = None  # --reasoning-parser: reasoning streamed apart from the answer


VARIANTS: dict[str, Variant] = {
    "plain": Variant("plain"),
    "ngram": Variant("ngram", speculative="ngram"),
    "draft": Variant("draft", speculative="draft_model"),
    "bf16": Variant("bf16", dtype="bfloat16"),
    # the reasoner (every reply opens with <think> ... </think>) behind DeepSeek-R1's parser, which
    # streams what is between the markers as the delta's reasoning
    "reasoner": Variant("reasoner", model="reasoner", reasoning_parser="deepseek_r1"),
}


def venv_python() -> Path:
    """The vLLM venv's Python (``scripts/engines/setup_vllm.sh`` creates it)."""
    return cache_dir() / "vllm-venv" / "bin" / "python"


@functools.lru_cache(maxsize=1)
def vllm_package_dir() -> Path | None:
    """The installed ``vllm`` package folder inside the venv, or None."""
    lib = cache_dir() / "vllm-venv" / "lib"
    found = sorted(lib.glob("python3*/site-packages/vllm/__init__.py"))
    return found[0].parent if found else None


@functools.lru_cache(maxsize=1)
def supports_per_request_spec_metrics() -> bool:
    """Whether this vLLM has ``--per-request-spec-decode-metrics`` (found in its source)."""
    pkg = vllm_package_dir()
    if pkg is None:
        return False
    needles = (b"per-request-spec-decode-metrics", b"per_request_spec_decode_metrics")
    for path in pkg.rglob("*.py"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if any(n in data for n in needles):
            return True
    return False


def speculative_config(v: Variant, draft_dir: str | None) -> dict[str, Any] | None:
    """The ``--speculative-config`` JSON of a variant, or None without speculation."""
    if v.speculative == "ngram":
        return {"method": "ngram", "num_speculative_tokens": v.k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    if v.speculative == "draft_model":
        if not draft_dir:
            raise ValueError("draft-model speculation needs the draft model's folder")
        return {"method": "draft_model", "model": draft_dir, "num_speculative_tokens": v.k}
    return None


def argv_for(v: Variant, target_dir: str, draft_dir: str | None, port: int) -> list[str]:
    """The server's command line."""
    argv = [str(venv_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", target_dir,
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", v.dtype, "--max-model-len", str(MAX_MODEL_LEN), "--seed", "0",
            "--enable-auto-tool-choice", "--tool-call-parser", TOOL_CALL_PARSER,
            "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
            # usage.prompt_tokens_details.cached_tokens per request (conversations' cached tokens by turn);
            # it changes no output
            "--enable-prompt-tokens-details"]
    if v.enforce_eager:
        argv.append("--enforce-eager")
    if v.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(v.max_num_seqs)]
    if v.reasoning_parser is not None:
        argv += ["--reasoning-parser", v.reasoning_parser]
    spec = speculative_config(v, draft_dir)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        if supports_per_request_spec_metrics():
            argv += [SPEC_FLAG, "summary"]
    return argv


@functools.lru_cache(maxsize=8)
def weights_sha256(model_dir: str) -> str:
    """sha256 of a model folder's safetensors and config files, for the fingerprint."""
    h = hashlib.sha256()
    root = Path(model_dir)
    for p in sorted(root.glob("*.safetensors")) + [root / "config.json", root / "tokenizer.json"]:
        if p.exists():
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def declared_for(v: Variant, target_dir: str, draft_dir: str | None) -> dict[str, str]:
    """loadgate ``target.declared`` fields for a variant (all strings, as the profile wants)."""
    out = {
        "engine": "vllm-cpu", "model_sha256": weights_sha256(target_dir), "dtype": v.dtype,
        "speculative": v.speculative, "enforce_eager": str(v.enforce_eager).lower(),
        "max_num_seqs": str(v.max_num_seqs) if v.max_num_seqs is not None else "default",
        "max_model_len": str(MAX_MODEL_LEN), "kv_cache_space_gib": str(KV_CACHE_GIB),
        "tool_call_parser": TOOL_CALL_PARSER, "structured_outputs": "disable_any_whitespace",
    }
    if v.reasoning_parser is not None:
        out["reasoning_parser"] = v.reasoning_parser
    if v.speculative != "none":
        out["speculative_k"] = str(v.k)
        out["per_request_spec_metrics"] = "summary" if supports_per_request_spec_metrics() else "unsupported"
    if v.speculative == "ngram":
        out["ngram_lookup"] = "min 2, max 4"
    if v.speculative == "draft_model" and draft_dir:
        out["draft_model"] = draft_dir
        out["draft_model_sha256"] = weights_sha256(draft_dir)
    return out


def server_env() -> dict[str, str]:
    """Environment for the server: small KV cache, no hub, no usage reports, and dev mode, which
    serves ``POST /reset_prefix_cache`` (loadgate empties the prefix cache through it)."""
    return {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
            "VLLM_SERVER_DEV_MODE": "1", "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}


def make_server(v: Variant | str, models: dict[str, str], *, log_dir: Path | None = None,
                port: int | None = None, ready_timeout_s: float = 420.0) -> Server:
    """A not-yet-started :class:`common.Server` for a variant; ``models`` as make_models prints
    (keys ``target``, ``draft``). ``server.info["declared"]`` holds the declared fields."""
    variant = VARIANTS[v] if isinstance(v, str) else v
    if not venv_python().exists():
        raise FileNotFoundError(f"{venv_python()} missing: run scripts/engines/setup_vllm.sh")
    port = port or free_port()
    log_dir = log_dir or cache_dir() / "logs"
    draft = models.get("draft")
    served = models[variant.model]
    return Server(argv_for(variant, served, draft, port), port=port,
                  log_path=log_dir / f"vllm-{variant.name}-{port}.log", env=server_env(),
                  ready_timeout_s=ready_timeout_s, grace_s=20.0, cwd=log_dir,
                  info={"variant": variant.name, "declared": declared_for(variant, served, draft)})


def start(v: Variant | str, models: dict[str, str], **kw: Any) -> Server:
    """Start a variant and wait until ``/health`` answers; stop it with ``server.stop()``."""
    log_dir = kw.get("log_dir")
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    else:
        (cache_dir() / "logs").mkdir(parents=True, exist_ok=True)
    server = make_server(v, models, **kw).start()
    assert server.pid is not None
    server.info["idle_pids"] = idle_policy_for(server.pid, ENGINE_CORE_NAME)
    if not server.info["idle_pids"]:  # (another vLLM names it otherwise: its spin-wait then starves the client)
        print(f"vllm.py: no {ENGINE_CORE_NAME!r} process under {server.pid} to put on SCHED_IDLE; on a few "
              "cores its spin-wait can hold the API server and the client off theirs", file=sys.stderr)
    return server


def models_from_make_models() -> dict[str, str]:
    """The paths of the cached tiny models (`make_models.py --paths`); exits with the reason if none."""
    import subprocess

    here = Path(__file__).resolve().parent
    out = subprocess.run([str(venv_python()), str(here / "make_models.py"), "--paths"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr.strip() or "no models: run scripts/engines/make_models.py")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":  # pragma: no cover - manual use
    name = sys.argv[1] if len(sys.argv) > 1 else "plain"
    if name not in VARIANTS:
        raise SystemExit(f"usage: python scripts/engines/vllm.py [{'|'.join(VARIANTS)}]")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill PID` stops the server too
    serve_until_interrupted(start(name, models_from_make_models()))
