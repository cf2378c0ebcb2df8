#!/usr/bin/env bash
# Create (or reuse) the SGLang virtualenv: $(cache_dir)/sglang-venv with sglang from PyPI, on CPU.
#
# Usage: scripts/engines/setup_sglang.sh [--force]
#
# - Reused as is when its Python imports sglang (at $SGLANG_VERSION), torch, torchvision and
#   transformers with the kernel shim on its path (a few seconds).
# - Otherwise: a fresh venv from $PYTHON (default python3), then
#   1. `pip install --no-deps sglang==$SGLANG_VERSION`;
#   2. its runtime requirements, read from the installed METADATA with their pins and markers,
#      less the CUDA-only ones (EXCLUDED below: no CPU build exists, or they pin another torch),
#      with `torch==2.14.1 torchvision==0.29.1` (the CUDA build this machine kind keeps on disk
#      for Python 3.11; it runs on CPU. torch 2.13.0+cpu does not work: SGLang imports
#      torchvision at start and PyPI's torchvision fails beside it), in one pip resolve.
#   SGLang's kernel package (`sglang-kernel`, module `sgl_kernel`) is CUDA-only on PyPI; the
#   server imports it at start, so scripts/engines/sglang.py puts loadgate's import shim
#   (scripts/engines/sgl_kernel_shim/: every function raises and logs its name) on the server's
#   PYTHONPATH. The venv itself holds no sgl_kernel.
# - A file lock keeps two callers from building it at once. The last stdout line is the venv's
#   python; the time taken goes to stderr. `--force` rebuilds it.
#
# Environment: PYTHON, LOADGATE_CACHE (see common.cache_dir), SGLANG_VERSION (default 0.5.23).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
version="${SGLANG_VERSION:-0.5.23}"
torch_pins=("torch==2.14.1" "torchvision==0.29.1")
# Requirements of sglang's METADATA left out, by distribution name (normalized), and why:
EXCLUDED=(
  sglang-kernel          # the kernels: CUDA-only wheels, no sdist (the shim stands in at import)
  flashinfer-python      # CUDA attention kernels
  flash-attn-4           # CUDA attention kernels
  sgl-flash-mla          # CUDA MLA kernels
  sgl-deep-ep            # CUDA expert-parallel communication
  sgl-deep-gemm          # CUDA GEMM kernels
  humming-kernels        # CUDA kernels
  quack-kernels          # CUDA kernels (cute-dsl)
  nvidia-cutlass-dsl     # CUDA kernel DSL
  nvidia-mathdx          # CUDA math libraries
  nvshmem4py-cu13        # CUDA NVSHMEM
  cuda-python            # CUDA driver bindings
  tilelang               # CUDA kernel compiler
  torch-memory-saver     # CUDA memory hooks
  torchaudio             # pinned to 2.11.0, which requires torch 2.11 (not the torch on this disk)
  torchcodec             # pinned to 0.17.0, built against another torch and FFmpeg
)
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "setup_sglang.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "setup_sglang: $*" >&2; }
start=$(date +%s.%N)
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

cache="$("$python" "$here/common.py" cache-dir)"
venv="$cache/sglang-venv"
vpy="$venv/bin/python"
shim="$here/sgl_kernel_shim"

importable() {
  [[ -x "$vpy" ]] && PYTHONPATH="$shim" "$vpy" - "$version" <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, sys
import torch, torchvision, transformers, sglang  # noqa: F401
import sgl_kernel
assert getattr(sgl_kernel, "IS_LOADGATE_SHIM", False), "a real sgl_kernel is installed"
assert md.version("sglang") == sys.argv[1], md.version("sglang")
assert torch.__version__.split("+")[0] == "2.14.1", torch.__version__
EOF
}

exec 9>"$cache/.sglang-venv.lock"
flock 9

if [[ $force == 0 ]] && importable; then
  log "reusing $venv ($(elapsed) s)"
  echo "$vpy"
  exit 0
fi

log "creating $venv with sglang==$version"
rm -rf "$venv"
"$python" -m venv "$venv"
# pip, quiet, without the machine's harmless "Location ... is ignored" lines; output to stderr.
vpip() {
  "$vpy" -m pip --quiet --disable-pip-version-check --no-input "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
  return "${PIPESTATUS[0]}"
}
vpip install --upgrade pip packaging
log "pip upgraded ($(elapsed) s); installing sglang==$version without dependencies"
vpip install --no-deps "sglang==$version"
# The runtime requirements from METADATA, markers evaluated here, extras left out, CUDA-only dropped.
mapfile -t reqs < <("$vpy" - "${EXCLUDED[@]}" <<'EOF'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
excluded = {canonicalize_name(n) for n in sys.argv[1:]}
for line in md.requires("sglang") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(r.name) in excluded | {"torch", "torchvision"}:
        continue
    r.marker = None
    print(r)
EOF
)
log "installing ${#reqs[@]} requirements of sglang and ${torch_pins[*]} ($(elapsed) s)"
vpip install "${torch_pins[@]}" "${reqs[@]}"
log "requirements installed ($(elapsed) s); pip's list of sglang requirements 'not installed' above is the ${#EXCLUDED[@]} left out on purpose"
if ! importable; then
  log "the new venv does not import sglang/torch/torchvision/transformers (with the shim):"
  PYTHONPATH="$shim" "$vpy" -c "import torch, torchvision, transformers, sglang, sgl_kernel" >&2 || true
  exit 3
fi
log "ready: $venv ($(du -sh "$venv" | cut -f1)) in $(elapsed) s"
echo "$vpy"
