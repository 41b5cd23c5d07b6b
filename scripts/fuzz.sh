#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (build tree build-fuzz, clang with ASan + UBSan) and
# runs them. See fuzz/README.md for the targets and what each one checks.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(stream_decoder mpa_frame segment_receiver qp_receive pcap enlarge_wire enlarge_connection)

usage() {
  cat <<EOF
usage: bash scripts/fuzz.sh [--seconds N] [--jobs N] [--smoke] [TARGET...]
       bash scripts/fuzz.sh --make-seeds
       bash scripts/fuzz.sh --build-only

Builds build-fuzz (clang++-19, -fsanitize=fuzzer-no-link,address,undefined on every library)
and runs each TARGET (default: all) with libFuzzer for N seconds, starting from its seeds in
fuzz/corpus/TARGET/ and its crash inputs in fuzz/regressions/TARGET/. New corpus entries go to
a scratch directory (build-fuzz/fuzz-work/TARGET/corpus), never into the repository. Prints the
executions per second and in total for each target. Exits non-zero when any target crashed,
leaked, hung or broke one of its invariants; the input that did it is saved as
build-fuzz/fuzz-work/TARGET/crash-* (or leak-*, timeout-*, oom-*) and its path is printed.

  --seconds N   how long each target runs (default 300; 20 with --smoke)
  --jobs N      how many targets run at the same time (default 1, with --smoke one per core;
                each is one process)
  --smoke       the CI smoke: every file of fuzz/regressions/ and fuzz/corpus/ runs once
                through its target, then each target fuzzes briefly (--seconds, default 20)
  --make-seeds  regenerate fuzz/corpus/ from the captures in pcap_traces/ (and ../shared/
                corpus/siw when it is there) and from streams built by our own encoders
  --build-only  configure and build, run nothing
  -h, --help    this text

Targets: ${ALL_TARGETS[*]}
Environment: FUZZ_CXX (compiler, default clang++-19), FUZZ_BUILD_DIR (default build-fuzz),
FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=8192"), IWARP_FUZZ_KNOWN_BUGS (checks to
switch off; default: those fuzz/known_bugs.txt lists; set it empty to run every check).
Reproduce a crash: build-fuzz/fuzz/fuzz_TARGET path/to/crash-input
Minimize it:       build-fuzz/fuzz/fuzz_TARGET -minimize_crash=1 -runs=10000 path/to/crash-input
EOF
}

SECONDS_EACH=""
JOBS=""
SMOKE=0
MAKE_SEEDS=0
BUILD_ONLY=0
TARGETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --seconds=*) SECONDS_EACH="${1#*=}"; shift ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --jobs=*) JOBS="${1#*=}"; shift ;;
    --smoke) SMOKE=1; shift ;;
    --make-seeds) MAKE_SEEDS=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *)
      if [[ ! " ${ALL_TARGETS[*]} " == *" $1 "* ]]; then
        echo "fuzz.sh: unknown target $1; targets: ${ALL_TARGETS[*]}" >&2
        exit 2
      fi
      TARGETS+=("$1"); shift ;;
  esac
done
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=("${ALL_TARGETS[@]}")
if [[ -z "$SECONDS_EACH" ]]; then
  if [[ $SMOKE -eq 1 ]]; then SECONDS_EACH=20; else SECONDS_EACH=300; fi
fi
if [[ -z "$JOBS" ]]; then
  if [[ $SMOKE -eq 1 ]]; then JOBS=$(nproc); else JOBS=1; fi
fi
[[ "$SECONDS_EACH" =~ ^[0-9]+$ && "$JOBS" =~ ^[1-9][0-9]*$ ]] || {
  echo "fuzz.sh: --seconds and --jobs take numbers" >&2
  exit 2
}

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CXX_FUZZ=${FUZZ_CXX:-clang++-19}
WORK="$BUILD_DIR/fuzz-work"

# clang 14 (Debian 12's default clang) cannot use libstdc++ 12's <expected> (it needs
# __cpp_concepts >= 202002L, which clang defines from version 16 on): use Debian 12's clang 19.
if ! command -v "$CXX_FUZZ" >/dev/null || ! ls /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  if [[ "$CXX_FUZZ" == clang++-19 ]]; then
    echo "== installing clang-19 and its libFuzzer runtime (Debian 12 packages)"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      clang-19 libclang-rt-19-dev >/dev/null
  fi
fi
command -v "$CXX_FUZZ" >/dev/null || { echo "fuzz.sh: $CXX_FUZZ not found" >&2; exit 2; }

CMAKE_ARGS=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER="$CXX_FUZZ"
            -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIWARP_FUZZ=ON -DIWARP_BUILD_TESTS=OFF
            -DIWARP_BUILD_BENCH=OFF -DIWARP_SANITIZE=OFF -DIWARP_TSAN=OFF)
command -v ccache >/dev/null && CMAKE_ARGS+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Until the top-level CMakeLists.txt instruments the whole tree itself, do it from here.
if ! grep -q 'fuzzer-no-link' CMakeLists.txt; then
  CMAKE_ARGS+=("-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
fi
echo "== configure and build $BUILD_DIR ($CXX_FUZZ)"
cmake "${CMAKE_ARGS[@]}" >/dev/null
BUILD_TARGETS=()
for t in "${TARGETS[@]}"; do BUILD_TARGETS+=("fuzz_$t"); done
[[ $MAKE_SEEDS -eq 1 ]] && BUILD_TARGETS+=(fuzz_make_seeds)
cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${BUILD_TARGETS[@]}"

if [[ $MAKE_SEEDS -eq 1 ]]; then
  caps=(pcap_traces/siw/*.pcap pcap_traces/generated/*.pcap)
  # The shared siw corpus, when this checkout sits next to it (its files are in pcap_traces/
  # too; any it has beyond them are used as well).
  if [[ -d ../shared/corpus/siw ]]; then
    for f in ../shared/corpus/siw/*.pcap; do
      [[ -e "pcap_traces/siw/$(basename "$f")" ]] || caps+=("$f")
    done
  fi
  "$BUILD_DIR/fuzz/fuzz_make_seeds" fuzz/corpus "${caps[@]}"
  du -sh fuzz/corpus
  exit 0
fi
[[ $BUILD_ONLY -eq 1 ]] && exit 0

SYMBOLIZER=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[[ -n "$SYMBOLIZER" ]] && export ASAN_SYMBOLIZER_PATH="$SYMBOLIZER"
export RNIC_LOG=off
# Checks switched off for bugs reported but not fixed yet (see fuzz/known_bugs.txt).
if [[ -z "${IWARP_FUZZ_KNOWN_BUGS+x}" && -f fuzz/known_bugs.txt ]]; then
  # (no bug listed is the usual case: grep then finds nothing, which is no error here)
  IWARP_FUZZ_KNOWN_BUGS=$({ grep -vE '^\s*(#|$)' fuzz/known_bugs.txt || true; } | awk '{print $2}' | paste -sd, -)
  export IWARP_FUZZ_KNOWN_BUGS
  if [[ -n "$IWARP_FUZZ_KNOWN_BUGS" ]]; then
    echo "== known bugs, their checks off: $IWARP_FUZZ_KNOWN_BUGS"
  fi
fi

# Runs every seed and regression input of target $1 once. Returns non-zero on a failure.
replay_inputs() {
  local t=$1 bin="$BUILD_DIR/fuzz/fuzz_$1" log="$WORK/$1/replay.log"
  local files=()
  for d in "fuzz/regressions/$t" "fuzz/corpus/$t"; do
    [[ -d "$d" ]] || continue
    while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$d" -type f ! -name '*.md' -print0 | sort -z)
  done
  [[ ${#files[@]} -eq 0 ]] && { echo "$t: no seed or regression inputs"; return 0; }
  if "$bin" -timeout=30 -rss_limit_mb=4096 "${files[@]}" >"$log" 2>&1; then
    echo "$t: ${#files[@]} seed and regression inputs pass"
  else
    echo "$t: FAILED on one of its ${#files[@]} seed/regression inputs ($(grep -E '^Running: ' "$log" | tail -1)); see $log"
    grep -E 'Running: |FUZZ_CHECK|ERROR: |SUMMARY' "$log" | tail -6
    return 1
  fi
}

# Fuzzes target $1 for SECONDS_EACH seconds. Writes its summary line to $WORK/$1/summary.
fuzz_one() {
  local t=$1 bin="$BUILD_DIR/fuzz/fuzz_$1" dir="$WORK/$1"
  mkdir -p "$dir/corpus"
  local seeds=()
  for d in "fuzz/corpus/$t" "fuzz/regressions/$t"; do [[ -d "$d" ]] && seeds+=("$d"); done
  local start=$(date +%s) rc=0
  # The smoke (CI) starts from a fixed seed, so a run is repeatable; a long run varies it.
  local seed_arg=()
  if [[ $SMOKE -eq 1 ]]; then seed_arg=(-seed=1); fi
  # shellcheck disable=SC2086
  "$bin" "${seed_arg[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$dir/" ${FUZZ_ARGS:-} "$dir/corpus" "${seeds[@]}" >"$dir/fuzz.log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - start ))
  local runs
  # (a grep that finds nothing must not end this function under set -e / pipefail)
  runs=$({ grep -m1 'stat::number_of_executed_units' "$dir/fuzz.log" || true; } | awk '{print $2}')
  [[ -z "$runs" ]] && runs=$({ grep -oE '^#[0-9]+' "$dir/fuzz.log" || true; } | tail -1 | tr -d '#')
  runs=${runs:-0}
  local rate=$(( runs / (took > 0 ? took : 1) ))
  local corpus
  corpus=$(find "$dir/corpus" -type f | wc -l)
  if [[ $rc -eq 0 ]]; then
    printf '%-17s ok      %8d execs in %4ds  %7d exec/s  (%d new corpus entries)\n' \
      "$t" "$runs" "$took" "$rate" "$corpus" >"$dir/summary"
  else
    local art
    art=$({ grep -oE "Test unit written to .*" "$dir/fuzz.log" || true; } | tail -1 | sed 's/Test unit written to //')
    printf '%-17s FAILED  %8d execs in %4ds  %7d exec/s  input: %s  log: %s\n' \
      "$t" "$runs" "$took" "$rate" "${art:-?}" "$dir/fuzz.log" >"$dir/summary"
    { grep -E 'FUZZ_CHECK|ERROR: |SUMMARY' "$dir/fuzz.log" || true; } | head -4 >>"$dir/summary"
    return 1
  fi
}

mkdir -p "$WORK"
for t in "${TARGETS[@]}"; do
  mkdir -p "$WORK/$t"
  rm -f "$WORK/$t/summary"
done
failed=0
T0=$(date +%s)
if [[ $SMOKE -eq 1 ]]; then
  echo "== seed and regression inputs, once each"
  for t in "${TARGETS[@]}"; do replay_inputs "$t" || failed=1; done
fi
if [[ "$SECONDS_EACH" -gt 0 ]]; then
  echo "== fuzzing ${TARGETS[*]}: ${SECONDS_EACH}s each, $JOBS at a time"
  for t in "${TARGETS[@]}"; do
    fuzz_one "$t" &
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
  done
  wait || true
  # Each target's verdict is in its summary (a job's exit status may be reaped by wait -n).
  for t in "${TARGETS[@]}"; do
    if [[ -f "$WORK/$t/summary" ]]; then
      cat "$WORK/$t/summary"
      grep -q FAILED "$WORK/$t/summary" && failed=1
    else
      echo "$t: no summary (the run did not finish)"
      failed=1
    fi
  done
fi
echo "== fuzz.sh: $(( $(date +%s) - T0 ))s; $([[ $failed -eq 0 ]] && echo 'no crash' || echo 'FAILURES above')"
exit $failed
