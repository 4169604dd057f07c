"""The notebooks run top to bottom in a real Jupyter kernel on records a sweep produced, and are
kept in git without outputs."""
from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from benchmarks.core.datasets import PROJECT_ROOT

NOTEBOOKS = sorted((PROJECT_ROOT / "analysis" / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist_without_outputs():
    assert [p.stem for p in NOTEBOOKS] == ["accuracy", "peak_memory", "speedup"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_cleanly(path, quickstart, tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBENCH_RESULTS", str(quickstart))
    monkeypatch.setenv("GNNBENCH_FIGURES", str(tmp_path))
    # the kernel imports this checkout's packages, whatever else is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()  # raises on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert list(tmp_path.glob("*.png"))  # its figures were drawn
