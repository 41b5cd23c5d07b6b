#!/usr/bin/env bash
# tests/single_threaded_check.sh UNIT_TESTS [LIST]: every test of every source LIST names
# (default tests/single_threaded_sources.txt) runs under strace, source by source, and must start
# no thread in the test process and run no program of ours (the rnic tool, unit_tests again):
# the TSan build leaves these sources out, which is only right while no second thread of ours
# ever runs in them. Exit 0 when the list holds, 1 with one line per source that breaks it (or
# whose tests fail or cannot be found), 2 when it cannot check (no strace, no unit_tests).
set -euo pipefail
UNIT_TESTS=${1:?usage: single_threaded_check.sh UNIT_TESTS [LIST]}
LIST=${2:-$(cd "$(dirname "$0")" && pwd)/single_threaded_sources.txt}
command -v strace >/dev/null || { echo "single_threaded_check: strace is not installed" >&2; exit 2; }
[ -x "$UNIT_TESTS" ] || { echo "single_threaded_check: no unit_tests at $UNIT_TESTS" >&2; exit 2; }
[ -r "$LIST" ] || { echo "single_threaded_check: cannot read $LIST" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Which tests each source holds: googletest lists every test with its file.
"$UNIT_TESTS" --gtest_list_tests --gtest_output="json:$WORK/tests.json" >/dev/null
fail=0
while read -r source; do
  filter=$(python3 - "$WORK/tests.json" "$source" <<'EOF'
import json, os, sys
tests = json.load(open(sys.argv[1]))
names = [s["name"] + "." + t["name"] for s in tests["testsuites"] for t in s["testsuite"]
         if os.path.basename(t.get("file", "")) == sys.argv[2] + ".cpp"]
print(":".join(names))
EOF
  )
  if [ -z "$filter" ]; then
    echo "$source: no test of unit_tests comes from $source.cpp (a stale entry in $LIST?)"
    fail=1
    continue
  fi
  rc=0
  timeout 600 strace -f -qq --seccomp-bpf -e trace=clone,clone3,fork,vfork,execve -o "$WORK/$source.trace" \
    "$UNIT_TESTS" --gtest_filter="$filter" --gtest_brief=1 > "$WORK/$source.out" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    echo "$source: its tests exited $rc under strace; their last lines:"
    tail -n 5 "$WORK/$source.out"
    fail=1
    continue
  fi
  # strace -f writes "PID call(...) = RESULT" lines. A clone with CLONE_THREAD made by the test
  # process (or by one of its threads) is a thread of it; a child's execve of rnic or unit_tests
  # runs our code in another process, which the TSan build would check.
  verdict=$(python3 - "$WORK/$source.trace" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
main = lines[0].split()[0] if lines else ""
ours = {main}
found = []
for line in lines:
    pid = line.split()[0]
    m = re.search(r"\b(clone3?|fork|vfork)\(.*= (\d+)$", line)
    if m and pid in ours and "CLONE_THREAD" in line:
        ours.add(m.group(2))
        found.append("starts a thread")
    m = re.search(r'execve\("([^"]+)"', line)
    if m and pid not in ours and re.search(r"/(rnic|unit_tests)$", m.group(1)):
        found.append("runs " + m.group(1))
print(", ".join(sorted(set(found))))
EOF
  )
  if [ -n "$verdict" ]; then
    echo "$source: $verdict, so the TSan build must compile it (take it out of $LIST)"
    fail=1
  fi
done < <(grep -vE '^\s*(#|$)' "$LIST")
[ "$fail" = 0 ] && echo "single_threaded_check: every source of $LIST ran without a thread or a program of ours"
exit "$fail"
