"""A real quickstart sweep on a tiny graph, run once and shared by the report, resume and notebook tests.

The sweep is a subprocess that needs nothing from the tests before it, so it starts as soon as the
session knows it will be needed (after collection and deselection), runs while the other tests
do, and the tests that read its records run last; the fixture waits for it to end."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.datasets import PROJECT_ROOT
from tests.conftest import SMALL_SYNTHETIC

TINY = [*SMALL_SYNTHETIC, "epochs=4", "hidden=16", "warmup_epochs=1"]


def _command(results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.sweep", "experiment=quickstart", *TINY,
            f"results_dir={results}", f"cache_dir={results.parent / 'cache'}", *extra]


def sweep(results: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(results, *extra), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


class _Background:
    """The shared sweep, started early in its own process group."""

    def __init__(self, results: Path):
        self.results = results
        self.proc = subprocess.Popen(_command(results), cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out: tuple[str, str] | None = None

    def wait(self) -> tuple[int, str, str]:
        if self.out is None:
            self.out = self.proc.communicate(timeout=900)
        return self.proc.returncode, *self.out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the sweep records its run as failed and stops its ranks
            try:
                self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.communicate()


_KEY = pytest.StashKey[_Background]()


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only the tests that will run count
def pytest_collection_modifyitems(session, config, items):
    users = [item for item in items if "quickstart" in getattr(item, "fixturenames", ())]
    if not users or config.option.collectonly or _KEY in config.stash:
        return
    items[:] = [item for item in items if item not in users] + users  # read the records last
    folder = Path(tempfile.mkdtemp(prefix="quickstart-", dir=config._tmp_path_factory.getbasetemp()))
    config.stash[_KEY] = _Background(folder / "results")


def pytest_sessionfinish(session):
    background = session.config.stash.get(_KEY, None)
    if background is not None:
        background.stop()


@pytest.fixture(scope="session")
def quickstart(request, tmp_path_factory) -> Path:
    """The records of a fresh `experiment=quickstart` sweep (every registered method)."""
    background = request.config.stash.get(_KEY, None)
    if background is None:  # not started at collection (a plugin reordered or added items): run it now
        background = _Background(tmp_path_factory.mktemp("quickstart") / "results")
        request.config.stash[_KEY] = background
    returncode, stdout, stderr = background.wait()
    # a method that fails here still leaves a failed record (and exit status 1); the report shows it
    assert returncode in (0, 1) and stdout.splitlines()[-1].startswith("sweep: "), stdout + stderr
    return background.results
