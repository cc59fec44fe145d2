#!/usr/bin/env python3
"""Prints the integration test files that took longest in a pass, from the
JUnit XML that pytest wrote (--junitxml): each file's tests' time summed
(setup, call and teardown), their CPU (the property `cpu` that conftest.py
records: the test process's and its reaped children's), its test count and
its share of the pass. The
pass runs files on parallel workers, so the sum is the work a file costs,
not wall time; the list shows where time goes when `make test` grows slow
(issue 26). Usage: slowest-files.py JUNIT.xml [N]"""
import collections
import sys
import xml.etree.ElementTree as ET


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    seconds, cpu, tests = collections.Counter(), collections.Counter(), collections.Counter()
    try:
        cases = list(ET.parse(path).iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print(f"   no per-file times: {e}")
        return
    for case in cases:
        # classname: tests.integration.test_x[.TestClass]
        parts = case.get("classname", "").split(".")
        name = next((p for p in parts if p.startswith("test_")), "?")
        seconds[name] += float(case.get("time") or 0)
        for prop in case.iter("property"):
            if prop.get("name") == "cpu":
                cpu[name] += float(prop.get("value") or 0)
        tests[name] += 1
    total = sum(seconds.values()) or 1.0
    print(f"   work per file (sum of its tests' times, {total:.0f} s in all; "
          f"their CPU, {sum(cpu.values()):.0f} s in all):")
    for name, s in seconds.most_common(n):
        print(f"   {s:7.1f} s {100 * s / total:4.0f}%  cpu {cpu[name]:6.1f} s  "
              f"{tests[name]:4d} tests  {name}.py")


if __name__ == "__main__":
    main()
