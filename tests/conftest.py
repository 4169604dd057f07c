"""Shared fixtures: the real Hydra config shrunk for tests, and the real datasets shipped in data/."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks import method_configs  # noqa: F401 (Hydra's source of method/<plugin> configs)
from benchmarks import native
from benchmarks.datasets import DATA
from benchmarks.registry import CONF

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
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=[
                f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}",
                "log_every=0", "epochs=3", "hidden=16", "dropout=0", "eval_every=1", *overrides])
        return OmegaConf.to_container(cfg, resolve=True)

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
