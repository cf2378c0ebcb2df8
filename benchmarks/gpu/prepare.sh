#!/usr/bin/env bash
# Prepare what the GPU validation carries to the device (benchmarks/gpu/README.md):
#   .gpu/llama-cpp-src.tar.gz  the llama.cpp source from the llama-cpp-python 0.3.36 sdist, stripped
#   .gpu/wheels/               every package benchmarks/gpu/packages.txt marks "carried", as CPython 3.12
#                              x86_64 wheels (the device's Python has no network)
# .gpu/ is ignored by git; the device call names it in `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu/wheels
mkdir -p .gpu/wheels
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
SRC=$(python3 -c 'import sys; sys.path.insert(0, "scripts/engines"); import common; print(common.llama_cpp_source())')
mapfile -t carried < <(awk '$1 == "carried" { print $2 }' benchmarks/gpu/packages.txt)
python3 -m pip download --quiet --no-deps -d .gpu/wheels --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 "${carried[@]}"
tar -C "$(dirname "$SRC")" --exclude='llama.cpp/models' --exclude='llama.cpp/docs' --exclude='llama.cpp/media' \
  --exclude='llama.cpp/benches' -czf .gpu/llama-cpp-src.tar.gz "$(basename "$SRC")"
ls -la .gpu .gpu/wheels
