#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs dependencies, builds with warnings as errors,
# runs every test, rebuilds under AddressSanitizer + UndefinedBehaviorSanitizer and runs every
# test again, then once more under ThreadSanitizer, runs the fuzz smoke (every regression and
# seed input, then each libFuzzer target briefly), then checks the tree is clang-format clean.
# The builds after the first compile one after the other in the background while tests run, in
# the idle scheduling class (scripts/later-builds.sh).
# What a sanitizer build leaves out: the drop-in libraries and the real programs they serve (an
# instrumented library cannot load into Debian's uninstrumented programs), the benchmarks (off
# in scripts/later-builds.sh, for CI's time), the checks of the sources and of the TSan build's scope (run once, in
# the plain build), the siw interop test (QEMU's minutes, run by the plain build) and the two
# tests in SANITIZER_EXCLUDE below; the TSan build also leaves out the test sources that start no
# thread (tests/single_threaded_sources.txt, checked by the plain build). They run unit_tests a
# suite per process.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints the minutes spent so far (CI must stay within its time) and the processor
# time the finished commands used (user + system, all cores): on a shared machine the wall clock
# moves with the neighbours' load, the processor time much less. The later builds' processor
# time counts once their chain has ended, in the fuzz smoke's figure.
phase() {
  # cutime + cstime of this shell (fields 16 and 17 of /proc/PID/stat, in clock ticks): the
  # commands it waited for and theirs; `times` would run in the $(...) subshell and print zeros.
  local cpu
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.1f", ($14 + $15) / hz / 60 }' \
          "/proc/$$/stat")
  echo "== $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s, processor $cpu min)"
}
bash scripts/install-deps.sh
# The later builds (ASan + UBSan, TSan, the fuzz targets: scripts/later-builds.sh, one after
# the other) start with the plain build's tests, in the background, in the idle scheduling class
# (chrt --idle): they run on the processor time the tests leave unused (a test's thread that
# wakes preempts them at once; they still share caches, memory and the disk). The test phases
# keep the 2 cores 73 to 86 % busy (waits on timers, on the network, on other programs). Each
# later test phase waits only for its own build, so a build that ends before the tests beside it
# hands the idle processor to the next one. A build's output is printed when its tests are about
# to run; a failed build fails the run. Where the idle class is refused (some sandboxes), nice 19
# stands in.
IDLE=(chrt --idle 0)
if ! ("${IDLE[@]}" true) 2>/dev/null; then IDLE=(nice -n 19); fi
BG_PID=""
SIWVM_PID=""
stop_background() {
  [ -z "$BG_PID" ] || kill -- "-$BG_PID" 2>/dev/null || kill "$BG_PID" 2>/dev/null || true
  [ -z "$SIWVM_PID" ] || kill "$SIWVM_PID" 2>/dev/null || true
}
trap stop_background EXIT
# start_later_builds: scripts/later-builds.sh in the background, idle class, in a process group
# of its own (setsid does not fork here: a background job of a script without job control leads
# no group); its pid is in BG_PID. LATER_BUILDS_RUN marks this run's status files: a chain left
# running by an earlier test.sh that was killed cannot answer for this one (later-builds.sh also
# refuses to run beside it).
start_later_builds() {
  mkdir -p build
  rm -f build/asan-build.status build/tsan-build.status build/fuzz-build.status
  LATER_BUILDS_RUN="$$.$(date +%s%N)"
  export LATER_BUILDS_RUN
  setsid -w "${IDLE[@]}" bash scripts/later-builds.sh > build/later-builds.log 2>&1 < /dev/null &
  BG_PID=$!
}
# background_running: whether later-builds.sh still runs, from this shell's own table of jobs
# (bash reaps an ended job at once, and its pid may then be another process's).
background_running() {
  [[ " $(jobs -rp | tr '\n' ' ') " == *" $BG_PID "* ]]
}
# build_status NAME: prints "EXIT_STATUS SECONDS" once this run's chain has ended build NAME.
build_status() {
  local rc secs run
  [ -f "build/$1-build.status" ] || return 1
  read -r rc secs run < "build/$1-build.status" || return 1
  [ "$run" = "$LATER_BUILDS_RUN" ] || return 1
  echo "$rc $secs"
}
# await_build NAME: waits until later-builds.sh has ended build NAME (asan, tsan, fuzz) or has
# itself ended, prints that build's output and how long it ran, and fails the run when it failed
# or never ended.
await_build() {
  local status rc secs
  while ! build_status "$1" >/dev/null && background_running; do sleep 1; done
  if ! status=$(build_status "$1"); then
    echo "== the later builds ended before the $1 build did (build/later-builds.log):"
    tail -n 20 build/later-builds.log || true
    exit 1
  fi
  read -r rc secs <<< "$status"
  cat "build/$1-build.log" || true
  echo "== (that build ran $((secs / 60)) min $((secs % 60)) s, in the background)"
  if [ "$rc" != 0 ]; then
    echo "== the build above failed (exit $rc; its log: build/$1-build.log)"
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
start_later_builds
run_ctest build

phase "build with ASan + UBSan (in the background since the tests above began)"
await_build asan
phase "tests under ASan + UBSan"
# What runs here must be instrumented (an ASan program names __asan_init).
if ! grep -qaF __asan_init build-asan/tests/unit_tests || ! grep -qaF __asan_init build-asan/rnic; then
  echo "== build-asan's unit_tests or rnic is not built with AddressSanitizer: refusing to call its tests ASan's"
  exit 1
fi
# Two tests whose time goes to programs of others, on what the plain build's tests already
# checked: HtmlViewBrowser (a headless browser renders the pages HtmlView.* write) and
# SiwSignatures (tshark reads committed captures of siw's wire).
SANITIZER_EXCLUDE='^(HtmlViewBrowser|SiwSignatures\.ReadSiwsOwnWire)$'
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan -E "$SANITIZER_EXCLUDE"

phase "build with TSan (in the background)"
await_build tsan
phase "tests under TSan"
# The rnic processes some tests spawn inherit TSAN_OPTIONS: a race there fails its test too.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  run_ctest build-tsan -E "$SANITIZER_EXCLUDE"

phase "build of the fuzz targets (in the background)"
await_build fuzz
wait "$BG_PID" || true
BG_PID=""
phase "fuzz smoke"
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
