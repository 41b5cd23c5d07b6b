#!/usr/bin/env python3
"""Helpers of tests/single_threaded_check.sh.

  strace_verdict.py tests TESTS_JSON SOURCE
      the googletest filter (Suite.Name:...) of every test whose file is SOURCE.cpp, from
      `unit_tests --gtest_list_tests --gtest_output=json:TESTS_JSON`; empty when there is none.
  strace_verdict.py trace TRACE BUILD_DIR
      what a `strace -f -e trace=clone,clone3,fork,vfork,execve -o TRACE unit_tests ...` run shows
      of our code beyond the test's own thread: "starts a thread", "runs PATH"; empty when
      nothing.

strace -f writes "PID call(...) = RESULT"; a call another process interrupts is split into
"PID call(... <unfinished ...>" and "PID <... call resumed> ...) = RESULT". A process is ours
(the test process, or a child forked from one of ours that has not run another program) or
another program's (tshark, sh). A clone with CLONE_THREAD in a process of ours is a thread of
ours; an execve of the rnic tool, of unit_tests or of anything in the build tree runs our code
in another process.
"""
import json
import os
import re
import sys


def tests_of(tests_json, source):
    tests = json.load(open(tests_json))
    return ":".join(suite["name"] + "." + test["name"]
                    for suite in tests["testsuites"] for test in suite["testsuite"]
                    if os.path.basename(test.get("file", "")) == source + ".cpp")


def verdict(trace, build):
    lines = [line.split(None, 1) for line in open(trace).read().splitlines()]
    lines = [parts for parts in lines if len(parts) == 2]
    build = build.rstrip("/") + "/"
    main = lines[0][0] if lines else ""
    # First pass: who made each process or thread (its parent and the line of the call), and
    # from which line each one runs another program. strace may print a child's first calls
    # before its parent's "= PID", so this cannot be decided line by line.
    parent = {}    # pid -> (parent pid, index of the parent's clone line)
    foreign = {}   # pid -> index of its successful execve of a program not ours
    unfinished = {}  # pid -> index of its unfinished clone line
    exec_path = {}   # pid -> the program of its last execve call (finished or not)
    ours_names = ("rnic", "unit_tests")
    for i, (pid, rest) in enumerate(lines):
        if re.match(r"(clone3?|fork|vfork)\(", rest):
            result = re.search(r"= (\d+)$", rest)
            if result:
                parent[result.group(1)] = (pid, i)
            else:
                unfinished[pid] = i
            continue
        resumed = re.match(r"<\.\.\. (clone3?|fork|vfork) resumed>.*= (\d+)$", rest)
        if resumed:
            parent[resumed.group(2)] = (pid, unfinished.pop(pid, i))
            continue
        execve = re.match(r'execve\("([^"]+)"', rest)
        if execve:
            exec_path[pid] = execve.group(1)
        if execve or re.match(r"<\.\.\. execve resumed>", rest):
            path = exec_path.get(pid, "")
            if (re.search(r"= 0$", rest) and pid != main and pid not in foreign and
                    not (path.startswith(build) or os.path.basename(path) in ours_names)):
                foreign[pid] = i

    def ours(pid, i, depth=0):
        """Whether pid's process runs our code at line i (a thread or a forked child runs what
        its parent ran when it was made, until it runs another program)."""
        if pid == main:
            return True
        if pid in foreign and foreign[pid] < i:
            return False
        if pid not in parent or depth > 10000:
            return True  # unknown: assume ours (a false alarm shows, a miss would not)
        up, at = parent[pid]
        return ours(up, at, depth + 1)

    found = set()
    for i, (pid, rest) in enumerate(lines):
        if re.match(r"(clone3?|fork|vfork)\(", rest) and "CLONE_THREAD" in rest and ours(pid, i):
            found.add("starts a thread")
        execve = re.match(r'execve\("([^"]+)"', rest)
        if execve and pid != main:
            path = execve.group(1)
            if path.startswith(build) or os.path.basename(path) in ("rnic", "unit_tests"):
                found.add("runs " + path)
    return ", ".join(sorted(found))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "tests":
        print(tests_of(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "trace":
        print(verdict(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: strace_verdict.py tests TESTS_JSON SOURCE | trace TRACE BUILD_DIR")
