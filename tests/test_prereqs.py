"""The prerequisite rule (tests/prereqs.py) in a real pytest run: off CI a missing prerequisite
skips with its reason, under CI the same tests fail with it; met prerequisites pass either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SAMPLE = '''
from prereqs import require, requires

@requires(False, "no widget on this machine")
def test_marked():
    pass

def test_called():
    require(False, "no gadget on this machine")

@requires(True, "unused")
def test_met():
    require(1, "unused")
'''


def run_sample(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "conftest.py").write_text("from prereqs import pytest_runtest_setup  # noqa: F401\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(TESTS)}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider", "-W",
         "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return done.stdout + done.stderr


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_off_ci_a_missing_prerequisite_skips_with_its_reason(tmp_path, ci):
    out = run_sample(tmp_path, ci)
    assert "1 passed, 2 skipped" in out, out
    assert "no widget on this machine" in out and "no gadget on this machine" in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_prerequisite_fails_with_its_reason(tmp_path, ci):
    out = run_sample(tmp_path, ci)
    assert "skipped" not in out, out
    # The mark fails the test's setup (an error); the call fails the test itself.
    assert "1 failed, 1 passed, 1 error" in out, out
    for reason in ("no widget on this machine", "no gadget on this machine"):
        assert f"{reason} (CI is set" in out, out


def test_ci_run_lists_the_skipped_tests_and_keeps_make_tests_status(tmp_path):
    """`.ci/run` with a stand-in `make` that runs the sample (off CI: 2 skips, and an expected
    failure listed apart) and exits 3."""
    repo = TESTS.parent
    sample = tmp_path / "sample"
    sample.mkdir()
    (sample / "conftest.py").write_text("from prereqs import pytest_runtest_setup  # noqa: F401\n")
    (sample / "test_sample.py").write_text(SAMPLE)
    (sample / "test_known.py").write_text(
        "import pytest\n\n@pytest.mark.xfail(reason='a known miss', strict=True)\ndef test_known():\n    assert False\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(
        f"#!/bin/sh\n[ \"$1\" = test ] || exit 99\n"
        f"PYTHONPATH={TESTS} {sys.executable} -m pytest -q -p no:cacheprovider {sample}\nexit 3\n")
    (bin_dir / "make").chmod(0o755)
    ci = tmp_path / "checkout"  # a copy of .ci/ alone: the run writes test-output/ beside it
    (ci / ".ci").mkdir(parents=True)
    for name in ("run", "skipped.py"):
        (ci / ".ci" / name).write_text((repo / ".ci" / name).read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(["bash", str(ci / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    tail = done.stdout[done.stdout.rindex("skipped tests:"):]
    assert tail.startswith("skipped tests: 2\n"), tail
    assert "test_sample::test_marked: no widget on this machine" in tail
    assert "test_sample::test_called: no gadget on this machine" in tail
    assert "expected failures (ran, failed as marked): 1\n" in tail and "test_known::test_known: a known miss" in tail
