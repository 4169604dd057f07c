"""A real quickstart sweep on a tiny graph, run once and shared by the report, resume and notebook tests."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from tests import commands
from tests.conftest import SMALL_SYNTHETIC

# 2 workers only (the preset runs 1 and 2): the tests read the figures and tables, not the scaling
TINY = [*SMALL_SYNTHETIC, "epochs=4", "hidden=16", "warmup_epochs=1", "workers=2"]


def sweep(results: Path, *extra: str) -> subprocess.CompletedProcess:
    return commands.run("benchmarks.commands.sweep", "experiment=quickstart", *TINY, f"results_dir={results}",
                        f"cache_dir={results.parent / 'cache'}", *extra, timeout=600)


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory) -> Path:
    """The records of a fresh `experiment=quickstart` sweep (every registered method), run once a test
    session: under pytest-xdist the workers share one sweep (the first to ask runs it, under a lock, in
    the folder every worker's temporary folder sits in; the others wait and read it). Read-only: a test
    that changes records works on a copy."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent
    results, done = root / "quickstart" / "results", root / "quickstart" / "swept"
    with FileLock(str(root / "quickstart.lock")):
        if not done.exists():
            results.parent.mkdir(exist_ok=True)
            out = sweep(results)
            # every registered method must train here: a failed run (exit status 1) fails every test that
            # reads these records (how the report shows a failed run is tested on hand-made records)
            *_, counts, records = out.stdout.splitlines()
            assert out.returncode == 0 and counts.startswith("sweep: ") and records.startswith("records: "), \
                out.stdout + out.stderr
            done.touch()
    return results
