#!/usr/bin/env bash
# tests/single_threaded_check.sh UNIT_TESTS [LIST]: every test of every source LIST names
# (default tests/single_threaded_sources.txt) runs under strace, source by source, and must start
# no thread in the test process and run no program of ours (the rnic tool, unit_tests again,
# anything in the build tree): the TSan build leaves these sources out, which is only right
# while no second thread of ours ever runs in them. Exit 0 when the list holds, 1 with one line
# per source that breaks it (or whose tests fail or cannot be found), 2 when it cannot check (no
# strace, ptrace denied, no unit_tests).
set -euo pipefail
UNIT_TESTS=${1:?usage: single_threaded_check.sh UNIT_TESTS [LIST]}
LIST=${2:-$(cd "$(dirname "$0")" && pwd)/single_threaded_sources.txt}
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in strace python3; do
  command -v "$tool" >/dev/null || { echo "single_threaded_check: $tool is not installed" >&2; exit 2; }
done
[ -x "$UNIT_TESTS" ] || { echo "single_threaded_check: no unit_tests at $UNIT_TESTS" >&2; exit 2; }
[ -r "$LIST" ] || { echo "single_threaded_check: cannot read $LIST" >&2; exit 2; }
UNIT_TESTS=$(cd "$(dirname "$UNIT_TESTS")" && pwd)/$(basename "$UNIT_TESTS")
BUILD=$(cd "$(dirname "$UNIT_TESTS")/.." && pwd)
# ptrace may be denied (a container without CAP_SYS_PTRACE, yama): say so once.
strace -f -qq -o /dev/null true </dev/null 2>/dev/null ||
  { echo "single_threaded_check: strace cannot trace here (ptrace denied?)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Which tests each source holds: googletest lists every test with its file.
"$UNIT_TESTS" --gtest_list_tests --gtest_output="json:$WORK/tests.json" >/dev/null </dev/null ||
  { echo "single_threaded_check: $UNIT_TESTS --gtest_list_tests failed" >&2; exit 2; }
fail=0
listed=0
checked=0
# The list is read on descriptor 3: the tests, and the programs they start, get /dev/null as
# their stdin and cannot eat the rest of it.
while read -r source <&3; do
  listed=$((listed + 1))
  filter=$(python3 "$HERE/strace_verdict.py" tests "$WORK/tests.json" "$source") ||
    { echo "single_threaded_check: cannot read googletest's list of tests" >&2; exit 2; }
  if [ -z "$filter" ]; then
    echo "$source: no test of unit_tests comes from $source.cpp (a stale entry in $LIST?)"
    fail=1
    continue
  fi
  rc=0
  # In the test program's folder, as ctest runs it: what a test writes to its current folder
  # stays in the build tree.
  cd "$(dirname "$UNIT_TESTS")"
  # -q, not -qq: the "+++ exited" lines tell a pid used again from the one before it.
  timeout -k 10 600 strace -f -q --seccomp-bpf -e trace=clone,clone3,fork,vfork,execve,execveat \
    -e signal=none \
    -o "$WORK/$source.trace" "$UNIT_TESTS" --gtest_filter="$filter" --gtest_brief=1 \
    > "$WORK/$source.out" 2>&1 </dev/null || rc=$?
  if [ "$rc" != 0 ]; then
    echo "$source: its tests exited $rc under strace; their last lines:"
    tail -n 20 "$WORK/$source.out"
    fail=1
    continue
  fi
  verdict=$(python3 "$HERE/strace_verdict.py" trace "$WORK/$source.trace" "$BUILD") ||
    { echo "single_threaded_check: cannot read the trace of $source" >&2; exit 2; }
  if [ -n "$verdict" ]; then
    echo "$source: $verdict, so the TSan build must compile it (take it out of $LIST)"
    fail=1
  fi
  checked=$((checked + 1))
done 3< <(grep -vE '^\s*(#|$)' "$LIST")
if [ "$listed" = 0 ]; then
  echo "single_threaded_check: $LIST names no source"
  fail=1
fi
[ "$fail" = 0 ] &&
  echo "single_threaded_check: all $checked sources of $LIST ran without a thread or a program of ours"
exit "$fail"
