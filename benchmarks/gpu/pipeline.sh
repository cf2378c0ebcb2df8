#!/usr/bin/env bash
# The GPU validation pipeline, run on the lent H200 from the repository root (see README.md here).
#
# Needs, carried in .gpu/ (made by benchmarks/gpu/prepare.sh on the development machine):
#   .gpu/llama-cpp-src.tar.gz   llama.cpp from the llama-cpp-python 0.3.36 sdist, models/ docs/
#                               media/ benches/ stripped (about 11 MB)
#   .gpu/wheels/                the packages benchmarks/gpu/packages.txt marks "carried"
# Steps, each timed in $W/pipeline.log: install the wheels and prove loadgate imports; build
# llama-server with CUDA (background) while the models train on the GPU; benchmarks/gpu/validate.py
# runs loadgate's commands against each configuration; pack the results.
# Detached use:  setsid bash benchmarks/gpu/pipeline.sh /tmp/gv > /tmp/gv.log 2>&1 < /dev/null &
# Ends with $W/DONE, or $W/FAILED (naming the step) when any step fails: pollers stop on either.
# Results: $W/validation.tar.gz, which unpacks into docs/validation/'s layout (results.json,
# <config>-<contract>.txt reports, <config>-<contract>/ with the run's JSON files, models.json,
# gpu.txt, pipeline.log, validate.log).
set -euo pipefail
W=${1:-/tmp/gv}
mkdir -p "$W"
ROOT=$(pwd)
t0=$(date +%s)
step=start
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$W/pipeline.log"; }
trap 'rc=$?; [ -f "$W/DONE" ] || { echo "step $step failed (exit $rc)" > "$W/FAILED"; stamp "FAILED at $step (exit $rc)"; }' EXIT
rm -f "$W/DONE" "$W/FAILED" "$W/pipeline.log"

step=wheels; stamp "wheels"
python3 -m pip install --quiet --no-index --no-deps --no-compile --target "$W/site" .gpu/wheels/*.whl
export PYTHONPATH="$ROOT:$W/site${PYTHONPATH:+:$PYTHONPATH}"
step=imports; stamp "loadgate's imports"
python3 -c 'import loadgate.runs, loadgate.gate.protocol, loadgate.report.views, jsonschema, orjson, gguf, prometheus_client, safetensors, pynvml'
python3 -m loadgate --version

step=source; stamp "source"
[ -f "$W/BUILD_OK" ] || { rm -rf "$W/llama.cpp" && tar -xzf .gpu/llama-cpp-src.tar.gz -C "$W"; }

step=build; stamp "build (background; kept from an earlier run on this machine when present)"
[ -f "$W/BUILD_OK" ] || (
  cmake -S "$W/llama.cpp" -B "$W/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release > "$W/cmake.log" 2>&1 &&
  cmake --build "$W/build" --target llama-server -j 16 > "$W/build.log" 2>&1 && echo ok > "$W/BUILD_OK"
) &
build=$!

step=models; stamp "models"
[ -f "$W/models/models.json" ] || python3 benchmarks/gpu/make_gpu_models.py --out "$W/models" --vendor "$W/llama.cpp" > "$W/models.log" 2>&1
stamp "models done: $(tail -c 400 "$W/models.log")"

step=build; wait $build || true
if [ ! -f "$W/BUILD_OK" ]; then tail -50 "$W/build.log" "$W/cmake.log"; exit 1; fi
stamp "build done"

step=validate; stamp "validate"
python3 benchmarks/gpu/validate.py --server "$W/build/bin/llama-server" --models "$W/models" --out "$W/val" \
  2>&1 | tee "$W/validate.log"
stamp "validate done"

step=pack; stamp "pack"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$W/gpu.txt" || true
python3 benchmarks/gpu/pack.py --val "$W/val" --models "$W/models" --work "$W" --out "$W/validation.tar.gz"
echo done > "$W/DONE"
stamp "all done"
