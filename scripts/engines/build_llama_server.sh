#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the source bundled in the llama-cpp-python sdist, once.
#
# Usage: scripts/engines/build_llama_server.sh [--force]
#
# The source comes from `common.llama_cpp_source()` (the pinned sdist, downloaded and extracted
# once under the cache). The binary is cached at
#     $(cache_dir)/llama-server/<sdist version>-<key>/llama-server
# where <key> is the sha256 (first 12 hex digits) of the sdist file, the cmake flags below and the
# CPU's instruction-set flags, so another source, configuration or CPU builds afresh and an
# unchanged one is reused at once.
# Only the `llama-server` target is built (Release, static, no tests/examples, no curl, no web UI
# download; ggml's kernels at -O3 and the rest at $LLAMA_CC_OPT, default -O1, through
# llama_cc.sh), with Ninja when it is installed and ccache when it is on PATH. A file lock keeps two
# callers from building at the same time. The last line of stdout is the binary's path; timings
# and the binary size go to stderr. `--force` rebuilds even when the binary is cached.
#
# Environment: PYTHON (default: python3), LOADGATE_CACHE (see common.cache_dir),
# JOBS (default: the number of cores), LLAMA_CC_OPT (default -O1), KEEP_BUILD=1 keeps the build
# tree for inspection.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build_llama_server.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "build_llama_server: $*" >&2; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

cache="$("$python" "$here/common.py" cache-dir)"
t_src=$(date +%s.%N)
src="$("$python" "$here/common.py" llama-cpp-source | tail -n 1)"
t_src_done=$(date +%s.%N)
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  log "no CMakeLists.txt in $src"; exit 3
fi
sdist="$(ls "$cache"/src/llama*cpp*python-*.tar.gz 2>/dev/null | head -n 1 || true)"
version="$(basename "$(dirname "$(dirname "$src")")" | sed 's/^llama_cpp_python-//')"

flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_CURL=OFF
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_CCACHE=OFF
  "-DCMAKE_C_COMPILER_LAUNCHER=$here/llama_cc.sh"
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$here/llama_cc.sh"
)
# llama_cc.sh compiles ggml's kernels as cmake says and the rest at $LLAMA_CC_OPT (see it); its
# text and that level are part of the key below.
cc_opt="${LLAMA_CC_OPT:--O1}"
export LLAMA_CC_OPT="$cc_opt"
sdist_sha="$( [[ -n "$sdist" ]] && sha256sum "$sdist" | cut -d' ' -f1 || echo "no-sdist-$version")"
# GGML_NATIVE (on by default) compiles for this CPU (-march=native): its instruction sets are part
# of the key, so a cache restored onto another CPU builds afresh instead of dying on SIGILL.
cpu_flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)"
key="$( { printf '%s\n' "$sdist_sha" "${flags[@]/$here/}" "$cpu_flags" "$cc_opt"; cat "$here/llama_cc.sh"; } \
  | sha256sum | cut -c1-12)"
dest_dir="$cache/llama-server/$version-$key"
binary="$dest_dir/llama-server"

mkdir -p "$cache/llama-server"
exec 9>"$cache/llama-server/.build.lock"
flock 9

if [[ -x "$binary" && "$force" == 0 ]]; then
  log "cached: $binary ($(stat -c %s "$binary") bytes; source step $(since "$t_src" "$t_src_done") s)"
  echo "$binary"
  exit 0
fi

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-$cache/ccache}"
  log "ccache found (llama_cc.sh uses it): cache in $CCACHE_DIR"
fi

build="$cache/llama-server/build-$version-$key"
rm -rf "$build"
log "source $src (llama-cpp-python $version, sdist sha256 ${sdist_sha:0:12}); building in $build with $jobs jobs"
t0=$(date +%s.%N)
cmake -S "$src" -B "$build" "${generator[@]}" "${flags[@]}" >"$build.configure.log" 2>&1 \
  || { tail -n 40 "$build.configure.log" >&2; exit 3; }
t1=$(date +%s.%N)
cmake --build "$build" --target llama-server -j "$jobs" >"$build.build.log" 2>&1 \
  || { tail -n 60 "$build.build.log" >&2; exit 3; }
t2=$(date +%s.%N)

mkdir -p "$dest_dir"
cp "$build/bin/llama-server" "$binary.partial"
mv "$binary.partial" "$binary"
[[ -f "$build/.ninja_log" ]] && cp "$build/.ninja_log" "$dest_dir/ninja_log.txt"
cp "$build.configure.log" "$dest_dir/configure.log"
printf '%s\n' "${flags[@]}" "LLAMA_CC_OPT=$cc_opt" >"$dest_dir/cmake-flags.txt"
configure_s=$(since "$t0" "$t1")
compile_s=$(since "$t1" "$t2")
printf '{"configure_s": %s, "compile_s": %s, "jobs": %s, "generator": "%s", "bytes": %s}\n' \
  "$configure_s" "$compile_s" "$jobs" "${generator[*]:-make}" "$(stat -c %s "$binary")" >"$dest_dir/build-time.json"
if [[ "${KEEP_BUILD:-0}" != 1 ]]; then rm -rf "$build" "$build.configure.log" "$build.build.log"; fi

log "built in $(since "$t0" "$t2") s (configure $configure_s s, compile $compile_s s, $jobs jobs, ${generator[*]:-make}); $(stat -c %s "$binary") bytes"
echo "$binary"
