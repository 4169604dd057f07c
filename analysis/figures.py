"""Figures from the tables of `analysis.records`, saved as PNG (for screens and the README) and
PDF (for print). One panel per (dataset, model, setting); one colour per variant, the same in every
figure; failed configurations are marked with a red x and the word "failed", never left out.

Each function takes the tables it needs and an output folder and returns the files it wrote.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from analysis import records as rec  # noqa: E402
from analysis.costmodel import COMPUTE  # noqa: E402

plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 100,
                     "axes.grid": True, "grid.alpha": 0.3})
MIB, GIB = 2 ** 20, 2 ** 30
FAILED = dict(marker="x", color="red", s=60, zorder=5, clip_on=False)


MARKERS = "osD^vP*Xph<>d"

#: One colour and marker per method, fixed: a method has the same colour in every figure of every
#: report, and no two methods share one. Methods not listed here (a new plugin) take the first of
#: `RESERVE` that the figure does not already use (sorted by name, so stable for a given folder).
METHOD_COLOURS = {
    "single": "#000000", "pyg_plain": "#7f7f7f", "full_halo": "#1f77b4", "sar": "#17becf", "cagnet": "#393b79",
    "tensor_parallel": "#6b6ecf", "adaqp": "#8c564b", "bns_gcn": "#ff7f0e", "distgnn": "#bcbd22",
    "pipegcn": "#e377c2", "pipegcn_f": "#7b4173", "pipegcn_g": "#ce6dbd", "pipegcn_gf": "#a55194",
    "sancus": "#e7ba52", "digest": "#2ca02c", "gas": "#843c39", "psgd_pa": "#637939", "llcg": "#98df8a",
    "ggs": "#9467bd", "cluster_gcn": "#d6616b", "graphsaint": "#8c6d31", "neighbor_sampling": "#5ab4ac",
}
#: One colour per communication category (`records.comm_by_category`) and per cost-model term, fixed
#: the same way.
CATEGORY_COLOURS = {
    "halo_fwd": "#1f77b4", "halo_bwd": "#aec7e8", "halo_refetch": "#17becf", "grad_allreduce": "#7f7f7f",
    "norm": "#c7c7c7", "param_avg": "#637939", "stale_sync": "#2ca02c", "feature_fetch": "#ff7f0e",
    "feature_request": "#ffbb78", "bcast_fwd": "#393b79", "bcast_bwd": "#6b6ecf", "reduce_bwd": "#9c9ede",
    "partial_agg": "#bcbd22", "partial_agg_grad": "#dbdb8d", "history_pull": "#843c39", "history_push": "#d6616b",
    "history_fill": "#e7969c", "layout_fwd": "#9467bd", "layout_bwd": "#c5b0d5", "logits_fwd": "#e377c2",
    "logits_bwd": "#f7b6d2", "adaqp_assign": "#9edae5", "correction": "#c49c94", "halo_inputs": "#ff9896",
    "sample_request": "#98df8a", "sample_response": "#e7cb94", "skip_flags": "#cedb9c",
    # the cost model's terms (`PROJECTED_TERMS`)
    "dense": "#1f77b4", "aggregate": "#ff7f0e", "attention": "#9467bd", "elementwise": "#8c564b",
    "dropout": "#e377c2", "optimizer_step": "#7f7f7f", "sampling": "#bcbd22", "exchange": "#17becf",
    "allreduce": "#2ca02c",
}
RESERVE = ("#9edae5", "#c49c94", "#dbdb8d", "#ff9896", "#aec7e8", "#ffbb78", "#c5b0d5", "#f7b6d2", "#c7c7c7",
           "#98df8a", "#e7cb94", "#cedb9c", "#de9ed6", "#bd9e39", "#9c9ede")


def fixed_colours(names, fixed: dict) -> dict:
    """Each name's colour: its entry in `fixed`, else the first colour of `RESERVE` (then of a hue
    circle) not yet taken in this figure, so no two names of one figure share a colour."""
    names = sorted(set(names))
    out = {n: fixed[n] for n in names if n in fixed}
    spare = [c for c in RESERVE if c not in fixed.values()]  # nor another report's known name's
    unknown = [n for n in names if n not in fixed]
    spare += [matplotlib.colors.to_hex(plt.get_cmap("hsv")(i / max(1, len(unknown)))) for i in range(len(unknown))]
    out.update(zip(unknown, spare))
    return out


def _shade(colour: str, k: int) -> str:
    """The k-th shade of a colour (k >= 1): alternately lighter and darker, further with k."""
    rgb = matplotlib.colors.to_rgb(colour)
    amount = min(0.85, 0.3 * ((k + 1) // 2))
    towards = 1.0 if k % 2 else 0.0
    return matplotlib.colors.to_hex([c + (towards - c) * amount for c in rgb])


def style(variants, groups: dict | None = None) -> dict:
    """A variant's colour and hollow marker. A method's colour and marker are fixed
    (`METHOD_COLOURS`, and its place in it for the marker), the same in every figure; where a figure
    holds several variants of one method, the method's own (the variant named as the method, else
    the first by name) takes its colour and the others shades of it, so no colour repeats within a
    figure. Hollow markers of different shapes keep exact methods' coinciding points visible.
    (`groups` is accepted for the callers that pass a table's `attrs["groups"]`; colours no longer
    depend on it.)"""
    variants = sorted(set(variants))
    by_method: dict[str, list[str]] = {}
    for v in variants:
        by_method.setdefault(v.split()[0], []).append(v)
    base = fixed_colours(by_method, METHOD_COLOURS)
    order = {m: i for i, m in enumerate([*METHOD_COLOURS, *sorted(set(by_method) - set(METHOD_COLOURS))])}
    out, used = {}, set(base.values())
    for method, names in sorted(by_method.items()):
        names = sorted(names, key=lambda v: (v != method, v))
        k = 0
        for v in names:
            colour = base[method]
            while v != names[0] and colour in used:
                k += 1
                colour = _shade(base[method], k)
            used.add(colour)
            out[v] = dict(color=colour, marker=MARKERS[order[method] % len(MARKERS)], markerfacecolor="none",
                          markersize=7)
    return out


def save(fig, out_dir, name: str) -> list[Path]:
    place_labels(fig)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _groups(df: pd.DataFrame):
    """(title, rows) for each (dataset, model, setting); the setting is named only when a folder has several."""
    names = df.attrs.get("settings", {})
    for (dataset, model, setting), g in df.groupby(["dataset", "model", "setting"], sort=True):
        extra = names.get(setting, "")
        yield f"{dataset} · {model}" + (f"\n{extra}" if extra else ""), g


def _grid(n: int, per_group: int = 1, size=(5.2, 3.8)):
    cols = per_group if per_group > 1 else min(n, 3)
    rows = n if per_group > 1 else math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False,
                             layout="constrained")  # titles, labels and the legend never overlap
    return fig, axes


def _workers_axis(ax, workers) -> None:
    ws = sorted(set(int(w) for w in workers))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.minorticks_off()
    ax.set_xlabel("workers (ranks)")


def _log_if_wide(ax, values, axis="y") -> None:
    v = [x for x in values if x == x and x > 0]
    if v and max(v) / min(v) >= 10:
        _log_axis(ax, axis)


def _log_axis(ax, axis="y") -> None:
    """A log axis labelled in plain numbers at 1, 2, 5 x 10^k: readable in print, unlike decade
    labels (`6×10⁻¹`)."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _mark_at_edge(ax, rows: pd.DataFrame, why: str, x: str = "workers", colour: str = "red") -> None:
    """An x on the bottom edge at each row's x, labelled `<variant>: <why>`: a configuration the
    figure has no value for is shown, never left out."""
    for _, row in rows.iterrows():
        ax.scatter([row[x]], [0], transform=ax.get_xaxis_transform(), **{**FAILED, "color": colour})
        ax.annotate(f"{row['variant']}: {why}", (row[x], 0), xycoords=("data", "axes fraction"),
                    xytext=(4, 6), textcoords="offset points", color=colour, fontsize=7, rotation=90,
                    va="bottom")


#: An accuracy axis spans at least this many points (percent), so that a rounding step between two
#: runs does not fill the axis and read as a drop.
MIN_ACCURACY_SPAN = 2.0


def _min_span(ax, span: float) -> None:
    """Widen the y axis about its centre to at least `span` (in data units)."""
    low, high = ax.get_ylim()
    if high - low < span:
        mid = (low + high) / 2
        ax.set_ylim(mid - span / 2, mid + span / 2)


def _seed_bars(std: pd.Series, scale: float = 1.0):
    """Error-bar half-widths: a configuration's standard deviation over seeds (NaN with one seed, no
    bar); None when no configuration of these has two seeds."""
    bars = (std / scale).where(std == std)
    return None if bars.isna().all() else bars.fillna(0).to_numpy()


def _label_points(ax, items: list[tuple[float, float, str]], fontsize: float = 6) -> None:
    """Points to label (x, y, text in data units), placed by `place_labels` once the figure is
    whole: a legend or a caption added later changes the axes' size, and with it where the points are."""
    ax.point_labels = getattr(ax, "point_labels", []) + [(x, y, text, fontsize) for x, y, text in items]


def place_labels(fig) -> None:
    """Every point label of the figure's axes (`_label_points`), without overprinting."""
    for ax in fig.axes:
        if getattr(ax, "point_labels", None):
            _place_labels(ax, ax.point_labels)
            ax.point_labels = []


def _place_labels(ax, items: list[tuple[float, float, str, float]]) -> None:
    """Label points without overprinting: each label goes just above right of its point, and where
    its box (as drawn) would cover a label already placed it moves up, then down, a line at a time,
    with a thin line back to its point. Points that coincide (within a pixel) with the same text get
    one label. Call it once the axes' scales and limits are set."""
    fig = ax.figure
    fig.canvas.draw()  # the layout, limits and transforms the labels are placed in
    renderer = fig.canvas.get_renderer()
    per_point = fig.dpi / 72
    pad = 1.5 * per_point
    placed, seen = [], set()
    for x, y, text, fontsize in sorted(items, key=lambda i: (i[0], i[1])):
        px, py = ax.transData.transform((x, y))
        if not text or (text, round(px), round(py)) in seen:
            continue
        seen.add((text, round(px), round(py)))
        label = ax.annotate(text, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=fontsize)
        line = label.get_window_extent(renderer).height / per_point + 0.5  # points: one line of it
        for step in (0, *[s for k in range(1, 40) for s in (k, -k)]):
            label.set_position((4, 3 + step * line))
            x0, y0, x1, y1 = label.get_window_extent(renderer).extents
            box = Bbox.from_extents(x0 - pad, y0, x1 + pad, y1)  # a little room either side of the text
            if not any(box.overlaps(b) for b in placed):
                break
        placed.append(box)
        if step:  # drawn again with a thin line back to its point
            label.remove()
            ax.annotate(text, (x, y), xytext=(4, 3 + step * line), textcoords="offset points", fontsize=fontsize,
                        arrowprops=dict(arrowstyle="-", color="grey", linewidth=0.4, shrinkA=0, shrinkB=2))


def _legend(fig, axes, extra_failed: bool) -> None:
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if extra_failed:
        handles.setdefault("failed run", plt.Line2D([], [], marker="x", color="red", linestyle=""))
    if not handles:  # e.g. only `single` runs: nothing sends, nothing to name
        return
    ncol = min(len(handles), 4)
    # the legend's rows are added to the figure's height: kept within it, they would squash the axes
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.25 * math.ceil(len(handles) / ncol))
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=ncol, frameon=False)


def _speedups(g: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A panel's speedups and what they are over: `single`'s epoch time where the panel has it, else
    each variant's own at its fewest workers (1 where it ran with one), so a folder without 1-worker
    runs still has a figure. `err`: the spread over seeds of both times, propagated (0 with one seed)."""
    ok = g[g["status"] == "ok"]
    single = ok[ok["method"] == "single"]
    rel = (ok["epoch_time_s_std"] / ok["epoch_time_s"]).fillna(0)
    rows = []
    for i, row in ok.iterrows():
        ref = single if len(single) else ok[ok["variant"] == row["variant"]].sort_values("workers").head(1)
        t, r = float(ref["epoch_time_s"].iloc[0]), rel[ref.index[0]]
        value = t / row["epoch_time_s"]
        rows.append({**row, "speedup": value, "err": value * math.hypot(rel[i], r),
                     "ref_workers": int(ref["workers"].iloc[0])})
    out = pd.DataFrame(rows, columns=[*g.columns, "speedup", "err", "ref_workers"])
    if len(single):
        return out, "single"
    fewest = sorted(set(out["ref_workers"]))
    return out, ("1 worker" if fewest == [1] else "its fewest workers (P=" + ", ".join(map(str, fewest)) + ")")


def speedup_vs_workers(agg: pd.DataFrame, out_dir) -> list[Path]:
    """Epoch-time speedup over `single`, or, without one, over the same variant at its fewest workers
    (1 where it ran with one); the bar is the spread over seeds. A configuration with more ranks than
    its machine's cores (`records.oversubscribed`: time-slicing, not a speed) is marked at the bottom
    edge, as a failed one is, not drawn."""
    sty = style(agg["variant"], agg.attrs.get("groups"))
    groups = list(_groups(agg))
    fig, axes = _grid(len(groups))
    for ax, (title, g) in zip(axes.flat, groups):
        sliced = g[(g["status"] == "ok") & rec.oversubscribed(g)]
        table, over = _speedups(g[~g.index.isin(sliced.index)])
        for variant, v in table.sort_values("workers").groupby("variant", sort=True):
            bars = v["err"].to_numpy() if (v["n_ok"] > 1).any() else None
            ax.errorbar(v["workers"], v["speedup"], yerr=bars, capsize=3, label=variant, **sty[variant])
        ws = sorted(g["workers"].unique())
        base = min(table["ref_workers"], default=1) if over != "single" else 1
        ax.plot(ws, [w / base for w in ws], linestyle="--", color="grey", linewidth=1,
                label="ideal (speedup = workers)" if base == 1 else f"ideal (speedup = workers / {base})")
        _mark_at_edge(ax, g[g["status"] != "ok"], "failed")
        _mark_at_edge(ax, sliced, "ranks > cores (time-slicing, not a speed)", colour="dimgrey")
        _workers_axis(ax, ws)
        ax.set_ylabel(f"speedup over {over} (×)")
        ax.set_title(title)
    _hide_unused(axes, len(groups))
    fig.suptitle("Speedup of the median epoch time" + ("; bar: spread over seeds" if (agg["n_ok"] > 1).any() else ""))
    _legend(fig, axes, (agg["status"] != "ok").any())
    return save(fig, out_dir, "speedup_vs_workers")


def _mem_unit(values) -> tuple[float, str]:
    v = [x for x in values if x == x]
    return (GIB, "GiB") if v and max(v) >= GIB else (MIB, "MiB")


def memory_vs_workers(agg: pd.DataFrame, out_dir) -> list[Path]:
    """Per-rank peak PSS (RSS for records without it, see `records.runs`) and training working set
    (largest rank) against workers, with the ideal 1/P line."""
    sty = style(agg["variant"], agg.attrs.get("groups"))
    groups = list(_groups(agg))
    fig, axes = _grid(len(groups), per_group=2)
    for row_axes, (title, g) in zip(axes, groups):
        pss = (g.loc[g["status"] == "ok", "peak_mem_kind"] == "PSS").all()
        peak = "peak PSS per rank" if pss else "peak PSS per rank\n(RSS where not recorded)"
        for ax, metric, name in ((row_axes[0], "peak_mem_bytes", peak),
                                 (row_axes[1], "train_mem_bytes", "training working set per rank")):
            scale, unit = _mem_unit(g[metric])
            ok = g[g["status"] == "ok"]
            for variant, v in ok.sort_values("workers").groupby("variant", sort=True):
                ax.errorbar(v["workers"], v[metric] / scale, yerr=_seed_bars(v[f"{metric}_std"], scale),
                            capsize=3, label=variant, **sty[variant])
            ideal = rec.memory_scaling(g, metric)
            ref = ideal[ideal["method"] == "single"] if (ideal["method"] == "single").any() else ideal
            ref = ref[ref["ideal"].notna()].sort_values("workers").head(1)
            ws = sorted(g["workers"].unique())
            if len(ref):
                base = float(ref["memory"].iloc[0]) * int(ref["workers"].iloc[0]) / scale
                ax.plot(ws, [base / w for w in ws], linestyle="--", color="grey", linewidth=1,
                        label=f"ideal 1/P (from {ref['variant'].iloc[0]} at P={int(ref['workers'].iloc[0])})")
            _mark_at_edge(ax, g[g["status"] != "ok"], "failed")
            _workers_axis(ax, ws)
            _log_if_wide(ax, list(ok[metric] / scale) + [base / w for w in ws] if len(ref) else list(ok[metric]))
            ax.set_ylabel(f"{name} ({unit})")
            ax.set_title(title)
    fig.suptitle("Memory per rank (largest rank)")
    _legend(fig, axes, (agg["status"] != "ok").any())
    return save(fig, out_dir, "memory_vs_workers")


def accuracy_vs_time(hist: pd.DataFrame, runs_df: pd.DataFrame, out_dir, metric: str = "val_acc") -> list[Path]:
    """Validation accuracy against epoch and against training wall time, one line per configuration:
    the mean over its ok seeds, with their spread (± one standard deviation) as a band where it has
    two or more; a run that failed is drawn on its own and ends in a red x."""
    sty = style(runs_df["variant"], runs_df.attrs.get("groups"))
    hist = hist[hist[metric].notna()]
    hist.attrs = runs_df.attrs
    groups = list(_groups(runs_df))
    fig, axes = _grid(len(groups), per_group=2)
    banded = False
    for row_axes, (title, g) in zip(axes, groups):
        for ax, x, xlabel in ((row_axes[0], "epoch", "epoch"), (row_axes[1], "wall_time_s", "training time (s)")):
            shift = 1 if x == "epoch" else 0
            for (variant, workers), c in g.sort_values(["variant", "workers", "seed"]).groupby(["variant", "workers"]):
                name = f"{variant} P={workers}"
                line = dict(linewidth=1.2, linestyle="-" if workers == g["workers"].max() else "--", **sty[variant])
                h = hist[hist["run"].isin(c.loc[c["status"] == "ok", "run"])]
                if len(h):
                    curve = h.groupby("epoch").agg(x=(x, "mean"), y=(metric, "mean"), sd=(metric, "std"),
                                                   n=(metric, "size")).reset_index()
                    ax.plot(curve["x"] + shift, curve["y"], label=name, markevery=max(1, len(curve) // 8), **line)
                    if (curve["n"] > 1).any():
                        banded = True
                        ax.fill_between(curve["x"] + shift, curve["y"] - curve["sd"].fillna(0),
                                        curve["y"] + curve["sd"].fillna(0), color=sty[variant]["color"], alpha=0.15,
                                        linewidth=0)
                for _, run in c[c["status"] != "ok"].iterrows():
                    h = hist[hist["run"] == run["run"]]
                    if len(h):
                        ax.plot(h[x] + shift, h[metric], label=name, markevery=max(1, len(h) // 8), **line)
                        ax.scatter([h[x].iloc[-1] + shift], [h[metric].iloc[-1]], **FAILED)
                    ax.annotate(f"{name}: failed" + ("" if len(h) else " before the first evaluation"),
                                (0.02, 0.04), xycoords="axes fraction", color="red", fontsize=7)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("validation accuracy" if metric == "val_acc" else metric)
            ax.set_title(title)
            if x == "wall_time_s":
                _log_if_wide(ax, list(hist["wall_time_s"]), axis="x")
            _min_span(ax, MIN_ACCURACY_SPAN / 100)
    fig.suptitle("Accuracy during training (evaluation excluded from the time)"
                 + ("\nline: mean over seeds; band: ± one standard deviation" if banded else ""))
    _legend(fig, axes, (runs_df["status"] != "ok").any())
    return save(fig, out_dir, "accuracy_vs_time")


def comm_vs_workers(agg: pd.DataFrame, comm: pd.DataFrame, out_dir) -> list[Path]:
    """Training bytes per epoch (all ranks) against workers, and their split by category."""
    sty = style(agg["variant"], agg.attrs.get("groups"))
    groups = list(_groups(agg))
    # Tall enough for a bar per sending run (the quickstart has about 20): a fixed height collapses the
    # axes to nothing.
    sending = comm[comm["bytes_per_epoch"] > 0].groupby(["dataset", "model", "setting"])[["variant", "workers"]]
    bars = max((len(g.drop_duplicates()) for _, g in sending), default=0)
    fig, axes = _grid(len(groups), per_group=2, size=(5.2, max(3.8, 0.2 * bars + 1.5)))
    # One colour per category, the same in every report (`CATEGORY_COLOURS`).
    colour = fixed_colours(comm.loc[comm["bytes_per_epoch"] > 0, "category"], CATEGORY_COLOURS)
    for row_axes, (title, g) in zip(axes, groups):
        ax = row_axes[0]
        ok = g[g["status"] == "ok"]
        silent = [f"{r['variant']} P={r['workers']}" for _, r in ok[ok["comm_bytes_per_epoch"] == 0].iterrows()]
        sends = ok[ok["comm_bytes_per_epoch"] > 0]
        for variant, v in sends.sort_values("workers").groupby("variant", sort=True):
            ax.errorbar(v["workers"], v["comm_bytes_per_epoch"] / 1e6, capsize=3, label=variant, **sty[variant],
                        yerr=_seed_bars(v["comm_bytes_per_epoch_std"], 1e6))
        _mark_at_edge(ax, g[g["status"] != "ok"], "failed")
        _workers_axis(ax, g["workers"])
        _log_if_wide(ax, list(sends["comm_bytes_per_epoch"] / 1e6))
        ax.set_ylabel("training traffic per epoch (MB, all ranks)")
        ax.set_title(title)
        if silent:
            ax.text(0.02, 0.96, textwrap.fill("no traffic: " + ", ".join(silent), 50), transform=ax.transAxes,
                    va="top", fontsize=7)
        ax = row_axes[1]
        c = comm[(comm["dataset"] == g["dataset"].iloc[0]) & (comm["model"] == g["model"].iloc[0])
                 & (comm["setting"] == g["setting"].iloc[0]) & (comm["bytes_per_epoch"] > 0)]
        if len(c):
            table = c.pivot_table(index=["variant", "workers"], columns="category", values="bytes_per_epoch",
                                  aggfunc="sum", fill_value=0) / 1e6
            table.index = [f"{v} P={w}" for v, w in table.index]
            table.plot.barh(stacked=True, ax=ax, color=[colour[c] for c in table.columns], width=0.7)
            ax.invert_yaxis()
            ax.legend(title="category", fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        else:
            ax.text(0.5, 0.5, "no training traffic", transform=ax.transAxes, ha="center")
        ax.set_xlabel("training traffic per epoch (MB, all ranks)")
        ax.set_title("by category")
    fig.suptitle("Communication")
    _legend(fig, axes[:, :1], (agg["status"] != "ok").any())
    return save(fig, out_dir, "comm_vs_workers")


def memory_time_scatter(agg: pd.DataFrame, out_dir) -> list[Path]:
    """Each configuration as one point: median epoch time against the largest rank's training
    working set, labelled with its worker count (lower left is better on both)."""
    sty = style(agg["variant"], agg.attrs.get("groups"))
    groups = list(_groups(agg))
    fig, axes = _grid(len(groups))
    for ax, (title, g) in zip(axes.flat, groups):
        ok = g[g["status"] == "ok"]
        scale, unit = _mem_unit(ok["train_mem_bytes"])
        labels = []
        for variant, v in ok.groupby("variant", sort=True):
            ax.errorbar(v["epoch_time_s"], v["train_mem_bytes"] / scale, linestyle="none", capsize=3, label=variant,
                        xerr=_seed_bars(v["epoch_time_s_std"]),
                        yerr=_seed_bars(v["train_mem_bytes_std"], scale), **sty[variant])
            labels += [(r["epoch_time_s"], r["train_mem_bytes"] / scale, f"P={r['workers']}") for _, r in v.iterrows()]
        failed = g[g["status"] != "ok"]
        if len(failed):
            ax.text(0.02, 0.02,
                    "failed: " + ", ".join(f"{r['variant']} P={r['workers']}" for _, r in failed.iterrows()),
                    transform=ax.transAxes, color="red", fontsize=7)
        _log_if_wide(ax, list(ok["epoch_time_s"]), axis="x")
        _log_if_wide(ax, list(ok["train_mem_bytes"] / scale))
        ax.set_xlabel("median epoch time (s)")
        ax.set_ylabel(f"training working set per rank ({unit})")
        ax.set_title(title)
        _label_points(ax, labels, fontsize=7)
    _hide_unused(axes, len(groups))
    fig.suptitle("Memory against time, per method")
    _legend(fig, axes, (agg["status"] != "ok").any())
    return save(fig, out_dir, "memory_time_scatter")


def _zero_bytes_at(values: pd.Series) -> float:
    """Where a point that sent 0 bytes is drawn on a log axis of bytes: a quarter of the least sent."""
    sent = values[values > 0]
    return sent.min() / 4 if len(sent) else 1.0


#: A configuration whose best validation accuracy rose by this much (2 points) in the last third of
#: its run was still improving when it stopped: its accuracy is not its converged one.
STILL_RISING = 0.02


def accuracy_vs_comm(agg: pd.DataFrame, out_dir) -> list[Path]:
    """Each configuration as one point: its test accuracy (at the best validation epoch, mean over
    seeds; bar: spread over seeds) against its training bytes per epoch (all ranks; log axis, a run
    that sends nothing at the "0 B" tick), labelled with its worker count, and an arrow where its
    best validation epoch came in the last fifth of the run (still rising: a comparison at this
    length favours the methods that converge fast). The exact methods' mean accuracy is the dashed
    reference line: a method that sends less and stays on the line is the one to look at."""
    sty = style(agg["variant"], agg.attrs.get("groups"))
    groups = list(_groups(agg))
    fig, axes = _grid(len(groups))
    rising_any = False
    for ax, (title, g) in zip(axes.flat, groups):
        ok = g[(g["status"] == "ok") & g["test_acc"].notna()]
        floor = _zero_bytes_at(ok["comm_bytes_per_epoch"])
        exact = ok[[(agg.attrs.get("groups") or {}).get(v.split()[0]) == "exact full-graph" for v in ok["variant"]]]
        if len(exact):
            ax.axhline(100 * exact["test_acc"].mean(), color="grey", linestyle="--", linewidth=1,
                       label="exact methods' mean test accuracy")
        labels = []
        for variant, v in ok.groupby("variant", sort=True):
            x = v["comm_bytes_per_epoch"].where(v["comm_bytes_per_epoch"] > 0, floor) / 1e6
            ax.errorbar(x, 100 * v["test_acc"], yerr=_seed_bars(v["test_acc_std"], 0.01),
                        linestyle="none", capsize=3, label=variant, **sty[variant])
            rising = (v["late_val_gain"] >= STILL_RISING).to_numpy()
            rising_any |= rising.any()
            # one worker sends nothing: its points sit at the 0 B tick, which the caption names
            labels += [(xi, 100 * r["test_acc"], ("" if r["workers"] == 1 and not r["comm_bytes_per_epoch"]
                                                  else f"P={r['workers']}") + ("↑" if up else ""))
                       for xi, up, (_, r) in zip(x, rising, v.iterrows())]
        failed = g[g["status"] != "ok"]
        if len(failed):
            ax.text(0.02, 0.02,
                    "failed: " + ", ".join(f"{r['variant']} P={r['workers']}" for _, r in failed.iterrows()),
                    transform=ax.transAxes, color="red", fontsize=7)
        ax.set_xscale("log")
        if (ok["comm_bytes_per_epoch"] == 0).any():  # a tick that says what the left edge is
            f0 = floor / 1e6
            ax.set_xticks([f0, *[t for t in ax.get_xticks() if t > 2 * f0]])
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _, f0=f0: "0 B" if math.isclose(v, f0) else f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlim(f0 / 1.5, max(4 * f0, 1.5 * ok["comm_bytes_per_epoch"].max() / 1e6))
        ax.set_xlabel("training MB per epoch, all ranks (log)")
        ax.set_ylabel("test accuracy at best validation (%)")
        ax.set_title(title)
        _min_span(ax, MIN_ACCURACY_SPAN)
        _label_points(ax, labels)
    _hide_unused(axes, len(groups))
    epochs = sorted({int(e) for e in agg["epochs_run"] if e == e})
    zero = ((agg["workers"] == 1) & (agg["comm_bytes_per_epoch"] == 0)).any()
    caption = (f"test accuracy at the best validation epoch of {', '.join(map(str, epochs))} epochs"
               + ("; at 0 B: one worker" if zero else "")
               + ("; ↑: still rising (validation +2 points or more in the last third of the run)" if rising_any else "")
               + ("; bar: spread over seeds" if (agg["n_ok"] > 1).any() else ""))
    fig.suptitle("Accuracy against communication\n" + textwrap.fill(caption, 90), fontsize=10)
    _legend(fig, axes, (agg["status"] != "ok").any())
    return save(fig, out_dir, "accuracy_vs_comm")


def accuracy_vs_bytes(t: pd.DataFrame, out_dir) -> list[Path]:
    """Study `boundary`: each method as one point per (dataset, workers), test accuracy (mean, bar =
    standard deviation over seeds) against halo bytes per epoch (log axis; a method that sends no
    halo rows sits at the left edge, marked 0). Upper left is better."""
    sty = style(t["variant"], t.attrs.get("groups"))
    panels = list(t.groupby(["dataset", "workers"], sort=True))
    fig, axes = _grid(len(panels))
    for ax, ((dataset, workers), g) in zip(axes.flat, panels):
        floor = _zero_bytes_at(g["halo_bytes_per_epoch"])
        for _, r in g.iterrows():
            x = (r["halo_bytes_per_epoch"] or floor) / 1e6
            ax.errorbar(x, 100 * r["test_acc"], yerr=100 * r["test_acc_std"] if r["test_acc_std"] == r["test_acc_std"]
                        else None, linestyle="none", capsize=3, label=r["variant"], **sty[r["variant"]])
            if not r["halo_bytes_per_epoch"]:
                ax.annotate("0 bytes", (x, 100 * r["test_acc"]), xytext=(4, -10), textcoords="offset points",
                            fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("halo MB per epoch, all ranks (log)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset} · P={workers}")
        _min_span(ax, MIN_ACCURACY_SPAN)
    _hide_unused(axes, len(panels))
    fig.suptitle("Accuracy against halo traffic")
    _legend(fig, axes, False)
    return save(fig, out_dir, "accuracy_vs_halo_bytes")


def effect_vs_bytes(t: pd.DataFrame, out_dir) -> list[Path]:
    """Study `findings`: each method as one point, its accuracy effect against its reference (the
    bar is the 95 % interval over paired seeds) against its training bytes per epoch (log; a method
    that sends nothing at the left edge). On the zero line and to the left is better; a bar that
    crosses zero is within noise."""
    sty = style(t["method"], t.attrs.get("groups"))
    panels = list(t.groupby(["dataset", "model"], sort=True))
    fig, axes = _grid(len(panels), size=(6.4, 4.6))
    for ax, ((dataset, model), g) in zip(axes.flat, panels):
        floor = _zero_bytes_at(g["bytes_per_epoch"])
        ax.axhline(0, color="grey", linestyle="--", linewidth=1)
        unpaired, labels = [], []
        for _, r in g.iterrows():
            e = r["effect"]
            if e is not None and e.n == 0:  # its reference has no run on these seeds: no point to draw
                unpaired.append(r["method"])
                continue
            mean, bar = (0.0, None) if e is None else (  # None: the reference itself, at 0
                100 * e.mean, None if e.n < 2 else [[100 * (e.mean - e.low)], [100 * (e.high - e.mean)]])
            x = (r["bytes_per_epoch"] or floor) / 1e6
            ax.errorbar(x, mean, yerr=bar, linestyle="none", capsize=3, label=r["method"], **sty[r["method"]])
            labels.append((x, mean, r["method"]))
        if unpaired:
            ax.text(0, -0.2, textwrap.fill("no paired runs of the reference: " + ", ".join(unpaired), 80),
                    transform=ax.transAxes, va="top", fontsize=7, color="red")
        ax.set_xscale("log")
        ax.set_xlabel("training MB per epoch, all ranks (log; 0 B at the left edge)")
        ax.set_ylabel("accuracy effect vs its reference (points)\nbar: 95 % interval over paired seeds")
        ax.set_title(f"{dataset} · {model}")
        _min_span(ax, MIN_ACCURACY_SPAN)
        _label_points(ax, labels)
    _hide_unused(axes, len(panels))
    fig.suptitle("Each method's accuracy effect against its bytes")
    _legend(fig, axes, False)
    return save(fig, out_dir, "effect_vs_bytes")


def _short(variant: str) -> str:
    """A point's label: the method and its savers, abbreviated (`full_halo +ckpt +bf16`)."""
    words = {"memory.checkpoint=layer": "+ckpt", "memory.checkpoint=all": "+ckpt(all)", "precision=bf16": "+bf16",
             "comm.quantize_grads=True": "+grads"}
    return " ".join(words.get(w, w.replace("comm.quantize=", "+")) for w in variant.split())


def _name_missing(ax, g: pd.DataFrame, shown: pd.DataFrame) -> None:
    """Under the axes, where it hides no point: the variants of a panel without a point, and why
    (not run, failed, or no full_halo to take a ratio to)."""
    missing = {}
    for _, r in g[~g.index.isin(shown.index)].iterrows():
        why = "no full_halo baseline" if r["status"] == "ok" else r["status"]
        missing.setdefault(why, []).append(_short(r["variant"]))
    if missing:
        ax.text(0, -0.2, textwrap.fill("; ".join(f"{why}: {', '.join(v)}" for why, v in missing.items()), 80),
                transform=ax.transAxes, va="top", fontsize=7, color="red")


def working_set_vs_epoch_time(t: pd.DataFrame, out_dir) -> list[Path]:
    """Study `savers`: each variant as one point, its epoch time against its largest rank's training
    working set, both as ratios to plain full_halo in fp32 (at 1, 1); one panel per dataset, model
    and worker count; the goal of checkpointing (<= 1.5x the time, <= 0.5x the memory) shaded.
    Lower left is better; variants without a ratio (not run, failed) are named under the panel."""
    sty = style(t["variant"], t.attrs.get("groups"))
    panels = list(t.groupby(["dataset", "model", "workers"], sort=True))
    fig, axes = _grid(len(panels), size=(5.6, 4.4))
    for ax, ((dataset, model, workers), g) in zip(axes.flat, panels):
        ax.add_patch(plt.Rectangle((0, 0), 1.5, 0.5, color="tab:green", alpha=0.15, linewidth=0,
                                   label="goal of checkpointing: <= 1.5x time, <= 0.5x memory"))
        ax.axhline(1, color="grey", linestyle="--", linewidth=0.8)
        ax.axvline(1, color="grey", linestyle="--", linewidth=0.8)
        shown = g[g["time_ratio"].notna() & g["mem_ratio"].notna()]
        for _, r in shown.iterrows():
            ax.plot(r["time_ratio"], r["mem_ratio"], linestyle="none", label=r["variant"], **sty[r["variant"]])
        _name_missing(ax, g, shown)
        ax.set_xlim(0, max(1.7, 1.15 * shown["time_ratio"].max()) if len(shown) else 1.7)
        ax.set_ylim(0, max(1.2, 1.15 * shown["mem_ratio"].max()) if len(shown) else 1.2)
        _label_points(ax, [(r["time_ratio"], r["mem_ratio"], _short(r["variant"])) for _, r in shown.iterrows()], 7)
        ax.set_xlabel("median epoch time / plain full_halo's")
        ax.set_ylabel("training working set (largest rank)\n/ plain full_halo's")
        ax.set_title(f"{dataset} · {model} · P={workers}")
    _hide_unused(axes, len(panels))
    fig.suptitle("Memory against time of the savers (ratios to full_halo in fp32)")
    _legend(fig, axes, False)
    return save(fig, out_dir, "working_set_vs_epoch_time")


def accuracy_cost_vs_bytes_ratio(t: pd.DataFrame, out_dir) -> list[Path]:
    """Study `savers`, quantised messages: each variant as one point, its halo bytes per epoch
    against its test accuracy cost (full_halo's mean minus its own, in points; bar: the variant's
    standard deviation over seeds), both against plain full_halo in fp32 (at 0 cost, 1x); one panel
    per dataset, model and worker count. Lower left is better. Drawn: the accuracy goal (<= 0.5
    point), int8's bytes goal (<= 0.3x) and AdaQP's box (<= 0.35x at <= 0.5 point)."""
    sty = style(t["variant"], t.attrs.get("groups"))
    panels = list(t.groupby(["dataset", "model", "workers"], sort=True))
    fig, axes = _grid(len(panels), size=(5.6, 4.4))
    for ax, ((dataset, model, workers), g) in zip(axes.flat, panels):
        shown = g[g["bytes_ratio"].notna() & g["acc_gap_pt"].notna()]
        bar = (100 * shown["test_acc_std"]).fillna(0)
        low = min(-1.0, 1.1 * (shown["acc_gap_pt"] - bar).min()) if len(shown) else -1.0
        high = max(1.5, 1.1 * (shown["acc_gap_pt"] + bar).max()) if len(shown) else 1.5
        ax.add_patch(plt.Rectangle((0, low), 0.35, 0.5 - low, color="tab:green", alpha=0.15, linewidth=0,
                                   label="AdaQP's goal: <= 0.35x bytes, <= 0.5 point"))
        ax.axhline(0.5, color="tab:green", linestyle="--", linewidth=0.8, label="bf16 and int8: <= 0.5 point")
        ax.axvline(0.3, color="tab:green", linestyle=":", linewidth=1, label="int8: <= 0.3x bytes")
        ax.axhline(0, color="grey", linewidth=0.8)
        for _, r in shown.iterrows():
            std = 100 * r["test_acc_std"]
            ax.errorbar(r["bytes_ratio"], r["acc_gap_pt"], yerr=std if std == std else None, linestyle="none",
                        capsize=3, label=r["variant"], **sty[r["variant"]])
        _name_missing(ax, g, shown)
        ax.set_xlim(0, max(1.1, 1.1 * shown["bytes_ratio"].max()) if len(shown) else 1.1)
        ax.set_ylim(low, high)
        _label_points(ax, [(r["bytes_ratio"], r["acc_gap_pt"], _short(r["variant"])) for _, r in shown.iterrows()], 7)
        ax.set_xlabel("halo bytes per epoch / plain full_halo's")
        ax.set_ylabel("test accuracy cost vs full_halo (points)\nbar: standard deviation over seeds")
        ax.set_title(f"{dataset} · {model} · P={workers}")
    _hide_unused(axes, len(panels))
    fig.suptitle("Accuracy cost against halo traffic of quantised messages (vs full_halo in fp32)")
    _legend(fig, axes, False)
    return save(fig, out_dir, "accuracy_cost_vs_bytes_ratio")


def _hide_unused(axes, n: int) -> None:
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)


def all_figures(records: list[dict], out_dir) -> dict[str, list[Path]]:
    runs_df = rec.runs(records)
    runs_df.attrs["settings"] = rec.settings_described(runs_df)
    agg = rec.aggregate(runs_df)
    agg.attrs = runs_df.attrs
    comm = rec.comm_by_category(runs_df)
    return {
        "speedup_vs_workers": speedup_vs_workers(agg, out_dir),
        "memory_vs_workers": memory_vs_workers(agg, out_dir),
        "accuracy_vs_time": accuracy_vs_time(rec.history(records), runs_df, out_dir),
        "comm_vs_workers": comm_vs_workers(agg, comm, out_dir),
        "memory_time_scatter": memory_time_scatter(agg, out_dir),
        "accuracy_vs_comm": accuracy_vs_comm(agg, out_dir),
    }


PROJECTED_TERMS = (*COMPUTE, "exchange", "allreduce")


def projection_vs_workers(rows: list[dict], out_dir) -> list[Path]:
    """The cost model's projection (`analysis.projection`), one row of panels per (dataset, model):
    projected epoch time against workers, projected training memory per rank against workers (hollow
    markers: projected; filled: measured, where a record of that configuration exists), and the
    share of each time term at the largest P (overlap subtracted from the exchange it hides)."""
    df = pd.DataFrame(rows)
    if df.empty:
        return []
    df["label"] = df["variant"].fillna(df["method"])
    for column in ("measured_epoch_s", "measured_train_mem_bytes"):  # None where nothing was measured
        df[column] = pd.to_numeric(df[column], errors="coerce")
    groups = list(df.groupby(["dataset", "model", "hardware"], sort=True))
    fig, axes = _grid(len(groups), per_group=3)
    sty = style(df["label"])
    for (ax_t, ax_m, ax_f), ((dataset, model, hardware), g) in zip(axes, groups):
        for label, v in g.groupby("label"):
            v = v.groupby("workers").mean(numeric_only=True).reset_index()
            ax_t.plot(v["workers"], v["projected_epoch_s"], label=label, **sty[label])
            ax_m.plot(v["workers"], v["projected_train_mem_bytes"] / GIB, **sty[label])
            measured = v.dropna(subset=["measured_epoch_s"])
            ax_t.scatter(measured["workers"], measured["measured_epoch_s"], color=sty[label]["color"], s=18)
            measured = v.dropna(subset=["measured_train_mem_bytes"])
            ax_m.scatter(measured["workers"], measured["measured_train_mem_bytes"] / GIB, color=sty[label]["color"],
                         s=18)
        for ax, what in ((ax_t, "epoch time (s)"), (ax_m, "training memory per rank (GiB)")):
            _workers_axis(ax, g["workers"])
            ax.set_ylabel(f"projected {what}")
            _log_axis(ax)
            ax.set_title(f"{dataset} · {model} on {hardware}\n(hollow: projected; filled: measured)")
        top = g[g["workers"] == g["workers"].max()].groupby("label").first()
        shares = pd.DataFrame([{t: max(0.0, r["time_terms"].get(t, 0.0) + (r["time_terms"].get("overlap", 0.0)
                                                                         if t == "exchange" else 0.0))
                                for t in PROJECTED_TERMS} for _, r in top.iterrows()], index=top.index)
        shares = shares.div(shares.sum(axis=1), axis=0)
        colour = fixed_colours(shares.columns, CATEGORY_COLOURS)
        shares.plot.barh(stacked=True, ax=ax_f, legend=False, color=[colour[t] for t in shares.columns])
        ax_f.set_xlabel(f"share of projected epoch time at P = {int(g['workers'].max())}")
        ax_f.set_ylabel("")
        ax_f.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    _legend(fig, axes[:, :1], extra_failed=False)
    return save(fig, out_dir, "projection_vs_workers")


def advise_vs_workers(rows: list[dict], memory_per_rank: dict, out_dir, title: str) -> list[Path]:
    """`python -m analysis advise`: each method's projected epoch time and peak memory per rank against
    workers, one line per method and per variant advise projects (dashed: a variant, at other option
    values); on the memory panel, the memory a rank has at each P (`memory_per_rank`, bytes). Points
    that fit it are filled, those that do not an x."""
    df = pd.DataFrame(rows)
    if df.empty:
        return []
    df["line"] = [r.get("variant") or r["method"] for r in rows]
    sty = style(df["line"], {line: rec.group(r.get("about")) for line, r in zip(df["line"], rows)})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), squeeze=False, layout="constrained")
    ax_t, ax_m = axes[0]
    for line, v in df.sort_values("workers").groupby("line"):
        s = sty[line]
        fit = [i for i, f in enumerate(v["fits"]) if f]
        dashes = "--" if line != v["method"].iloc[0] else "-"
        for ax, y in ((ax_t, v["projected_epoch_s"]), (ax_m, v["projected_peak_mem_bytes"] / 1e9)):
            ax.plot(v["workers"], y, color=s["color"], marker=s["marker"], markevery=fit, label=line,
                    linestyle=dashes)
            ax.plot(v["workers"][~v["fits"]], y[~v["fits"]], linestyle="none", marker="x", color=s["color"],
                    markersize=8)
    ws = sorted(memory_per_rank)
    ax_m.plot(ws, [memory_per_rank[w] / 1e9 for w in ws], color="black", linestyle="--", linewidth=1,
              label="the memory a rank has")
    ax_m.plot([], [], linestyle="none", marker="x", color="grey", label="x: does not fit in it")
    for ax, what, values in ((ax_t, "epoch time (s)", df["projected_epoch_s"]),
                             (ax_m, "peak memory per rank (GB)", [*df["projected_peak_mem_bytes"] / 1e9,
                                                                  *(memory_per_rank[w] / 1e9 for w in ws)])):
        _workers_axis(ax, df["workers"])
        _log_if_wide(ax, list(values))
        ax.set_ylabel(f"projected {what}")
    fig.suptitle(title)
    _legend(fig, axes, extra_failed=False)
    return save(fig, out_dir, "advise")
