#!/usr/bin/env bash
# Prepare what the GPU validation carries to the device (benchmarks/gpu/README.md):
#   .gpu/llama-cpp-src.tar.gz  the llama.cpp source from the llama-cpp-python 0.3.36 sdist, stripped
#   .gpu/wheels/               orjson and gguf wheels for CPython 3.12 on x86_64 (the device's Python)
# .gpu/ is ignored by git; name it in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu/wheels
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
SRC=$(python3 -c 'import sys; sys.path.insert(0, "scripts/engines"); import common; print(common.llama_cpp_source())')
python3 -m pip download --quiet --no-deps -d .gpu/wheels --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 orjson gguf
tar -C "$(dirname "$SRC")" --exclude='llama.cpp/models' --exclude='llama.cpp/docs' --exclude='llama.cpp/media' \
  --exclude='llama.cpp/benches' -czf .gpu/llama-cpp-src.tar.gz "$(basename "$SRC")"
ls -la .gpu .gpu/wheels
