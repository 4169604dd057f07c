"""Every figure renders, as PNG and PDF, from records with missing baselines and failed runs."""
from __future__ import annotations

from analysis import figures
from tests.analysis.handmade import record

FIGURES = {"speedup_vs_workers", "memory_vs_workers", "accuracy_vs_time", "comm_vs_workers", "memory_time_scatter"}


def _named(records):
    for i, r in enumerate(records):
        r["_path"] = f"run{i}.json"
    return records


def test_every_figure_renders_with_failed_and_missing_runs(tmp_path):
    records = _named([
        record("single", 1, epoch_time=4.0, peak=3 * 2 ** 30, train_mem=2 ** 30),
        record("full_halo", 2, epoch_time=2.0, peak=2 ** 30, train_mem=2 ** 29, comm=10 ** 6),
        record("full_halo", 8, epoch_time=0.4, peak=2 ** 28, train_mem=2 ** 26, comm=10 ** 8),
        record("sar", 2, status="failed", val=(0.3,)),             # failed after one epoch
        record("sar", 8, status="failed", val=()),                 # failed before any epoch
        record("full_halo", 2, dataset="cora", model="gcn", epoch_time=0.1, comm=10 ** 5),  # no single here
    ])
    written = figures.all_figures(records, tmp_path / "fig")
    assert set(written) == FIGURES
    for paths in written.values():
        assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)


def test_figures_render_when_every_run_failed(tmp_path):
    records = _named([record("sar", 2, status="failed"), record("full_halo", 2, status="failed", val=())])
    assert set(figures.all_figures(records, tmp_path / "fig")) == FIGURES
