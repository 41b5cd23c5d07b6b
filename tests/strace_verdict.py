#!/usr/bin/env python3
"""Helpers of tests/single_threaded_check.sh.

  strace_verdict.py tests TESTS_JSON SOURCE
      the googletest filter (Suite.Name:...) of every test whose file is SOURCE.cpp, from
      `unit_tests --gtest_list_tests --gtest_output=json:TESTS_JSON`; empty when there is none.
  strace_verdict.py partition ALL_JSON SELECTED_JSON SOURCE...
      whether the filter tests/CMakeLists.txt derived from the listed sources selects exactly
      their tests: ALL_JSON lists every test of unit_tests, SELECTED_JSON those the filter
      selects. One line per test selected from another source (no ctest of the plain build
      would run it) and per test of a listed source left out (it would run twice); empty when
      the filter is exact.
  strace_verdict.py skipped RESULTS_JSON
      the tests that skipped themselves (GTEST_SKIP) in googletest's --gtest_output=json
      results, comma-separated; empty when none did.
  strace_verdict.py trace TRACE BUILD_DIR
      what a `strace -f -q -e trace=clone,clone3,fork,vfork,execve,execveat -e signal=none
      -o TRACE unit_tests ...` run shows of our code beyond the test's own thread: "starts a
      thread", "runs PATH"; empty when nothing.

strace -f writes "PID call(...) = RESULT"; a call another process interrupts is split into
"PID call(... <unfinished ...>" and "PID <... call resumed> ...) = RESULT". A process is ours
(the test process, or a child forked from one of ours that has not run another program) or
another program's (tshark, sh). A clone with CLONE_THREAD in a process of ours is a thread of
ours; a successful execve of the rnic tool, of unit_tests or of anything in the build tree runs
our code in another process. "+++ exited" lines (kept by -q, unlike -qq) end a pid's life.
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


OURS = ("rnic", "unit_tests")


def files_of(tests_json):
    tests = json.load(open(tests_json))
    return {suite["name"] + "." + test["name"]: os.path.basename(test.get("file", ""))
            for suite in tests["testsuites"] for test in suite["testsuite"]}


def partition(all_json, selected_json, sources):
    every, chosen = files_of(all_json), files_of(selected_json)
    listed = {source + ".cpp" for source in sources}
    lines = [f"{name} ({chosen[name]}) is selected, but {chosen[name]} is not listed"
             for name in sorted(chosen) if chosen[name] not in listed]
    lines += [f"{name} ({every[name]}) is not selected, though {every[name]} is listed"
              for name in sorted(every) if every[name] in listed and name not in chosen]
    return "\n".join(lines)


def skipped(results_json):
    results = json.load(open(results_json))
    return ", ".join(suite["name"] + "." + test["name"]
                     for suite in results.get("testsuites", []) for test in suite["testsuite"]
                     if test.get("result") == "SKIPPED")


def runs_ours(path, build):
    """Whether an execve of path runs a program of ours: the rnic tool, unit_tests, anything in
    the build tree, or a relative path (our programs are run by their build paths; other
    programs are found on PATH, which gives absolute ones). /proc/self/exe is judged by who
    runs it."""
    return (path.startswith(build) or os.path.basename(path) in OURS
            or not path.startswith("/"))


def verdict(trace, build):
    build = build.rstrip("/") + "/"
    # One pass gives every line its process incarnation: a pid counts anew after its "+++ exited"
    # or "+++ killed" line (pids are reused; pid_max is 32768 here). strace may print a child's
    # first calls before its parent's "= PID", so whether a line runs our code is decided after.
    current = {}   # pid -> its live incarnation
    parent = {}    # incarnation -> (parent incarnation, index of the parent's clone line)
    foreign = {}   # incarnation -> index of its successful execve of a program not ours
    unfinished = {}  # pid -> index of its unfinished clone line
    exec_path = {}   # pid -> the program of its last execve call (finished or not)
    events = []    # (line index, incarnation, "thread" | "runs PATH")
    count = 0

    def incarnation(pid):
        nonlocal count
        if pid not in current:
            count += 1
            current[pid] = count
        return current[pid]

    main = None
    for i, line in enumerate(open(trace).read().splitlines()):
        parts = line.split(None, 1)
        if len(parts) < 2:
            continue
        pid, rest = parts
        me = incarnation(pid)
        if main is None:
            main = me
        if rest.startswith("+++ exited") or rest.startswith("+++ killed"):
            del current[pid]
            continue
        if re.match(r"(clone3?|fork|vfork)\(", rest):
            if "CLONE_THREAD" in rest:
                events.append((i, me, "starts a thread"))
            result = re.search(r"= (\d+)$", rest)
            if result:
                parent[incarnation(result.group(1))] = (me, i)
            else:
                unfinished[pid] = i
            continue
        resumed = re.match(r"<\.\.\. (clone3?|fork|vfork) resumed>.*= (\d+)$", rest)
        if resumed:
            parent[incarnation(resumed.group(2))] = (me, unfinished.pop(pid, i))
            continue
        execve = re.match(r'execve(at)?\((?:[^,]+, )?"([^"]+)"', rest)
        if execve:
            exec_path[pid] = execve.group(2)
        if (execve or re.match(r"<\.\.\. execve(at)? resumed>", rest)) and re.search(r"= 0$", rest):
            path = exec_path.get(pid, "")
            if me != main:
                if runs_ours(path, build):
                    events.append((i, me, "runs " + path))
                elif path == "/proc/self/exe":
                    events.append((i, me, "again " + path))  # ours if its process is
                elif me not in foreign:
                    foreign[me] = i

    def ours(inc, i):
        """Whether incarnation inc runs our code at line i: the test process does; a thread or a
        forked child runs what its parent ran when it was made, until it runs another program."""
        seen = set()
        while inc != main:
            if inc in foreign and foreign[inc] < i:
                return False
            if inc not in parent or inc in seen:
                return True  # unknown: assume ours (a false alarm shows, a miss would not)
            seen.add(inc)
            inc, i = parent[inc]
        return True

    return ", ".join(sorted({what.replace("again ", "runs ") for i, inc, what in events
                             if what.startswith("runs ") or ours(inc, i)}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "tests":
        print(tests_of(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "partition":
        print(partition(sys.argv[2], sys.argv[3], sys.argv[4:]))
    elif len(sys.argv) == 3 and sys.argv[1] == "skipped":
        print(skipped(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "trace":
        print(verdict(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: strace_verdict.py tests TESTS_JSON SOURCE | "
                 "partition ALL_JSON SELECTED_JSON SOURCE... | skipped RESULTS_JSON | "
                 "trace TRACE BUILD_DIR")
