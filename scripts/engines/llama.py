"""Start and stop llama.cpp's `llama-server` on loopback, in the configurations the tests use.

A configuration (`LlamaConfig`) is one GGUF target (float32 or bfloat16), a number of slots
(`-np`), and optionally speculative decoding: a draft model (`-md draft.gguf --spec-type
draft-simple`) or n-gram lookup (`--spec-type ngram-simple`). `start(config)` launches the binary
built by `build_llama_server.sh` with `--metrics`, `-t 2`, `-c 8192` and `--alias tiny`, waits for
`/health` and returns a running `common.Server` (stopped by PID); `server(config)` returns one
not yet started, for use as a context manager. The Server's `info["declared"]` holds the loadgate
`target.declared` fields describing the configuration (`LlamaConfig.declared`): what the server
does not report about itself, such as the weight file hashes and the speculation settings. `/props` (build, slots, chat template) is read by loadgate itself.

Manual use:
    python scripts/engines/llama.py serve --model target-f32.gguf --dtype f32 --slots 4 \
        --spec draft --draft draft-f32.gguf
prints the URL and the declared fields as JSON, and serves until interrupted (SIGINT or SIGTERM,
which stop the server too).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Server, cache_dir, free_port  # noqa: E402

Speculation = Literal["none", "draft", "ngram"]
BUILD_SCRIPT = Path(__file__).resolve().parent / "build_llama_server.sh"
SPEC_TYPE = {"none": "none", "draft": "draft-simple", "ngram": "ngram-simple"}
ALIAS = "tiny"


@dataclass(frozen=True)
class LlamaConfig:
    """One llama-server configuration: target weights, slots, and speculation."""

    model: Path
    dtype: str = "f32"
    slots: int = 1
    speculation: Speculation = "none"
    draft: Path | None = None
    n_max: int = 4
    n_min: int = 0
    ngram_size_n: int = 3
    ngram_size_m: int = 4
    ctx: int = 8192
    threads: int = 2

    def __post_init__(self) -> None:
        if self.speculation == "draft" and self.draft is None:
            raise ValueError("speculation 'draft' needs a draft model (draft=...)")
        if self.speculation != "draft" and self.draft is not None:
            raise ValueError("a draft model is only used with speculation 'draft'")

    def argv(self, binary: Path, port: int) -> list[str]:
        """The command line starting this configuration on 127.0.0.1:port."""
        args = [str(binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
                "--alias", ALIAS, "--metrics", "-t", str(self.threads), "-c", str(self.ctx),
                "-np", str(self.slots)]
        if self.speculation == "draft":
            assert self.draft is not None
            args += ["-md", str(self.draft), "--spec-type", SPEC_TYPE["draft"],
                     "--spec-draft-n-max", str(self.n_max), "--spec-draft-n-min", str(self.n_min)]
        elif self.speculation == "ngram":
            args += ["--spec-type", SPEC_TYPE["ngram"], "--spec-ngram-simple-size-n", str(self.ngram_size_n),
                     "--spec-ngram-simple-size-m", str(self.ngram_size_m)]
        return args

    def declared(self, binary: Path | None = None) -> dict[str, str]:
        """loadgate `target.declared` fields: everything about this configuration that can change
        the arithmetic and that the server does not serve (all values are strings)."""
        out = {
            "engine": "llama.cpp llama-server",
            "model_file": self.model.name,
            "model_sha256": sha256_file(self.model),
            "dtype": self.dtype,
            "slots": str(self.slots),
            "ctx": str(self.ctx),
            "threads": str(self.threads),
            "speculative": SPEC_TYPE[self.speculation],
        }
        if self.speculation == "draft":
            assert self.draft is not None
            out.update(spec_n_max=str(self.n_max), spec_n_min=str(self.n_min),
                       draft_model_file=self.draft.name, draft_model_sha256=sha256_file(self.draft))
        elif self.speculation == "ngram":
            out.update(spec_ngram_size_n=str(self.ngram_size_n), spec_ngram_size_m=str(self.ngram_size_m))
        if binary is not None:
            out["llama_server_build"] = binary.parent.name  # <sdist version>-<source and cmake flags key>
        return out


def sha256_file(path: Path) -> str:
    """sha256 hex of a file (memoized per path, size and modification time)."""
    st = path.stat()
    return _sha256_cached(str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def binary_path() -> Path:
    """The llama-server binary: `$LLAMA_SERVER_BIN` when set, else the cached build (built by
    `build_llama_server.sh` if it is not cached yet: about 9 minutes on 2 cores)."""
    env = os.environ.get("LLAMA_SERVER_BIN")
    if env:
        return Path(env)
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)})
    return Path(out.stdout.strip().splitlines()[-1])


def server(config: LlamaConfig, *, binary: Path | None = None, log_dir: Path | None = None,
           ready_timeout_s: float = 60.0) -> Server:
    """A Server for `config` on a free loopback port, not started yet: use it as a context
    manager (`with server(cfg) as s:`), which starts it, waits for `/health` and stops it by PID.
    `.info["declared"]` holds the loadgate declared fields, `.info["config"]` the config."""
    binary = binary or binary_path()
    port = free_port()
    logs = log_dir or cache_dir() / "logs"
    log_path = logs / f"llama-server-{port}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    return Server(config.argv(binary, port), port=port, log_path=log_path, ready_timeout_s=ready_timeout_s,
                  grace_s=10.0, info={"declared": config.declared(binary), "config": config})


def start(config: LlamaConfig, **kw: object) -> Server:
    """Start `config` and wait for `/health`; returns the running Server (call `.stop()`)."""
    return server(config, **kw).start()  # type: ignore[arg-type]


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="serve one llama-server configuration until interrupted")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--model", type=Path, required=True)
    s.add_argument("--dtype", default="f32")
    s.add_argument("--slots", type=int, default=1)
    s.add_argument("--spec", choices=sorted(SPEC_TYPE), default="none")
    s.add_argument("--draft", type=Path)
    s.add_argument("--n-max", type=int, default=4)
    args = ap.parse_args(argv)
    cfg = LlamaConfig(args.model, args.dtype, args.slots, args.spec, args.draft, args.n_max)
    # SIGTERM (and SIGINT, which background jobs ignore) end the loop below, so the server is stopped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with server(cfg) as srv:
        print(json.dumps({"url": srv.url, "pid": srv.pid, "log": str(srv.log_path),
                          "declared": srv.info["declared"]}, indent=2), flush=True)
        try:
            while srv.alive():
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(_main())
