#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs dependencies, builds with warnings as errors,
# runs every test, rebuilds under AddressSanitizer + UndefinedBehaviorSanitizer and runs every
# test again, then once more under ThreadSanitizer, runs the fuzz smoke (every regression and
# seed input, then each libFuzzer target briefly), then checks the tree is clang-format clean.
# Each build after the first compiles while the tests before it run, in the idle scheduling class.
# What a sanitizer build leaves out: the drop-in libraries and the real programs they serve (an
# instrumented library cannot load into Debian's uninstrumented programs), the benchmarks (off
# below, for CI's time), the checks of the sources and of the TSan build's scope (run once, in
# the plain build), the siw interop test (QEMU's minutes, run by the plain build) and the two
# tests in SANITIZER_EXCLUDE below; the TSan build also leaves out the test sources that start no
# thread (tests/single_threaded_sources.txt, checked by the plain build). They run unit_tests a
# suite per process.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints the minutes spent so far (CI must stay within its time) and the processor
# time the finished commands used (user + system, all cores): on a shared machine the wall clock
# moves with the neighbours' load, the processor time much less.
phase() {
  # cutime + cstime of this shell (fields 16 and 17 of /proc/PID/stat, in clock ticks): the
  # commands it waited for and theirs; `times` would run in the $(...) subshell and print zeros.
  local cpu
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.1f", ($14 + $15) / hz / 60 }' \
          "/proc/$$/stat")
  echo "== $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s, processor $cpu min)"
}
bash scripts/install-deps.sh
# Each sanitizer build, and the fuzz build, starts while the tests before it run, in the idle
# scheduling class (chrt --idle): it runs mostly on the processor time the tests leave unused (a
# test's thread that wakes preempts it at once; they still share caches, memory and the disk).
# The test phases kept the 2 cores 73 to 86 % busy (waits on timers, on the network, on other
# programs): about 2.5 minutes of idle processor in the plain tests alone. The build's output is
# printed when the tests are done and the script has waited for it; a failed build fails the run.
# Where the idle class is refused (some sandboxes), nice 19 stands in.
IDLE=(chrt --idle 0)
if ! ("${IDLE[@]}" true) 2>/dev/null; then IDLE=(nice -n 19); fi
BG_PID=""
BG_START=0
SIWVM_PID=""
stop_background() {
  [ -z "$BG_PID" ] || kill -- "-$BG_PID" 2>/dev/null || kill "$BG_PID" 2>/dev/null || true
  [ -z "$SIWVM_PID" ] || kill "$SIWVM_PID" 2>/dev/null || true
}
trap stop_background EXIT
# idle_build LOG COMMAND...: starts COMMAND in the background, idle class, in a process group of
# its own (setsid does not fork here: a background job of a script without job control leads no
# group); its pid is in BG_PID. One at a time.
idle_build() {
  local log=$1
  shift
  setsid -w "${IDLE[@]}" "$@" > "$log" 2>&1 < /dev/null &
  BG_PID=$!
  BG_START=$SECONDS
}
# finish_build LOG: waits for the build idle_build started, prints its output and how long it
# ran, and fails the run when it failed.
finish_build() {
  local rc=0
  wait "$BG_PID" || rc=$?
  BG_PID=""
  cat "$1" || true
  echo "== (that build ran $(((SECONDS - BG_START) / 60)) min $(((SECONDS - BG_START) % 60)) s, started with the tests before it)"
  if [ "$rc" != 0 ]; then
    echo "== the build above failed (exit $rc; its log: $1)"
    exit 1
  fi
}
# A real program killed at a test's deadline leaves every thread's backtrace in the log
# (tests/program_support.hpp): evidence for a hang that does not happen on demand.
export DROPIN_GDB_ON_HANG=1

# ctest over one build; when a test fails, the last lines each failing test printed are shown
# again at the very end, so that a log cut in the middle (as CI's report is) still says which test
# failed and why. Exits with ctest's status. Arguments after the build folder go to ctest.
run_ctest() {
  local dir=$1 rc=0
  shift
  ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" "$@" || rc=$?
  [ "$rc" = 0 ] && return 0
  local failed=$dir/Testing/Temporary/LastTestsFailed.log log=$dir/Testing/Temporary/LastTest.log
  echo "== failed in $dir (ctest exit $rc): the last lines of each failing test"
  if [ -f "$failed" ] && [ -f "$log" ]; then
    local name
    while IFS=: read -r _ name; do
      echo "--- $name"
      awk -v t="$name" '$0 ~ /^[0-9]+\/[0-9]+ Test: / { on = ($3 == t); out = 0; next }
                        on && !out && /^-+$/ { out = 1; next }
                        out && /^<end of output>$/ { on = out = 0 } out' "$log" | cut -c1-600 |
        tail -n 30
    done < "$failed"
  fi
  exit "$rc"
}

phase "build (warnings are errors)"
# The siw interop test's VM image (scripts/siwvm/build.sh, cached in build/siwvm) is made while
# the plain build compiles: about 110 s here (apt's downloads, unpacking the kernel's source,
# compiling siw.ko), which the test would otherwise spend before its first case. The test calls
# build.sh again, which finds the image or says why it could not be made (a failure here is only
# logged). install-deps.sh installed the host tools (QEMU): this run installs no package
# (SIWVM_HOSTDEPS=0, so no dpkg to interrupt; at most an apt-get update) and is stopped if this
# script ends first.
if [ "${SIW_INTEROP:-1}" != 0 ]; then
  mkdir -p build
  SIWVM_HOSTDEPS=0 timeout -k 10 600 bash scripts/siwvm/build.sh build/siwvm \
    > build/siwvm-prebuild.log 2>&1 </dev/null &
  SIWVM_PID=$!
fi
BUILD_DIR=build BUILD_TYPE=RelWithDebInfo bash scripts/build.sh -DIWARP_WERROR=ON -DIWARP_SANITIZE=OFF
if [ -n "$SIWVM_PID" ] && ! wait "$SIWVM_PID"; then
  echo "the siw VM image could not be made ahead of the tests (build/siwvm-prebuild.log):"
  tail -n 5 build/siwvm-prebuild.log
fi
SIWVM_PID=""
phase "tests"
# The sanitizer builds keep line tables only (-g1: file and line in every report) and build no
# benchmarks: full debug info and the bench targets cost CI minutes and no finding. -O0: at -O1
# an ASan source took 1.7x as long to compile (34 s against 20 s for test_rnic_errors.cpp), more
# than the suite's run gained (fresh clones here: build 16 min at -O1 against 7.5 at -O0, tests
# 10.4 against 12.6). The ASan build is clang 19's (installed for the fuzz targets): it compiles
# an ASan + UBSan translation unit in half gcc 12's time (the replay library's: 23 s against
# 45 s; a unit_tests group: 24 s against 48 s), and the other builds keep gcc's warnings and
# gcc's sanitizers.
# One ctest per googletest suite (IWARP_CTEST_PER_SUITE): an ASan unit_tests takes half a second to
# start, a TSan one a seventh, and one ctest per test started them some 870 times per build.
idle_build build/asan-build.log env BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh \
  -DCMAKE_CXX_COMPILER=clang++-19 -DIWARP_WERROR=ON -DIWARP_SANITIZE=ON -DIWARP_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DIWARP_CTEST_PER_SUITE=ON
run_ctest build

phase "build with ASan + UBSan (started with the tests above)"
finish_build build/asan-build.log
phase "tests under ASan + UBSan"
# Two tests whose time goes to programs of others, on what the plain build's tests already
# checked: HtmlViewBrowser (a headless browser renders the pages HtmlView.* write) and
# SiwSignatures (tshark reads committed captures of siw's wire).
SANITIZER_EXCLUDE='^(HtmlViewBrowser|SiwSignatures\.ReadSiwsOwnWire)$'
# gcc 12 refuses (-Wtsan, an error with -Werror) the std::atomic_thread_fence in Boost.Asio's
# fenced blocks, which ThreadSanitizer does not model; Asio's handler queues are ordered by its
# mutexes anyway, so its fenced blocks are compiled out of this build.
idle_build build/tsan-build.log env BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh \
  -DIWARP_WERROR=ON -DIWARP_TSAN=ON -DIWARP_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS=-DBOOST_ASIO_DISABLE_FENCED_BLOCK \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DIWARP_CTEST_PER_SUITE=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan -E "$SANITIZER_EXCLUDE"

phase "build with TSan (started with the tests above)"
finish_build build/tsan-build.log
phase "tests under TSan"
# The fuzz targets' build (clang 19), idle class like the others.
idle_build build/fuzz-build.log bash scripts/fuzz.sh --build-only
# The rnic processes some tests spawn inherit TSAN_OPTIONS: a race there fails its test too.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  run_ctest build-tsan -E "$SANITIZER_EXCLUDE"

phase "fuzz smoke (its build started with the tests above)"
finish_build build/fuzz-build.log
# Every input in fuzz/regressions/ and fuzz/corpus/ once, then 20 s of fuzzing per target
# (clang 19, ASan + UBSan); a crash, leak, hang or broken invariant fails the run.
bash scripts/fuzz.sh --smoke

phase "clang-format"
files=$(git ls-files '*.cpp' '*.hpp')
if ! clang-format --dry-run -Werror $files; then
  echo "clang-format: the files above need formatting (run: clang-format -i \$(git ls-files '*.cpp' '*.hpp'))"
  exit 1
fi
echo "all tests passed (plain, ASan+UBSan, TSan, fuzz smoke), tree is clang-format clean ($((SECONDS / 60)) min)"
