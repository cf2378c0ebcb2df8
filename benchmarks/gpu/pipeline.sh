#!/usr/bin/env bash
# The GPU validation pipeline, run on the lent H200 from the repository root (see README.md here).
#
# Needs, carried in .gpu/ (make it with benchmarks/gpu/prepare.sh on the development machine):
#   .gpu/llama-cpp-src.tar.gz   llama.cpp from the llama-cpp-python 0.3.36 sdist, models/ docs/
#                               media/ benches/ stripped (about 11 MB)
#   .gpu/wheels/                orjson and gguf wheels for the device's Python (3.12), which has
#                               no network; everything else loadgate needs is on its image
# Steps: build llama-server with CUDA (background) while the models train on the GPU; then
# benchmarks/gpu/validate.py runs loadgate's commands against each configuration.
# Detached use:  setsid bash benchmarks/gpu/pipeline.sh /tmp/gv > /tmp/gv.log 2>&1 < /dev/null &
# Results go to $1 (default /tmp/gv): results.json, logs/, work/runs/<run>/exactness.json, ...
set -euo pipefail
W=${1:-/tmp/gv}
mkdir -p "$W"
ROOT=$(pwd)
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
trap 'rc=$?; [ -f "$W/DONE" ] || echo "failed (exit $rc)" > "$W/FAILED"' EXIT   # pollers stop on either
rm -f "$W/DONE" "$W/FAILED"

stamp "wheels"
python3 -m pip install --quiet --no-index --find-links .gpu/wheels orjson gguf
stamp "source"
[ -f "$W/BUILD_OK" ] || { rm -rf "$W/llama.cpp" && tar -xzf .gpu/llama-cpp-src.tar.gz -C "$W"; }

stamp "build (background; kept from an earlier run on this machine when present)"
[ -f "$W/BUILD_OK" ] || (
  cmake -S "$W/llama.cpp" -B "$W/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release > "$W/cmake.log" 2>&1 &&
  cmake --build "$W/build" --target llama-server -j 16 > "$W/build.log" 2>&1 && echo ok > "$W/BUILD_OK"
) &
build=$!

stamp "models"
[ -f "$W/models/models.json" ] || python3 benchmarks/gpu/make_gpu_models.py --out "$W/models" --vendor "$W/llama.cpp" > "$W/models.log" 2>&1
stamp "models done: $(tail -c 400 "$W/models.log")"

wait $build || true
if [ ! -f "$W/BUILD_OK" ]; then stamp "BUILD FAILED"; tail -50 "$W/build.log" "$W/cmake.log"; exit 1; fi
stamp "build done"

PYTHONPATH="$ROOT" python3 benchmarks/gpu/validate.py --server "$W/build/bin/llama-server" --models "$W/models" \
  --out "$W/val" > "$W/validate.log" 2>&1 || stamp "validate exited $?"
stamp "validate done"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$W/gpu.txt" || true
tar -czf "$W/validation.tar.gz" -C "$W" val/results.json val/logs val/work/runs models/models.json gpu.txt \
  validate.log 2>/dev/null || tar -czf "$W/validation.tar.gz" -C "$W" val validate.log
echo done > "$W/DONE"
stamp "all done"
