#!/usr/bin/env python3
"""Lists the tests CTest skipped, each with the line that says why, from the JUnit file
of a run (ctest --output-junit FILE). A GoogleTest skip's reason is the message after its
"Skipped" line; a script's is its "SKIP:" line, else its last line saying "skipped".

    tests/skip_report.py build/ctest-junit.xml
"""
import sys
import xml.etree.ElementTree as ET


def reason(output):
    lines = [line.strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1]
    for line in lines:
        if line.startswith("SKIP:"):
            return line[len("SKIP:"):].strip()
    said = [line for line in lines if "skipped" in line.lower() and not line.startswith("[  SKIPPED")]
    return said[-1] if said else "(no reason printed)"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: skip_report.py CTEST-JUNIT.xml")
    try:
        cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        sys.exit(f"skip_report: {sys.argv[1]}: {e}")
    skipped = [(c.get("name"), reason(c.findtext("system-out") or "")) for c in cases
               if c.find("skipped") is not None]
    print(f"{len(skipped)} tests skipped{':' if skipped else ''}")
    for name, why in skipped:
        print(f"  {name}: {why}")


if __name__ == "__main__":
    main()
