#!/usr/bin/env bash
# Compiler launcher for the llama-server build (build_llama_server.sh passes it as
# CMAKE_C_COMPILER_LAUNCHER and CMAKE_CXX_COMPILER_LAUNCHER): cmake runs `llama_cc.sh COMPILER ARGS...`
# for every source file.
#
# ggml's CPU backend (ggml/src/ggml-cpu/: the matrix kernels that do a model's arithmetic) compiles
# as cmake says (-O3). Everything else (llama's model and server code, the HTTP and JSON libraries,
# and ggml's graph, allocator, GGUF reader and reference quantisation code in ggml/src/: header
# parsing, template instantiation and big scalar files, little of the run time on our tiny models)
# compiles at $LLAMA_CC_OPT (default -O1): measured on 2 cores, the whole build took 1,176
# task-seconds instead of 1,717 at -O3 (one large file, common/arg.cpp: 22 s instead of 36) when
# all of ggml/src was at -O3; ggml-quants.c alone takes 8.3 s at -O3 and 2.4 s at -O1. No flag
# here changes floating-point semantics (no -ffast-math at any level).
# ccache, when it is on PATH, wraps the compiler (cmake's own ccache switch is off when a
# launcher is set).
set -euo pipefail
opt="${LLAMA_CC_OPT:--O1}"
args=("$@")
kernel=0
for a in "$@"; do
  case "$a" in */ggml/src/ggml-cpu/*) kernel=1 ;; esac
done
if [[ $kernel == 0 ]]; then
  for i in "${!args[@]}"; do
    case "${args[$i]}" in -O|-O[0-9s]|-Ofast) args[$i]="$opt" ;; esac
  done
fi
if command -v ccache >/dev/null 2>&1; then exec ccache "${args[@]}"; fi
exec "${args[@]}"
