"""Shared fixtures: the real Hydra config shrunk for tests, and the real datasets shipped in data/."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from benchmarks.core import native
from benchmarks.commands.composition import config_of
from benchmarks.core.datasets import DATA

# Under pytest-xdist (`-n 2`), each worker keeps to a core of its own, and so does everything it starts
# (affinity is inherited): a run then sizes its thread pools to that core (probes.cores), and two
# workers' thread pools never spin against each other on the same core.
if "PYTEST_XDIST_WORKER" in os.environ and hasattr(os, "sched_setaffinity"):
    _cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {_cores[int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")) % len(_cores)]})

# The native kernels built (or, where they cannot be, the fallback said) once, here: the session's
# commands inherit that it was said (`native.SAID`), so a test reading a command's output sees the
# command's own lines on any machine.
native.resolve("native", "cpu")

# A small synthetic graph: big enough for 4 METIS parts with real halos, quick to train.
SMALL_SYNTHETIC = ["dataset.nodes=1500", "dataset.avg_degree=8", "dataset.features=24", "dataset.classes=5"]


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """A private copy of the shipped Planetoid files (data/planetoid): a loader that wrongly wrote
    beside them is caught there, never in the repository. Missing files fail the test."""
    root = tmp_path_factory.mktemp("data")
    for name in ("Cora", "CiteSeer"):
        raw = DATA / "planetoid" / name / "raw"
        if not raw.is_dir():
            pytest.fail(f"{raw} is missing: the dataset files shipped with the repository (data/README.md)")
        shutil.copytree(raw, root / "planetoid" / name / "raw")
    return root


@pytest.fixture
def make_cfg(tmp_path, request):
    """compose(overrides...) -> resolved config dict with records and caches under tmp_path."""

    def make(*overrides: str) -> dict:
        # composed once a session for each distinct list (composition.config_of), the folders set after
        cfg = config_of(["log_every=0", "epochs=3", "hidden=16", "dropout=0", "eval_every=1", *overrides])
        named = {o.split("=", 1)[0] for o in overrides}
        for key, folder in (("results_dir", "results"), ("cache_dir", "cache")):
            if key not in named:
                cfg[key] = str(tmp_path / folder)
        return cfg

    return make


@pytest.fixture
def write_plugins(tmp_path, monkeypatch):
    """write_plugins({name: source}) -> folder: out-of-tree method plugins, found by this process and
    the ranks it spawns through GNNBENCH_METHODS_PATH."""

    def write(sources: dict[str, str]) -> Path:
        folder = tmp_path / "plugins"
        folder.mkdir(exist_ok=True)
        for name, source in sources.items():
            (folder / f"{name}.py").write_text(source)
        monkeypatch.setenv("GNNBENCH_METHODS_PATH", str(folder))
        return folder

    return write
