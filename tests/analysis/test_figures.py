"""Every figure renders, as PNG and PDF, from records with missing baselines and failed runs."""
from __future__ import annotations

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.text import Text

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


def test_a_method_has_one_colour_in_every_figure_and_no_colour_repeats_within_one():
    """Every registered method and a few variants: each its own colour; a method's colour is the
    fixed map's whatever else the figure holds; a method the map does not know (a new plugin) takes
    a colour no known method has."""
    from benchmarks.base.registry import method_names
    names = method_names()
    variants = [*names, "sar mode=sa", "full_halo method.layer0=cached", "bns_gcn boundary_fraction=1.0",
                "my_plugin", "my_plugin k=2"]
    sty = figures.style(variants)
    colours = [s["color"] for s in sty.values()]
    assert len(set(colours)) == len(variants)
    for m in names:
        if m in figures.METHOD_COLOURS:
            assert sty[m]["color"] == figures.style([m])[m]["color"] == figures.METHOD_COLOURS[m]
    assert sty["my_plugin"]["color"] not in figures.METHOD_COLOURS.values()
    # a lone variant of a method takes the method's colour, in whichever report it appears
    lone = figures.style(["full_halo kernel=spmm"])
    assert lone["full_halo kernel=spmm"]["color"] == figures.METHOD_COLOURS["full_halo"]


def _drawn(monkeypatch):
    """The figures a plotting function draws, kept open instead of saved: tests read their artists."""
    figs = []
    monkeypatch.setattr(figures, "save", lambda fig, out_dir, name: figures.place_labels(fig) or figs.append(fig) or [])
    return figs


def _two_seeds():
    """full_halo at P=1 and P=2 with two seeds each (epoch times 1 and 3 s at P=2; peaks 1 and 3
    GiB; final validation 0.8 and 0.9), sar at P=2 with one seed."""
    g = 2 ** 30
    return _named([
        record("full_halo", 1, seed=0, epoch_time=2.0, peak=4 * g, comm=0, val=(0.5, 0.7)),
        record("full_halo", 1, seed=1, epoch_time=2.0, peak=4 * g, comm=0, val=(0.5, 0.7)),
        record("full_halo", 2, seed=0, epoch_time=1.0, peak=g, comm=10 ** 6, val=(0.5, 0.8)),
        record("full_halo", 2, seed=1, epoch_time=3.0, peak=3 * g, comm=10 ** 6, val=(0.5, 0.9)),
        record("sar", 2, epoch_time=1.0, peak=g, comm=10 ** 6, val=(0.5, 0.85)),
    ])


def _agg(records):
    from analysis import records as rec
    runs = rec.runs(records)
    agg = rec.aggregate(runs)
    agg.attrs = runs.attrs
    return runs, agg


def _bars(ax, label):
    """(low, high) of each vertical error bar of the errorbar artist labelled `label`."""
    for c in ax.containers:
        if c.get_label() == label and c.has_yerr:
            return sorted((min(y for _, y in seg), max(y for _, y in seg)) for seg in c[2][-1].get_segments())
    return None


def test_two_seeds_give_a_bar_of_their_spread_and_one_seed_none(monkeypatch, tmp_path):
    figs = _drawn(monkeypatch)
    records = _two_seeds()
    runs, agg = _agg(records)
    figures.memory_vs_workers(agg, tmp_path)
    peak_ax = figs[0].axes[0]
    std = 2 ** 0.5  # GiB: the standard deviation of 1 and 3
    assert sum(_bars(peak_ax, "full_halo"), ()) == pytest.approx((2 - std, 2 + std, 4, 4))
    assert _bars(peak_ax, "sar") is None  # sar has one seed at every P: a plain line
    figures.speedup_vs_workers(agg, tmp_path)
    (low, high), = [b for b in _bars(figs[1].axes[0], "full_halo") if b[0] != b[1]]
    assert low < 1.0 < high  # full_halo P=2: 2 s / 2 s, the seeds' 1 s and 3 s around it
    from analysis import records as rec
    figures.accuracy_vs_time(rec.history(records), runs, tmp_path)
    bands = [c.get_paths()[0].vertices[:, 1] for c in figs[2].axes[0].collections if isinstance(c, PolyCollection)]
    # full_halo at P=1 and P=2 (two seeds each; at P=1 they agree: a band of no width); sar has one seed
    assert sorted((ys.min(), ys.max()) for ys in bands) == [(0.5, 0.7), (0.5, pytest.approx(0.85 + 0.05 * 2 ** 0.5))]


def test_colours_a_figure_draws_are_the_fixed_maps(monkeypatch, tmp_path):
    figs = _drawn(monkeypatch)
    runs, agg = _agg(_two_seeds())
    from analysis import records as rec
    figures.comm_vs_workers(agg, rec.comm_by_category(runs), tmp_path)
    lines, bars = figs[0].axes[0], figs[0].axes[1]
    drawn = {c.get_label(): c[0].get_color() for c in lines.containers}
    assert drawn == {m: figures.METHOD_COLOURS[m] for m in ("full_halo", "sar")}
    categories = {t.get_text(): h.get_facecolor() for t, h in zip(bars.get_legend().get_texts(),
                                                                   bars.get_legend().legend_handles)}
    assert set(categories) == {"halo_fwd", "grad_allreduce"}
    for c, rgba in categories.items():
        assert figures.matplotlib.colors.to_hex(rgba) == figures.CATEGORY_COLOURS[c]


def test_speedup_without_a_one_worker_run_is_over_the_fewest_and_oversubscribed_points_are_marked(
        monkeypatch, tmp_path):
    figs = _drawn(monkeypatch)
    _, agg = _agg(_named([record("sar", 2, epoch_time=2.0), record("sar", 4, epoch_time=4.0),  # 2 cores here
                          record("full_halo", 2, epoch_time=2.0)]))
    figures.speedup_vs_workers(agg, tmp_path)
    ax = figs[0].axes[0]
    assert "fewest workers (P=2)" in ax.get_ylabel()
    sar = [c for c in ax.containers if c.get_label() == "sar"][0]
    assert list(sar[0].get_xdata()) == [2] and list(sar[0].get_ydata()) == [1.0]
    assert any("sar: ranks > cores" in t.get_text() for t in ax.texts)


def test_an_accuracy_axis_spans_at_least_two_points(monkeypatch, tmp_path):
    figs = _drawn(monkeypatch)
    _, agg = _agg(_named([record("full_halo", 2, val=(0.5, 0.9663)), record("sar", 2, val=(0.5, 0.9664))]))
    figures.accuracy_vs_comm(agg, tmp_path)
    low, high = figs[0].axes[0].get_ylim()
    assert high - low >= figures.MIN_ACCURACY_SPAN


def test_labels_of_nearby_points_do_not_overprint_and_coinciding_ones_are_drawn_once(monkeypatch, tmp_path):
    figs = _drawn(monkeypatch)
    near = [record(m, 2, comm=10 ** 6, val=(0.5, 0.9 + i / 1000)) for i, m in enumerate(("full_halo", "sar", "cagnet"))]
    same = [record(m, 2, comm=10 ** 7, val=(0.5, 0.8)) for m in ("digest", "bns_gcn")]  # one point, one label
    _, agg = _agg(_named(near + same))
    figures.accuracy_vs_comm(agg, tmp_path)
    ax = figs[0].axes[0]
    figs[0].canvas.draw()
    renderer = figs[0].canvas.get_renderer()
    # the text's own box (an annotation's extent takes in its line back to the point)
    boxes = [Text.get_window_extent(a, renderer) for a in ax.texts if a.get_text().startswith("P=2")]
    assert len(boxes) == 4
    assert not any(b.overlaps(c) for i, b in enumerate(boxes) for c in boxes[i + 1:])
