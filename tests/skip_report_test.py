"""skip_report.py on a made-up CTest JUnit file: each skipped test listed once with its
reason (a GoogleTest skip's message, a script's SKIP: line, a line saying "skipped"),
passed and failed ones left out; a file it cannot read is one line and exit 1."""
import subprocess
import sys
import tempfile
from pathlib import Path

script = Path(__file__).with_name("skip_report.py")
junit = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="t" tests="5" failures="1" skipped="3">
  <testcase name="Kernels.Avx512" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
    <system-out>[ RUN      ] Kernels.Avx512
/src/tests/x_test.cpp:40: Skipped
not run, this CPU lacks what they need: q4_K.cpu.avx512vnni_q8k (avx512vnni)

[  SKIPPED ] Kernels.Avx512 (1 ms)</system-out></testcase>
  <testcase name="fuzz_targets" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
    <system-out>SKIP: clang++ not found</system-out></testcase>
  <testcase name="real_model" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
    <system-out>models/m.gguf not found (scripts/get-model.sh fetches it): skipped</system-out></testcase>
  <testcase name="passes" status="run"><system-out>ok, nothing skipped here</system-out></testcase>
  <testcase name="fails" status="fail"><failure message="Failed"/><system-out>SKIP: not a skip</system-out></testcase>
</testsuite>
"""
with tempfile.TemporaryDirectory() as work:
    path = Path(work) / "junit.xml"
    path.write_text(junit)
    out = subprocess.run([sys.executable, script, path], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "3 tests skipped:",
        "  Kernels.Avx512: not run, this CPU lacks what they need: q4_K.cpu.avx512vnni_q8k (avx512vnni)",
        "  fuzz_targets: clang++ not found",
        "  real_model: models/m.gguf not found (scripts/get-model.sh fetches it): skipped",
    ], out
    bad = subprocess.run([sys.executable, script, Path(work) / "missing.xml"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "missing.xml" in bad.stderr, bad
print("skip_report: skipped tests and their reasons listed; passed and failed ones left out")
