"""A real quickstart sweep on a tiny graph, run once and shared by the report, resume and notebook tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.datasets import PROJECT_ROOT
from tests.conftest import SMALL_SYNTHETIC

# 2 workers only (the preset runs 1 and 2): the tests read the figures and tables, not the scaling
TINY = [*SMALL_SYNTHETIC, "epochs=4", "hidden=16", "warmup_epochs=1", "workers=2"]


def sweep(results: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.sweep", "experiment=quickstart", *TINY,
                           f"results_dir={results}", f"cache_dir={results.parent / 'cache'}", *extra],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory) -> Path:
    """The records of a fresh `experiment=quickstart` sweep (every registered method)."""
    results = tmp_path_factory.mktemp("quickstart") / "results"
    out = sweep(results)
    # every registered method must train here: a failed run (exit status 1) fails every test that reads
    # these records (how the report shows a failed run is tested on hand-made records)
    assert out.returncode == 0 and out.stdout.splitlines()[-1].startswith("sweep: "), out.stdout + out.stderr
    return results
