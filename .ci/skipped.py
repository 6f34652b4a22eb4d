"""Print how many tests a pytest run skipped, and each one with its reason, from its JUnit XML.

    python .ci/skipped.py test-output/junit.xml

Under CI a test whose prerequisite is missing fails instead of skipping (tests/prereqs.py), so
what is listed here is what CI cannot run by design (a GPU, Docker), each with its reason.
Expected failures (`xfail`: the test ran and failed as its marker says) are JUnit "skipped" too;
they are counted and listed apart, since they did run.
Reads the file only; the exit status is 0 unless the file is unreadable.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def skipped(report: Path, kind: str = "pytest.skip") -> list[tuple[str, str]]:
    """(test id, reason) of every test case in the report JUnit marks skipped with this `kind`
    ("pytest.skip", or "pytest.xfail" for expected failures)."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None and (skip.get("type") or "pytest.skip") == kind:
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            out.append((test, skip.get("message") or (skip.text or "").strip() or "no reason given"))
    return out


def main(path: str) -> int:
    report = Path(path)
    if not report.is_file():
        print(f"skipped tests: unknown (no {report}: pytest did not run or did not finish)")
        return 1
    found, expected = skipped(report), skipped(report, "pytest.xfail")
    print(f"skipped tests: {len(found)}")
    for test, reason in found:
        print(f"  SKIPPED {test}: {reason}")
    print(f"expected failures (ran, failed as marked): {len(expected)}")
    for test, reason in expected:
        print(f"  XFAIL {test}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "test-output/junit.xml"))
