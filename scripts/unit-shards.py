#!/usr/bin/env python3
"""Runs a GoogleTest binary as N shards side by side and reports like ctest.

    unit-shards.py BINARY N

ctest ran each of the 559 unit tests in a process of its own: under ASan
that is a sanitizer start-up (shadow memory mapped, the runtime set up) per
test, 2.5 minutes of CPU for 10 s of tests (issue 26). Here the tests run
in N processes (GoogleTest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), each
taking every Nth test in the binary's order, so isolation is per shard, not
per test.

What is printed: each failed test's own output (from its "[ RUN ]" line to
its "[  FAILED  ]" line), a shard that died before its summary (a crash,
an ASan report) with its last lines, and a sanitizer's report anywhere in a
log, even in a test that passed (UBSan's "runtime error:" does not fail a
test by itself; ctest let those pass unseen). Then one line: how many
passed, of how many the binary lists. Exit 0 only when every listed test
ran and passed and no sanitizer spoke. Each shard's whole log is kept in
unit-shard-I.log beside the binary.
"""
import os
import pathlib
import re
import subprocess
import sys
import time

SANITIZER = re.compile(r"runtime error:|ERROR: (Address|Leak|Thread)Sanitizer")


def listed(binary):
    out = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True,
                         check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("  "))


def failed_blocks(text):
    """Each failed test's output, from its RUN line to its FAILED line."""
    blocks = []
    for m in re.finditer(r"^\[  FAILED  \] (\S+) \(\d+ ms\)$", text, re.M):
        start = text.rfind(f"[ RUN      ] {m.group(1)}\n", 0, m.start())
        blocks.append(text[start if start >= 0 else m.start():m.end()])
    return blocks


def main():
    binary, n = pathlib.Path(sys.argv[1]).resolve(), int(sys.argv[2])
    total = listed(binary)
    t0 = time.monotonic()
    shards = []
    for i in range(n):
        log = binary.parent / f"unit-shard-{i}.log"
        env = dict(os.environ, GTEST_TOTAL_SHARDS=str(n), GTEST_SHARD_INDEX=str(i))
        with open(log, "w") as f:
            shards.append((i, log, subprocess.Popen([binary], stdout=f, stderr=subprocess.STDOUT,
                                                    env=env, cwd=binary.parent)))
    ran = passed = skipped = 0
    ok = True
    for i, log, proc in shards:
        code = proc.wait()
        text = log.read_text(errors="replace")
        for block in failed_blocks(text):
            print(block, "\n")
            ok = False
        m = re.search(r"^\[==========\] (\d+) tests? from .* ran\.", text, re.M)
        if m is None:
            print(f"unit shard {i} of {n} ended (exit {code}) before its summary; its last "
                  f"lines ({log}):\n" + "\n".join(text.splitlines()[-60:]))
            ok = False
            continue
        ran += int(m.group(1))
        p = re.search(r"^\[  PASSED  \] (\d+) tests?\.", text, re.M)
        passed += int(p.group(1)) if p else 0
        k = re.search(r"^\[  SKIPPED \] (\d+) tests?, listed below:", text, re.M)
        skipped += int(k.group(1)) if k else 0
        for name in re.findall(r"^\[  SKIPPED \] (\S+\.\S+)$", text, re.M):
            print(f"unit test skipped: {name}")
        reports = [line for line in text.splitlines() if SANITIZER.search(line)]
        if reports:
            print(f"unit shard {i} of {n}: a sanitizer reported ({log}):\n" + "\n".join(reports[:20]))
            ok = False
        if code != 0 and ok:
            print(f"unit shard {i} of {n} exited {code} ({log})")
            ok = False
    if ran != total:
        print(f"the shards ran {ran} tests; the binary lists {total}")
        ok = False
    print(f"unit tests: {passed} of {total} passed, {skipped} skipped, in {n} shards, "
          f"{time.monotonic() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
