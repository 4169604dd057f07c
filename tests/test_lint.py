"""The code is clean under the lint pyproject.toml configures (ruff: pycodestyle and pyflakes, lines of
at most 120 columns): a long line, an undefined or unused name fails the test run, not a review."""
import subprocess
import sys

import pytest

from benchmarks import PROJECT_ROOT

pytestmark = pytest.mark.fast

ROOT = PROJECT_ROOT


def test_the_code_is_clean_under_the_configured_lint():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "benchmarks", "methods", "analysis",
                          "tests"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
