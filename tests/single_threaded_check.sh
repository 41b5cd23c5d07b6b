#!/usr/bin/env bash
# tests/single_threaded_check.sh UNIT_TESTS FILTER [LIST]: every test of every source LIST names
# (default tests/single_threaded_sources.txt) runs under strace, source by source, and must pass,
# start no thread in the test process and run no program of ours (the rnic tool, unit_tests
# again, anything in the build tree): the TSan build leaves these sources out, which is only
# right while no second thread of ours ever runs in them. FILTER is the googletest filter
# tests/CMakeLists.txt derived from the listed sources' TEST lines: the plain build leaves the
# tests it selects out of its one-ctest-per-test list, so this check is their run there, and it
# first checks that FILTER selects exactly the listed sources' tests. Exit 0 when all holds, 1
# with one line per problem (a source that breaks the rule, a failing test, a test the filter
# gets wrong), 2 when it cannot check (no strace, ptrace denied, no unit_tests); the tests still
# run then, without strace.
set -euo pipefail
UNIT_TESTS=${1:?usage: single_threaded_check.sh UNIT_TESTS FILTER [LIST]}
FILTER=${2:?usage: single_threaded_check.sh UNIT_TESTS FILTER [LIST]}
LIST=${3:-$(cd "$(dirname "$0")" && pwd)/single_threaded_sources.txt}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "single_threaded_check: python3 is not installed" >&2; exit 2; }
[ -x "$UNIT_TESTS" ] || { echo "single_threaded_check: no unit_tests at $UNIT_TESTS" >&2; exit 2; }
[ -r "$LIST" ] || { echo "single_threaded_check: cannot read $LIST" >&2; exit 2; }
UNIT_TESTS=$(cd "$(dirname "$UNIT_TESTS")" && pwd)/$(basename "$UNIT_TESTS")
BUILD=$(cd "$(dirname "$UNIT_TESTS")/.." && pwd)
# No strace, or ptrace denied (a container without CAP_SYS_PTRACE, yama): the tests run
# without it, and the check says once why it could not judge them.
cannot=""
if ! command -v strace >/dev/null; then
  cannot="strace is not installed"
elif ! strace -f -qq -o /dev/null true </dev/null 2>/dev/null; then
  cannot="strace cannot trace here (ptrace denied?)"
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Which tests each source holds: googletest lists every test with its file.
"$UNIT_TESTS" --gtest_list_tests --gtest_output="json:$WORK/tests.json" >/dev/null </dev/null ||
  { echo "single_threaded_check: $UNIT_TESTS --gtest_list_tests failed" >&2; exit 2; }
fail=0
checked=0
mapfile -t sources < <(grep -vE '^\s*(#|$)' "$LIST")
if [ "${#sources[@]}" = 0 ]; then
  echo "single_threaded_check: $LIST names no source"
  exit 1
fi
# One form only, the one tests/CMakeLists.txt reads (lines that start with test_): an entry it
# would not read could not be left out of the plain build's list, nor found here.
for source in "${sources[@]}"; do
  if ! [[ $source =~ ^test_[a-z0-9_]+$ ]]; then
    echo "single_threaded_check: $LIST: \"$source\" is not a source's name (test_..., alone on its line)"
    exit 1
  fi
done
"$UNIT_TESTS" --gtest_list_tests --gtest_filter="$FILTER" --gtest_output="json:$WORK/selected.json" \
  >/dev/null </dev/null ||
  { echo "single_threaded_check: $UNIT_TESTS --gtest_list_tests --gtest_filter=... failed" >&2; exit 2; }
wrong=$(python3 "$HERE/strace_verdict.py" partition "$WORK/tests.json" "$WORK/selected.json" \
          "${sources[@]}") ||
  { echo "single_threaded_check: cannot read googletest's lists of tests" >&2; exit 2; }
if [ -n "$wrong" ]; then
  echo "the filter tests/CMakeLists.txt derived from $LIST is not exact (a suite shared with a"
  echo "source not listed, or a test declared in a form it does not read):"
  echo "$wrong"
  fail=1
fi
# The list is read on descriptor 3: the tests, and the programs they start, get /dev/null as
# their stdin and cannot eat the rest of it.
while read -r source <&3; do
  filter=$(python3 "$HERE/strace_verdict.py" tests "$WORK/tests.json" "$source") ||
    { echo "single_threaded_check: cannot read googletest's list of tests" >&2; exit 2; }
  if [ -z "$filter" ]; then
    echo "$source: no test of unit_tests comes from $source.cpp (a stale entry in $LIST?)"
    fail=1
    continue
  fi
  rc=0
  # In the build folder, where the plain build's other unit_tests ctests run (gtest_discover_tests'
  # WORKING_DIRECTORY): what a test writes to its current folder stays in the build tree.
  cd "$BUILD"
  # -q, not -qq: the "+++ exited" lines tell a pid used again from the one before it.
  tracer=(strace -f -q --seccomp-bpf -e trace=clone,clone3,fork,vfork,execve,execveat
          -e signal=none -o "$WORK/$source.trace")
  [ -z "$cannot" ] || tracer=()
  timeout -k 10 600 "${tracer[@]}" "$UNIT_TESTS" --gtest_filter="$filter" --gtest_brief=1 \
    --gtest_output="json:$WORK/$source.json" > "$WORK/$source.out" 2>&1 </dev/null || rc=$?
  if [ "$rc" != 0 ]; then
    echo "$source: its tests exited $rc; their last lines:"
    tail -n 40 "$WORK/$source.out"
    fail=1
    continue
  fi
  # A test that skipped itself passed, as ctest counts it; it is named here (ctest would have
  # listed it as skipped).
  skipped=$(python3 "$HERE/strace_verdict.py" skipped "$WORK/$source.json") ||
    { echo "single_threaded_check: cannot read the results of $source" >&2; exit 2; }
  [ -z "$skipped" ] || echo "$source: skipped: $skipped"
  if [ -n "$cannot" ]; then
    checked=$((checked + 1))
    continue
  fi
  verdict=$(python3 "$HERE/strace_verdict.py" trace "$WORK/$source.trace" "$BUILD") ||
    { echo "single_threaded_check: cannot read the trace of $source" >&2; exit 2; }
  if [ -n "$verdict" ]; then
    echo "$source: $verdict, so the TSan build must compile it (take it out of $LIST)"
    fail=1
  fi
  checked=$((checked + 1))
done 3< <(printf '%s\n' "${sources[@]}")
[ "$fail" = 0 ] || exit 1
if [ -n "$cannot" ]; then
  echo "single_threaded_check: the tests of all $checked sources of $LIST passed, but $cannot:"
  echo "whether they start a thread or run a program of ours is not known"
  exit 2
fi
echo "single_threaded_check: the tests of all $checked sources of $LIST passed without a thread or a program of ours"
