"""`python -m analysis notebooks <results_dir> [--out DIR]`: run the notebooks of
`analysis/notebooks/` top to bottom in a Jupyter kernel (nbclient, no JupyterLab needed) on a folder
of records, and write each one, with its outputs, to `<out>/<name>.ipynb` and its figures to
`<out>/figures/` (default out: `<results_dir>/notebooks`), apart from the report's `figures/`,
which they never overwrite. The notebooks read the folder from `GNNBENCH_RESULTS` and write figures
to `GNNBENCH_FIGURES`; this sets both."""
from __future__ import annotations

import os
from pathlib import Path

from analysis import PROJECT_ROOT

NOTEBOOKS = PROJECT_ROOT / "analysis" / "notebooks"
NEEDS = "running the notebooks needs nbclient, nbformat and ipykernel: pip install -e '.[test]'"


def missing_kernel() -> str | None:
    """Why the notebooks cannot run here (a one-line reason), or None."""
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as e:
        return f"{NEEDS} ({e.name} is not installed)"
    return None


def default_out(results_dir) -> Path:
    return Path(results_dir) / "notebooks"


def run(results_dir, out=None, timeout: int = 600) -> list[Path]:
    """Execute every notebook on `results_dir`'s records; returns the executed notebooks' paths.
    A cell that raises stops that notebook with nbclient's CellExecutionError."""
    import nbformat
    from nbclient import NotebookClient

    out = Path(out) if out else default_out(results_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    env = {"GNNBENCH_RESULTS": str(Path(results_dir).resolve()), "GNNBENCH_FIGURES": str((out / "figures").resolve()),
           # the kernel imports this checkout's packages, whatever else is installed
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    saved = {k: os.environ.get(k) for k in env}
    written = []
    try:
        os.environ.update(env)  # the kernel inherits this process's environment
        for path in sorted(NOTEBOOKS.glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
            nbformat.write(nb, out / path.name)
            written.append(out / path.name)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return written
