#!/usr/bin/env bash
# Ray actors beside local load.workers, on one 16-core host (the lent H200 machine: its CPUs only).
# Per count (1, 8, 2, 4): the most events/s, stepping the streams by x1.25, at which the true
# client-added delay p99 (benchmarks/client_truth.py: loadgate's stamps against the event sources'
# own send times) stays <= 1 ms and loadgate's verdict is valid; once with that many load.workers,
# once with that many Ray actors of one worker each (a Ray head on the same 8 client cores). The
# event sources (benchmarks/event_source.py, 8 processes on one port) take cores 0-7.
#
# Needs, in .rayship/ (ignored by git; the device call names it in `carry`): the cp312 wheels of
# ray 2.60.0 (its Java jars left out, 47 MB instead of 79: one upload holds it; Python actors never
# load them), orjson, jsonschema and its three (benchmarks/gpu/packages.txt lists why each).
#   run from the repository root:  bash benchmarks/ray_capacity.sh OUT_DIR
set -euo pipefail
OUT_DIR=${1:-/tmp/raycap}
mkdir -p "$OUT_DIR"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rayship/*.whl
export PYTHONPATH="$PWD:/tmp/site"
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
python3 -c 'import ray, loadgate.runs, orjson, jsonschema, psutil; print("ray", ray.__version__)'
nproc
taskset -c 8-15 python3 -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --port=6390 \
  --num-cpus=8 --include-dashboard=false --disable-usage-stats --object-store-memory=500000000 > "$OUT_DIR/ray-start.log" 2>&1
python3 benchmarks/client_truth.py --capacity --workers 1 8 2 4 --ray 127.0.0.1:6390 --sources 8 \
  --server-cpus 0-7 --client-cpus 8-15 --per-stream 6 --start-streams 96 --json "$OUT_DIR/ray-capacity.json" \
  2>&1 | tee "$OUT_DIR/ray-capacity.txt"
python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1 || true
