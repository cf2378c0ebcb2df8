#!/usr/bin/env bash
# Interleaved client-truth runs of several trees on one quiet host (the lent H200's CPUs; GPU unused):
#   bash benchmarks/gpu/client_truth_pairs.sh ROUNDS OUTFILE NAME=DIR [NAME=DIR ...]
# Each DIR is a loadgate tree holding this tree's benchmarks/client_truth.py and event_source.py
# (the same two scripts on every side). Round k runs the trees in an order rotated by k, each once:
# `client_truth.py --streams 256 --reps 1`, the event source pinned to CPU 0 and loadgate to CPU 1.
# Needs the carried wheels installed (benchmarks/gpu/pipeline.sh's first step) on PYTHONPATH.
# Medians and per-round ratios: python benchmarks/gpu/client_truth_pairs_summary.py OUTFILE NAME
set -euo pipefail
rounds=$1 out=$2
shift 2
trees=("$@")
n=${#trees[@]}
for ((k = 0; k < rounds; k++)); do
  for ((j = 0; j < n; j++)); do
    t=${trees[$(( (j + k) % n ))]}
    name=${t%%=*} dir=${t#*=}
    echo "== $name $((k + 1))" >> "$out"
    # a run that fails is written down (with loadgate's stderr) and the rounds go on
    (cd "$dir" && python3 benchmarks/client_truth.py --streams 256 --reps 1 --server-cpus 0 --client-cpus 1 2>&1 \
      | grep -v '^machine:' >> "$out") || echo "   (that run failed: above)" >> "$out"
  done
done
echo "done" >> "$out"
