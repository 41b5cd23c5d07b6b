#!/usr/bin/env python3
"""Checks tests/strace_verdict.py on strace -f output as strace 6.1 writes it (lines copied from
real traces of unit_tests, pids and addresses shortened): split calls, a child's calls printed
before its parent's result, other programs' threads. Run by ctest (TsanScope.StraceVerdict)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strace_verdict  # noqa: E402

BUILD = "/src/build"
START = '100 execve("build/tests/unit_tests", ["build/tests/unit_tests"], 0x7ffd /* 41 vars */) = 0\n'
THREAD_FLAGS = ("CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|"
                "CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID")
SPAWN = "100 clone3({flags=CLONE_VM|CLONE_VFORK, exit_signal=SIGCHLD, stack=0x7f90}, 88"

CASES = {
    "nothing but the test": (START, ""),
    "a thread of the test process": (
        START + f"100 clone3({{flags={THREAD_FLAGS}, child_tid=0x7f}}, 88) = 101\n",
        "starts a thread"),
    "a thread, its clone split by another process's line": (
        START + f"100 clone3({{flags={THREAD_FLAGS}, child_tid=0x7f}} <unfinished ...>\n"
        "101 execve(\"/bin/sh\", [\"sh\"], 0x7f /* 41 vars */) = 0\n"
        "100 <... clone3 resumed> => {parent_tid=[102]}, 88) = 102\n",
        "starts a thread"),
    # popen("tshark ..."): sh and tshark are other programs; tshark's threads are not ours, even
    # when tshark's lines come before the test process's "= PID" of the spawn.
    "tshark through sh, its lines before the spawn's result": (
        START + SPAWN + " <unfinished ...>\n"
        '101 execve("/bin/sh", ["sh", "-c", "tshark -r x"], 0x7ffd /* 41 vars */ <unfinished ...>\n'
        "100 <... clone3 resumed>) = 101\n"
        "101 <... execve resumed>) = 0\n"
        "101 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD) = 102\n"
        '102 execve("/usr/bin/tshark", ["tshark", "-r", "x"], 0x5636 /* 41 vars */ <unfinished ...>\n'
        "102 <... execve resumed>) = 0\n"
        f"102 clone3({{flags={THREAD_FLAGS}, child_tid=0x7f}} <unfinished ...>\n"
        f"103 clone3({{flags={THREAD_FLAGS}, child_tid=0x7f}}, 88) = 104\n"
        "102 <... clone3 resumed> => {parent_tid=[103]}, 88) = 103\n",
        ""),
    "the rnic tool through sh": (
        START + SPAWN + ") = 101\n"
        '101 execve("/bin/sh", ["sh", "-c", "/src/build/rnic decode x"], 0x7ffd /* 41 vars */) = 0\n'
        "101 clone(child_stack=NULL, flags=SIGCHLD) = 102\n"
        '102 execve("/src/build/rnic", ["/src/build/rnic", "decode", "x"], 0x56 /* 41 vars */) = 0\n',
        "runs /src/build/rnic"),
    "unit_tests again, by a relative path": (
        START + "100 fork() = 101\n"
        '101 execve("tests/unit_tests", ["tests/unit_tests", "--child"], 0x7ffd /* 41 vars */) = 0\n',
        "runs tests/unit_tests"),
    "a forked child of ours that starts a thread, printed before the fork's result": (
        START + "100 fork( <unfinished ...>\n"
        f"101 clone3({{flags={THREAD_FLAGS}, child_tid=0x7f}}, 88) = 102\n"
        "100 <... fork resumed>) = 101\n",
        "starts a thread"),
    "a program of the build tree": (
        START + SPAWN + ") = 101\n"
        '101 execve("/src/build/tests/dropin_exit_probe", ["dropin_exit_probe"], 0x7 /* 1 var */) = 0\n',
        "runs /src/build/tests/dropin_exit_probe"),
}

failed = 0
with tempfile.TemporaryDirectory() as tmp:
    for name, (trace, expected) in CASES.items():
        path = os.path.join(tmp, "trace")
        with open(path, "w") as f:
            f.write(trace)
        got = strace_verdict.verdict(path, BUILD)
        if got != expected:
            print(f"FAIL: {name}: got {got!r}, expected {expected!r}")
            failed += 1
print(f"{len(CASES) - failed} of {len(CASES)} traces judged right")
sys.exit(1 if failed else 0)
