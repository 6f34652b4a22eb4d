"""What some tests need from the machine, and the one rule for when it is missing.

    require(CHROMIUM.exists(), "needs Chromium at /usr/bin/chromium")   # in a test or a fixture
    pytestmark = requires(CHROMIUM.exists(), "needs Chromium ...")       # on a module or a test

Design choices:
- Off CI a test whose prerequisite is missing skips, saying why: a laptop without Chromium or
  PostgreSQL still runs the rest. Under CI (the environment variable `CI` set, as CI runs
  `bash .ci/run`) the same test FAILS with the same reason: `make test` installs every
  prerequisite named here (Chromium, axe-core, PostgreSQL, nginx, the vLLM environment, the pretrained
  model, vulture) and the shared HH-RLHF data sits next to the checkout, so a green CI proves
  these tests ran rather than skipped.
- `requires` is a mark (`requires(condition, reason=...)`), applied through `require` by the
  `pytest_runtest_setup` hook below (conftest imports it), before any fixture of the test is
  set up: a missing browser costs no service start.
- Skips for anything else (a GPU, which CI never has; Docker; a test run alone without the
  earlier tests it builds on) stay plain `pytest.skip` with their reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
AXE = REPO / ".cache" / "npm" / "node_modules" / "axe-core" / "axe.min.js"
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
# The HH-RLHF release (`harmless-base/test.jsonl.gz`, ...), shared by every checkout next to it.
SHARED_HH = REPO.parent / "shared" / "data" / "hh-rlhf"


def in_ci() -> bool:
    """True when `CI` is set to anything but an explicit no ("", "0", "false", "no")."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(condition: object, reason: str) -> None:
    """Return if `condition` holds; else skip the calling test with `reason`, or fail it under CI."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing prerequisite fails the test instead of skipping it)",
                    pytrace=False)
    pytest.skip(reason)


def requires(condition: object, reason: str) -> pytest.MarkDecorator:
    """`require` as a mark, for a module's `pytestmark` or a test's decorator."""
    return pytest.mark.requires(bool(condition), reason=reason)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Apply the test's `requires` marks: skip it, or fail it under CI."""
    for mark in item.iter_markers("requires"):
        require(mark.args[0], mark.kwargs["reason"])
