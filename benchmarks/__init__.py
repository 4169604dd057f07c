"""gnnbench runtime: datasets, partitioning, launcher, communication layer, models, probes, records."""
from pathlib import Path

#: The project's root (conf/, data/, results/ beside the packages), derived here once for the runtime
#: and its tools; `analysis.PROJECT_ROOT` is the report side's (which imports nothing from the runtime).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
