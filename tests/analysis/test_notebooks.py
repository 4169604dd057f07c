"""The notebooks run top to bottom in a real Jupyter kernel on records a sweep produced, through
`python -m analysis notebooks`, into a folder of their own; they are kept in git without outputs."""
from __future__ import annotations

import nbformat

from benchmarks.core.datasets import PROJECT_ROOT

NOTEBOOKS = sorted((PROJECT_ROOT / "analysis" / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist_without_outputs():
    assert [p.stem for p in NOTEBOOKS] == ["accuracy", "peak_memory", "speedup"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


def test_the_notebooks_command_runs_them_into_their_own_folder(quickstart, tmp_path):
    """`python -m analysis notebooks <records>`: each notebook executed top to bottom in a real kernel
    without an error, with its outputs, in <records>/notebooks, and its figures in
    <records>/notebooks/figures; nothing else in the records' folder (where the report's figures/ go)
    changed. The memory notebook's table says PSS, as the report and its figure do."""
    import shutil

    from tests import commands
    records = tmp_path / "records"
    shutil.copytree(quickstart, records)
    before = sorted(p.relative_to(records) for p in records.rglob("*"))
    out = commands.run("analysis", "notebooks", str(records), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "notebooks: " in out.stdout
    folder = records / "notebooks"
    assert sorted(p.name for p in folder.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    for path in folder.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code), f"{path.name}: a cell did not run"
        assert any("image/png" in o.get("data", {}) for o in code[-1].outputs), f"{path.name} shows no figure"
        assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert {p.name for p in (folder / "figures").glob("*.png")} >= {"speedup_vs_workers.png", "memory_vs_workers.png",
                                                                   "accuracy_vs_time.png"}
    assert sorted(p.relative_to(records) for p in records.rglob("*") if "notebooks" not in p.parts) == before
    # the memory table shows the peak the report and its figure show (PSS), not RSS
    nb = nbformat.read(folder / "peak_memory.ipynb", as_version=4)
    table = next(o for c in nb.cells if c.cell_type == "code" and "memory_scaling" in c.source for o in c.outputs
                 if "text/plain" in o.get("data", {}))["data"]["text/plain"]
    assert "peak_pss_MiB" in table and "rss" not in table.lower()


def test_the_notebooks_command_refuses_a_folder_without_records(tmp_path):
    from tests import commands
    out = commands.run("analysis", "notebooks", str(tmp_path / "none"), timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1
