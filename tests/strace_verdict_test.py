#!/usr/bin/env python3
"""Checks tests/strace_verdict.py on strace -f -q output in strace 6.1's forms (as in traces of
unit_tests, with pids and addresses shortened): split calls, a child's calls printed before its
parent's result, other programs' threads, failed execs, a pid used twice; and its judgement of
the single-threaded sources' filter (a test of another source selected, one of theirs left out)
and its reading of skipped tests in googletest's results.
Run by ctest (TsanScope.StraceVerdict)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strace_verdict  # noqa: E402

BUILD = "/src/build"
START = '100 execve("build/tests/unit_tests", ["build/tests/unit_tests"], 0x7ffd /* 41 vars */) = 0\n'
THREAD = ("clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|"
          "CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID, child_tid=0x7f8, parent_tid=0x7f8,"
          " exit_signal=0, stack=0x7f7, stack_size=0x7fff80, tls=0x7f8}")
SPAWN = "clone3({flags=CLONE_VM|CLONE_VFORK, exit_signal=SIGCHLD, stack=0x7f90, stack_size=0x9000}"
FORK = "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f"
# popen("tshark ..."): sh and tshark are other programs, and tshark's threads are not ours, even
# when their lines come before the test process's "= PID" of the spawn.
TSHARK = (f"100 {SPAWN} <unfinished ...>\n"
          '101 execve("/bin/sh", ["sh", "-c", "tshark -r x"], 0x7ffd /* 41 vars */ <unfinished ...>\n'
          "100 <... clone3 resumed>, 88) = 101\n"
          "101 <... execve resumed>) = 0\n"
          f"101 {FORK}) = 102\n"
          '102 execve("/usr/bin/tshark", ["tshark", "-r", "x"], 0x5636 /* 41 vars */ <unfinished ...>\n'
          "102 <... execve resumed>) = 0\n"
          f"102 {THREAD} <unfinished ...>\n"
          f"103 {THREAD}, 88) = 104\n"
          "102 <... clone3 resumed> => {parent_tid=[103]}, 88) = 103\n"
          "104 +++ exited with 0 +++\n"
          "103 +++ exited with 0 +++\n"
          "102 +++ exited with 0 +++\n"
          "101 +++ exited with 0 +++\n")

CASES = {
    "nothing but the test": (START + "100 +++ exited with 0 +++\n", ""),
    "a thread of the test process": (START + f"100 {THREAD}, 88) = 101\n", "starts a thread"),
    "a thread of the test process, its clone split by tshark's lines": (
        START + TSHARK.replace("101 +++ exited with 0 +++\n", "")
        + f"100 {THREAD} <unfinished ...>\n"
        f"102 {THREAD}, 88) = 105\n"
        "100 <... clone3 resumed> => {parent_tid=[106]}, 88) = 106\n",
        "starts a thread"),
    "tshark through sh, its lines before the spawn's result": (START + TSHARK, ""),
    "the rnic tool through sh": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("/bin/sh", ["sh", "-c", "/src/build/rnic decode x"], 0x7ffd /* 41 vars */) = 0\n'
        f"101 {FORK}) = 102\n"
        '102 execve("/src/build/rnic", ["/src/build/rnic", "decode", "x"], 0x56 /* 41 vars */) = 0\n',
        "runs /src/build/rnic"),
    "unit_tests again, by a relative path": (
        START + f"100 {FORK}) = 101\n"
        '101 execve("tests/unit_tests", ["tests/unit_tests", "--child"], 0x7ffd /* 41 vars */) = 0\n',
        "runs tests/unit_tests"),
    "a program of the build tree": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("/src/build/tests/dropin_exit_probe", ["dropin_exit_probe"], 0x7 /* 1 var */) = 0\n',
        "runs /src/build/tests/dropin_exit_probe"),
    "a program of ours by a relative path": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("./dropin_exit_probe", ["./dropin_exit_probe"], 0x7 /* 1 var */) = 0\n',
        "runs ./dropin_exit_probe"),
    "/proc/self/exe from a child of ours runs our code again": (
        START + f"100 {FORK}) = 101\n"
        '101 execve("/proc/self/exe", ["unit_tests", "--child"], 0x7 /* 1 var */) = 0\n',
        "runs /proc/self/exe"),
    "/proc/self/exe from another program (a browser starting its helpers) does not": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("/usr/lib/chromium/chromium", ["chromium"], 0x7 /* 1 var */) = 0\n'
        f"101 {FORK}) = 102\n"
        '102 execve("/proc/self/exe", ["chromium", "--type=zygote"], 0x7 /* 1 var */) = 0\n',
        ""),
    "a forked child of ours that starts a thread, printed before the fork's result": (
        START + f"100 {FORK} <unfinished ...>\n"
        f"101 {THREAD}, 88) = 102\n"
        "100 <... clone resumed>) = 101\n",
        "starts a thread"),
    "a forked child that starts a thread and then runs sh": (
        START + f"100 {FORK}) = 101\n"
        f"101 {THREAD}, 88) = 102\n"
        '101 execve("/bin/sh", ["sh", "-c", "true"], 0x7ffd /* 41 vars */) = 0\n',
        "starts a thread"),
    "a child whose execve fails keeps our code, and its thread is ours": (
        START + f"100 {FORK}) = 101\n"
        '101 execve("/usr/local/bin/tshark", ["tshark"], 0x7ffd /* 41 vars */) = -1 ENOENT (No such file or directory)\n'
        f"101 {THREAD}, 88) = 102\n",
        "starts a thread"),
    "a failed execve in the build tree (sh searching PATH) runs nothing": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("/bin/sh", ["sh", "-c", "tshark"], 0x7ffd /* 41 vars */) = 0\n'
        f"101 {FORK}) = 102\n"
        '102 execve("/src/build/tshark", ["tshark"], 0x5636 /* 41 vars */) = -1 ENOENT (No such file or directory)\n'
        '102 execve("/usr/bin/tshark", ["tshark"], 0x5636 /* 41 vars */) = 0\n'
        f"102 {THREAD}, 88) = 103\n",
        ""),
    "a pid used again: sh's, then a fork of ours that starts a thread": (
        START + f"100 {SPAWN}, 88) = 101\n"
        '101 execve("/bin/sh", ["sh", "-c", "true"], 0x7ffd /* 41 vars */) = 0\n'
        "101 +++ exited with 0 +++\n"
        f"100 {FORK}) = 101\n"
        f"101 {THREAD}, 88) = 102\n",
        "starts a thread"),
}


def listing(*tests):
    """googletest's JSON list: (suite, name, file) each."""
    suites = {}
    for suite, name, file in tests:
        suites.setdefault(suite, []).append({"name": name, "file": "/src/tests/" + file})
    return json.dumps({"testsuites": [{"name": s, "testsuite": t} for s, t in suites.items()]})


EVERY = listing(("Crc", "A", "test_crc32c.cpp"), ("Crc", "B", "test_crc32c.cpp"),
                ("P/Ddp", "C/0", "test_ddp.cpp"), ("Rnic", "D", "test_rnic_cm.cpp"))
PARTITIONS = {
    "the filter selects exactly the listed sources' tests": (
        listing(("Crc", "A", "test_crc32c.cpp"), ("Crc", "B", "test_crc32c.cpp"),
                ("P/Ddp", "C/0", "test_ddp.cpp")), ["test_crc32c", "test_ddp"], ""),
    "a test of an unlisted source is selected (a suite shared across sources)": (
        listing(("Crc", "A", "test_crc32c.cpp"), ("Crc", "B", "test_crc32c.cpp"),
                ("Rnic", "D", "test_rnic_cm.cpp")), ["test_crc32c"],
        "Rnic.D (test_rnic_cm.cpp) is selected, but test_rnic_cm.cpp is not listed"),
    "a test of a listed source is left out (a declaration the filter missed)": (
        listing(("Crc", "A", "test_crc32c.cpp"), ("Crc", "B", "test_crc32c.cpp")),
        ["test_crc32c", "test_ddp"],
        "P/Ddp.C/0 (test_ddp.cpp) is not selected, though test_ddp.cpp is listed"),
}

# googletest's --gtest_output=json results: a skipped test and a passed one.
RESULTS = json.dumps({"testsuites": [{"name": "Crc", "testsuite": [
    {"name": "A", "status": "RUN", "result": "SKIPPED"},
    {"name": "B", "status": "RUN", "result": "COMPLETED"}]}]})

failed = 0
with tempfile.TemporaryDirectory() as tmp:
    results = os.path.join(tmp, "results.json")
    with open(results, "w") as f:
        f.write(RESULTS)
    if strace_verdict.skipped(results) != "Crc.A":
        print(f"FAIL: skipped tests: got {strace_verdict.skipped(results)!r}, expected 'Crc.A'")
        failed += 1
    every = os.path.join(tmp, "every.json")
    with open(every, "w") as f:
        f.write(EVERY)
    for name, (selected, sources, expected) in PARTITIONS.items():
        chosen = os.path.join(tmp, "selected.json")
        with open(chosen, "w") as f:
            f.write(selected)
        got = strace_verdict.partition(every, chosen, sources)
        if got != expected:
            print(f"FAIL: {name}: got {got!r}, expected {expected!r}")
            failed += 1
    for name, (trace, expected) in CASES.items():
        path = os.path.join(tmp, "trace")
        with open(path, "w") as f:
            f.write(trace)
        got = strace_verdict.verdict(path, BUILD)
        if got != expected:
            print(f"FAIL: {name}: got {got!r}, expected {expected!r}")
            failed += 1
total = len(CASES) + len(PARTITIONS) + 1
print(f"{total - failed} of {total} traces and filters judged right")
sys.exit(1 if failed else 0)
