"""Records to answers: tables (`analysis.records`), figures (`analysis.figures`) and the report
(`python -m analysis report <results_dir>`)."""
from pathlib import Path

#: The project's root (conf/, docs/results/, results/reference/), derived here once for analysis/; the
#: runtime derives its own (`benchmarks.PROJECT_ROOT`): the report imports nothing from it.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
