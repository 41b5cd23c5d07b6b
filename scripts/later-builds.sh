#!/usr/bin/env bash
# scripts/later-builds.sh: the builds scripts/test.sh tests after the plain one, one after the
# other: ASan + UBSan (build-asan), TSan (build-tsan), then the fuzz targets (build-fuzz).
# test.sh runs this in the background, in the idle scheduling class, from the start of the plain
# build's tests, and each later test phase waits only for its own build: a build that ends
# before the tests beside it leaves their unused processor time to the next build, not idle.
# Each build writes build/NAME-build.log, then build/NAME-build.status ("EXIT_STATUS SECONDS
# RUN", RUN being test.sh's LATER_BUILDS_RUN); the first build that fails ends the script with
# its status.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mkdir -p build || exit 1
# One chain at a time: one left running by a test.sh that was killed would build into the same
# trees.
exec 9> build/later-builds.lock
if ! flock -n 9; then
  echo "later-builds.sh: another later-builds.sh is running (an earlier test.sh's?): stop it first"
  exit 1
fi

# build NAME COMMAND...
build() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" > "build/$name-build.log" 2>&1 < /dev/null || rc=$?
  # Written whole, then renamed: the waiting test.sh never reads half a status.
  echo "$rc $((SECONDS - start)) ${LATER_BUILDS_RUN:-}" > "build/$name-build.status.part"
  mv "build/$name-build.status.part" "build/$name-build.status"
  [ "$rc" = 0 ] || exit "$rc"
}

# The sanitizer builds keep line tables only (-g1: file and line in every report) and build no
# benchmarks: full debug info and the bench targets cost CI minutes and no finding.
#
# ASan + UBSan: clang 19's (installed for the fuzz targets), at -O0. clang compiles an ASan +
# UBSan translation unit in half gcc 12's time (the replay library's: 23 s against 45 s; a
# unit_tests group: 24 s against 48 s); the plain and TSan builds keep gcc's warnings and
# sanitizers. -O0: at -O1 an ASan source took 1.7x as long to compile with gcc 12 (34 s against
# 20 s for test_rnic_errors.cpp), more than the suite's run gained (fresh clones here, gcc: build
# 16 min at -O1 against 7.5 at -O0, tests 10.4 against 12.6).
# One ctest per googletest suite (IWARP_CTEST_PER_SUITE): an ASan unit_tests takes half a second
# to start, a TSan one a seventh, and one ctest per test started them some 870 times per build.
# A build-asan that another compiler configured (gcc's, before) is removed: CMake would start its
# cache afresh on the new compiler and keep none of the options below, and the "ASan" tests
# would run an unsanitized build.
asan_build() {
  if [ -f build-asan/CMakeCache.txt ] &&
     ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-19$' build-asan/CMakeCache.txt; then
    echo "build-asan was configured with another compiler: removed, to be configured with clang++-19"
    rm -rf build-asan || return 1
  fi
  BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh "$@"
}
build asan asan_build \
  -DCMAKE_CXX_COMPILER=clang++-19 -DIWARP_WERROR=ON -DIWARP_SANITIZE=ON -DIWARP_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DIWARP_CTEST_PER_SUITE=ON

# TSan: gcc 12 at -O1. gcc refuses (-Wtsan, an error with -Werror) the std::atomic_thread_fence
# in Boost.Asio's fenced blocks, which ThreadSanitizer does not model; Asio's handler queues are
# ordered by its mutexes anyway, so its fenced blocks are compiled out of this build.
build tsan env BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh \
  -DIWARP_WERROR=ON -DIWARP_TSAN=ON -DIWARP_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS=-DBOOST_ASIO_DISABLE_FENCED_BLOCK \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DIWARP_CTEST_PER_SUITE=ON

# The fuzz targets (clang 19, ASan + UBSan, every library instrumented for coverage).
build fuzz bash scripts/fuzz.sh --build-only
