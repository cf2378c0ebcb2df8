#!/usr/bin/env bash
# Compiler launcher for the llama-server build (build_llama_server.sh passes it as
# CMAKE_C_COMPILER_LAUNCHER and CMAKE_CXX_COMPILER_LAUNCHER): cmake runs `llama_cc.sh COMPILER ARGS...`
# for every source file.
#
# ggml's sources (ggml/src/: the matrix kernels that do a model's arithmetic) compile as cmake says
# (-O3). Everything else (llama's model and server code, the HTTP and JSON libraries: four fifths
# of the compile time, header parsing and template instantiation, little of the run time on our
# tiny models) compiles at $LLAMA_CC_OPT (default -O1): measured on 2 cores, the whole build took
# 1,176 task-seconds instead of 1,717 at -O3 (one large file, common/arg.cpp: 22 s instead of 36).
# ccache, when it is on PATH, wraps the compiler (cmake's own ccache switch is off when a
# launcher is set).
set -euo pipefail
opt="${LLAMA_CC_OPT:--O1}"
args=("$@")
kernel=0
for a in "$@"; do
  case "$a" in */ggml/src/*) kernel=1 ;; esac
done
if [[ $kernel == 0 ]]; then
  for i in "${!args[@]}"; do
    case "${args[$i]}" in -O|-O[0-9s]|-Ofast) args[$i]="$opt" ;; esac
  done
fi
if command -v ccache >/dev/null 2>&1; then exec ccache "${args[@]}"; fi
exec "${args[@]}"
