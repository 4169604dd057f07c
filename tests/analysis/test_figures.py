"""Every figure renders, as PNG and PDF, from records with missing baselines and failed runs."""
from __future__ import annotations

from analysis import figures
from tests.analysis.handmade import record

FIGURES = {"speedup_vs_workers", "memory_vs_workers", "accuracy_vs_time", "comm_vs_workers", "memory_time_scatter",
           "accuracy_vs_comm"}


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


def test_no_two_variants_share_a_colour_and_marker_and_a_group_shares_a_hue():
    """Every registered method and a few variants: each its own (colour, marker) pair; the methods of
    one group (records.group of what its records state) drawn in shades of one colour map."""
    from analysis.records import group
    from benchmarks.run.methods_table import about
    from benchmarks.base.registry import method_names
    names = method_names()
    groups = {m: group(about(m)) for m in names}
    variants = [*names, "sar mode=sa", "full_halo method.layer0=cached", "bns_gcn boundary_fraction=1.0"]
    sty = figures.style(variants, groups)
    pairs = [(s["color"], s["marker"]) for s in sty.values()]
    assert len(set(pairs)) == len(variants)
    assert groups["sar"] == groups["single"] == "exact full-graph" and groups["bns_gcn"] == "approximate full-graph"
    hue = {g: figures.plt.get_cmap(figures.GROUP_COLOURS[g]) for g in set(groups.values())}
    for m in names:  # each colour is a shade of its group's map
        shades = [hue[groups[m]](x / 100) for x in range(101)]
        assert min(sum((a - b) ** 2 for a, b in zip(sty[m]["color"], c)) for c in shades) < 1e-3
