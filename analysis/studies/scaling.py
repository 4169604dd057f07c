"""Study `scaling` (experiment=scaling): what each approximation costs in accuracy, and saves in
bytes, as the number of partitions P grows. Every approximate method runs beside its exact control
(`sweep.controls`) and `full_halo` at each P on the same seeds; with training's randomness keyed by
node, never by rank (benchmarks/core/draws.py), a method and its control at one seed share their dropout
masks and initial weights, so the paired difference is the approximation's alone.

Per (dataset, model, partitioner, method or attribution variant, P), every run that has a control:
  - the accuracy effect against the control, paired over seeds, read as the findings' rows are
    (`findings.verdicts`: "costs X [CI]" after Holm's correction over every comparison of the page,
    "equivalent within ±m" by TOST at the margin the preset declares, `study_margin_pt`, a paper's own claim
    where it states one, or "not resolved" with the seeds a ±0.5 pt half-width needs), beside the validation
    effect of the same models; a control that runs in one process (`single`, a sampler's) pairs by seed at every P;
  - against the paper's comparator where it ran at that P (`findings.COMPARATORS`: `ggs` for `llcg` and
    `psgd_pa`), counted in the same correction;
  - how the runs ended (`findings.how_runs_ended`): epochs trained (median) under the preset's stopping rule,
    how many reached the cap, and the epochs and optimiser steps to the validation target (95 % of the best any
    run of the setting reached);
  - the partition's statistics that the effects may depend on (halo rows per node, cut fraction, training
    nodes per part, label skew: each record's `partition` section, `findings.regime`);
  - halo bytes (every training byte but the gradient and parameter sums) and total bytes per epoch,
    each over `full_halo`'s at the same P;
  - for a method that keeps a share of its boundary rows (BNS-GCN's `boundary_rows_kept`), the share
    it effectively kept at epoch 0, all ranks together: floor(p |B_ij|) per pair keeps less than p.

One figure per family (the records' `about.family`): each method's effect against P, its interval
as a band. Epoch times at more ranks than cores are time-slicing, not speed, and this page shows none."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import figures, paired, records
from analysis.markdown import fmt, image, md_table
from analysis.studies.findings import (COMPARATORS, REGIME_KEYS, against_reference, fixed_budget_words,
                                       how_runs_ended, recovered_markdown, recovered_share, regime, regime_at,
                                       verdicts)

#: The former page's fixed budget, kept as a secondary view (`records.test_at_budget`).
FIXED_BUDGET_EPOCHS = 50
#: Traffic that is not the halo's: gradient and parameter sums, batch-norm statistics.
SYNC = ("grad_allreduce", "param_avg", "norm")
REFERENCE = "full_halo"
ALPHA = 0.05


def halo_rows_per_node(recs: list[dict]) -> dict[tuple, float]:
    """(dataset, setting, workers) -> every rank's halo rows summed over the graph's nodes: the
    record's `partition.halo_rows_per_node`, or for a record made before it, the same from its
    per-rank halo counts."""
    out = {}
    for r in recs:
        part, graph = r.get("partition") or {}, r.get("graph") or {}
        if isinstance(part.get("halo_rows_per_node"), (int, float)):
            out[(r["dataset"], r["setting"], int(r["workers"]))] = float(part["halo_rows_per_node"])
        elif part.get("halo_nodes_per_rank") and graph.get("nodes"):
            out[(r["dataset"], r["setting"], int(r["workers"]))] = sum(part["halo_nodes_per_rank"]) / graph["nodes"]
    return out


def kept_fraction(recs: list[dict]) -> dict[tuple, float]:
    """(dataset, setting, workers, variant) -> the boundary rows an ok run kept at epoch 0 over its
    boundary rows, all ranks summed (`summary.per_rank[].boundary_rows_kept`: `by_owner_epoch0`
    over `boundary_by_owner`), the mean over the seeds; only for records that carry the probe."""
    by_key: dict[tuple, list[float]] = {}
    for r in recs:
        ranks = (r.get("summary") or {}).get("per_rank") or []
        probes = [p.get("boundary_rows_kept") for p in ranks if isinstance(p, dict)]
        if r.get("status") != "ok" or not probes or not all(isinstance(p, dict) for p in probes):
            continue
        boundary = sum(sum(p.get("boundary_by_owner") or []) for p in probes)
        if boundary:
            kept = sum(sum(p.get("by_owner_epoch0") or []) for p in probes)
            key = (r["dataset"], r["setting"], int(r["workers"]), r["variant"])
            by_key.setdefault(key, []).append(kept / boundary)
    return {key: sum(v) / len(v) for key, v in by_key.items()}


def _bytes(g: pd.DataFrame) -> tuple[float, float]:
    """Mean (halo, total) training bytes per epoch of the runs `g`."""
    total = g["comm_bytes_per_epoch"].mean()
    sync = g["comm_by_category"].map(lambda c: sum(v for k, v in c.items() if k in SYNC)).mean()
    return total - sync, total


def table(recs: list[dict]) -> pd.DataFrame:
    runs = records.runs(recs)
    about = records.abouts(recs)
    records.one_rate_each(runs, "scaling")
    ok = runs[runs["status"] == "ok"].copy()
    ok["partitioner"] = ok["config"].map(lambda c: c.get("partitioner"))
    halo_per_node, kept = halo_rows_per_node(recs), kept_fraction(recs)
    stats = regime(recs)
    hist = records.history(recs)
    timing = records.time_to_accuracy(hist, ok)
    ok["test_at_budget"] = records.test_at_budget(hist, ok, FIXED_BUDGET_EPOCHS)  # a secondary view
    rows = []
    keys = ["dataset", "model", "partitioner", "setting", "workers"]
    for (dataset, model, partitioner, setting, workers), here in ok.groupby(keys, sort=True):
        reference = here[here["variant"] == REFERENCE]
        ref_halo, ref_total = _bytes(reference) if len(reference) else (math.nan, math.nan)
        for variant, g in here.groupby("variant", sort=True):
            control = g["control"].dropna()
            if not len(control):  # a control, or an exact method
                continue
            method = g["method"].iloc[0]
            if control.iloc[0] == "single":  # a sampler's control runs at one worker, once for every P
                single = ok[(ok["variant"] == "single") & (ok["dataset"] == dataset) & (ok["model"] == model)
                            & (ok["setting"] == setting)]
                pool = pd.concat([g, single])
            else:
                pool = here
            by_seed = against_reference(pool, variant, control.iloc[0], "test_acc")
            d = list(by_seed)
            d_val = list(against_reference(pool, variant, control.iloc[0], "val_acc"))
            d_budget = list(against_reference(pool, variant, control.iloc[0], "test_at_budget"))
            comparator = COMPARATORS.get(method)
            d_cmp = paired.differences(here, variant, comparator, "test_acc") if comparator else []
            halo, total = _bytes(g)
            a = about.get(method, {})
            rows.append({"dataset": dataset, "model": model, "partitioner": partitioner, "workers": int(workers),
                         "method": variant, "base": method, "default": variant == method,
                         "family": a.get("family", "?"), "control": control.iloc[0],
                         "lr": g["lr"].iloc[0], "control_lr": pool[pool["variant"] == control.iloc[0]]["lr"].max(),
                         "effect": paired.effect(d), "differences": d, "p": paired.p_value(d),
                         "by_seed": dict(zip(by_seed.index.get_level_values("seed"), d)),
                         "acc_by_seed": dict(zip(g["seed"], g["test_acc"])),  # the runs' own, for `recovered_share`
                         "val_effect": paired.effect(d_val), "budget_effect": paired.effect(d_budget),
                         # the method its paper set it beside (LLCG's Table 1: GGS), where it ran at this P
                         "comparator": comparator if comparator and len(d_cmp) else "",
                         "comparator_differences": d_cmp, "comparator_p": paired.p_value(d_cmp),
                         "margin_pt": g["config"].map(lambda c: c.get("study_margin_pt")).dropna().max(),
                         **how_runs_ended(g, timing),
                         "halo_vs_reference": halo / ref_halo if ref_halo else math.nan,
                         "bytes_vs_reference": total / ref_total if ref_total else math.nan,
                         **regime_at(stats, dataset, setting, int(workers)),
                         # records from before the regime statistics state their halo counts only
                         "halo_rows_per_node": halo_per_node.get((dataset, setting, int(workers)), math.nan),
                         "kept_fraction": kept.get((dataset, setting, int(workers), variant), math.nan)})
    t = pd.DataFrame(rows)
    if not t.empty:  # read as the findings' rows are, a paper's claim where it states one; Holm over each regime
        judged = {key: verdicts(g) for key, g in t.groupby(REGIME_KEYS, sort=True)}
        t = pd.concat(judged.values()).loc[t.index]
        t.attrs["families"] = {key: g.attrs["comparisons"] for key, g in judged.items()}
    t.attrs["groups"] = runs.attrs["groups"]
    return t


#: The partitioner every other is read against where one setting ran on several: the suite's default
#: (conf/config.yaml), which the findings page and the user's statistics files use unless they say otherwise.
BASELINE_PARTITIONER = "metis"
#: The axes a row is read along, each against its baseline value, a table each: the partitioner (another against
#: METIS's parts) and the training split (the full split against the public one, on the same graph).
BASELINES = {"partitioner": BASELINE_PARTITIONER, "split": "public"}
#: How each axis's values read in a table's columns and heading.
SIDE = {"partitioner": "{} parts", "split": "the {} split"}
#: What moves along an axis, shown on both sides of each row (the columns `regime_at` fills).
MOVES = (("label skew (mean)", "label_skew_mean", 2), ("cut fraction", "cut_fraction", 3),
         ("training nodes / part (min)", "train_nodes_min", 0), ("halo rows / node", "halo_rows_per_node", 2))


def split_of(dataset: str) -> tuple[str, str]:
    """(graph, split) of a dataset's name: `cora-full` is Cora with the full split (benchmarks/core/datasets.py
    `planetoid_full`), `cora` Cora with the public one."""
    graph = dataset.removesuffix("-full")
    return graph, "full" if graph != dataset else "public"


def between(t: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per (graph, model, the other axes' values, method or variant, P) measured at `axis`'s baseline value
    (BASELINES) and at another: the effect against the control on the other minus the effect on the baseline,
    seed by seed (a seed fixes the initial weights and dropout masks on both: each side is itself a paired
    difference, so this is a difference of differences), read by `paired.verdict` at the study's declared margin
    (`study_margin_pt`, not a paper's claim: this asks whether the cost moved) with Holm's correction over the
    comparisons of one (dataset, model, partitioner) of the other side (a family of its own: whether the axis
    changes an approximation's cost), beside what moved between the two sides (MOVES). No cause is named: a
    partitioner, or a split, changes several of them together. Where several settings share a key the first is
    read (a scaling folder holds one a regime). Each row names both sides' `dataset` and `partitioner`
    (`baseline_dataset`, `baseline_partitioner`), `other` (the axis's value on the other side) and `baseline`."""
    if t.empty:
        return pd.DataFrame()
    graphs, splits = zip(*map(split_of, t["dataset"]))
    t = t.assign(graph=list(graphs), split=list(splits))
    fixed = ["graph", "model", *(a for a in BASELINES if a != axis), "method", "workers"]
    rows = []
    for _, g in t.groupby(fixed, sort=True):
        base = g[g[axis] == BASELINES[axis]]
        if base.empty:
            continue
        b = base.iloc[0]
        for _, o in g[g[axis] != BASELINES[axis]].iterrows():
            seeds = sorted(set(b["by_seed"]) & set(o["by_seed"]))
            d = [o["by_seed"][seed] - b["by_seed"][seed] for seed in seeds]
            rows.append({"dataset": o["dataset"], "model": o["model"], "partitioner": o["partitioner"],
                         "method": o["method"], "workers": int(o["workers"]), "axis": axis, "other": o[axis],
                         "baseline": BASELINES[axis], "baseline_dataset": b["dataset"],
                         "baseline_partitioner": b["partitioner"], "baseline_effect": b["effect"],
                         "effect": o["effect"], "differences": d, "change": paired.effect(d),
                         "p": paired.p_value(d), "margin_pt": o["margin_pt"],
                         **{f"{k}_{side}": r[k] for _, k, _ in MOVES for side, r in (("baseline", b), ("other", o))}})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    rejected, out.attrs["families"] = {}, {}
    for key, g in out.groupby(REGIME_KEYS, sort=True):
        tested = [i for i in g.index if g.at[i, "p"] == g.at[i, "p"]]
        rejected.update(zip(tested, paired.holm([g.at[i, "p"] for i in tested])))
        out.attrs["families"][key] = len(tested)
    out["verdict"] = [paired.verdict(out.at[i, "differences"], rejected=rejected.get(i, False),
                                     margin_pt=out.at[i, "margin_pt"]) for i in out.index]
    return out


def between_markdown(b: pd.DataFrame) -> str:
    """One family's rows of `between` (one axis, one (dataset, model, partitioner) on the other side)."""
    axis, other, base = b["axis"].iloc[0], b["other"].iloc[0], b["baseline"].iloc[0]
    return md_table(["method", "P", f"effect on {SIDE[axis].format(base)}", f"effect on {SIDE[axis].format(other)}",
                     f"{other} − {base} (same seeds)"]
                    + [f"{name}: {base} → {other}" for name, _, _ in MOVES],
                    [[f"`{r['method']}`", r["workers"], paired.interval(r["baseline_effect"]),
                      paired.interval(r["effect"]), r["verdict"].text]
                     + [f"{fmt(r[f'{k}_baseline'], digits)} → {fmt(r[f'{k}_other'], digits)}"
                        for _, k, digits in MOVES]
                     for r in b.sort_values(["method", "workers"]).to_dict("records")])


def between_words(b: pd.DataFrame, n: int) -> list[str]:
    """A `between` family's heading and the paragraph above its table (`n`: its comparisons, for Holm)."""
    r = b.iloc[0]
    axis, other, base = r["axis"], r["other"], r["baseline"]
    if axis == "partitioner":
        heading = (f"### Between partitioners: {r['dataset']} · {r['model']}, the same rows on {other} parts "
                   f"against {base} parts")
        moved = ("the partitioner changes label skew, the cut, training nodes per part and the halo together, so "
                 "no row here names one of them as the cause.")
    else:
        heading = (f"### Between splits: {split_of(r['dataset'])[0]} · {r['model']} · {r['partitioner']}, the same "
                   f"rows with the {other} split against the {base} split")
        moved = ("the split changes how many nodes train, in every part, and may change their label skew, on the "
                 "same graph; the parts, the cut and the halo are shown on both sides, and the model a run reports is "
                 "chosen on a validation set the two splits share. No row here names one of these as the cause.")
    return [heading, "",
            f"Each row: the effect against the control on {SIDE[axis].format(other)} minus the effect on "
            f"{SIDE[axis].format(base)}, seed by seed (a seed fixes the initial weights and dropout masks on both "
            "sides, and each side is a paired difference already), read by the same verdict at the study's "
            f"declared margin, with Holm's correction over this table's {n} comparisons, a family of its own "
            f"(does the {axis} change what the approximation costs?). Beside it, what moved between the two: "
            + moved, ""]


def _ended(r) -> str:
    """How a row's runs ended: `97 (2 at the cap)`; a fixed budget (no stopping rule) is its epochs."""
    at_cap = f" ({r['at_cap']} at the cap)" if r["at_cap"] else ""
    return f"{fmt(r['epochs_run'], 0)}{at_cap}"


def markdown(t: pd.DataFrame) -> str:
    kept = bool(t["kept_fraction"].notna().any())  # the column only where some method keeps a share of its rows
    compared = bool(t["comparator"].astype(bool).any())  # and the paper's comparator only where it ran
    return md_table(["method", "P", "lr", "verdict: test effect vs control", "validation effect, pt", "p"]
                    + (["against the paper's comparator (test)"] if compared else []) + [
                     "epochs run", "epochs to target", "steps to target",
                     f"fixed budget: test effect at {FIXED_BUDGET_EPOCHS} epochs",
                     "halo rows / node", "cut fraction",
                     "training nodes / part (min, mean)", "label skew (mean, max)", "halo bytes × full_halo",
                     "bytes × full_halo"]
                    + (["boundary rows kept (epoch 0)"] if kept else []),
                    [[f"`{r['method']}`", r["workers"], _lr(r), f"{r['verdict'].text} vs `{r['control']}`",
                      paired.interval(r["val_effect"]), fmt(r["p"], 3)]
                     + ([f"vs `{r['comparator']}`: {r['comparator_verdict'].text}" if r["comparator"] else "–"]
                        if compared else []) + [_ended(r),
                      fmt(r["epochs_to_target"], 0) + (f" ({r['missed_target']} missed)" if r["missed_target"] else ""),
                      fmt(r["steps_to_target"], 0), paired.interval(r["budget_effect"]),
                      fmt(r["halo_rows_per_node"], 2), fmt(r["cut_fraction"], 3),
                      f"{fmt(r['train_nodes_min'], 0)}, {fmt(r['train_nodes_mean'], 1)}",
                      f"{fmt(r['label_skew_mean'], 2)}, {fmt(r['label_skew_max'], 2)}",
                      fmt(r["halo_vs_reference"], 3), fmt(r["bytes_vs_reference"], 3)]
                     + ([fmt(r["kept_fraction"], 3)] if kept else [])
                     for r in t.sort_values(["method", "workers"]).to_dict("records")])


def _lr(r) -> str:
    """The row's learning rate, and its control's where the families chose another (`sweep.lr_by_family`)."""
    same = r["control_lr"] != r["control_lr"] or r["control_lr"] == r["lr"]
    return fmt(r["lr"], 4) if same else f"{fmt(r['lr'], 4)} (control {fmt(r['control_lr'], 4)})"


def curve_in_words(t: pd.DataFrame) -> list[str]:
    """Per method: its verdict at each P, grouped by word (`costs at P=8, 16; equivalent within ±1 pt at P=2;
    not resolved at P=4`), then the verdicts themselves. No cause is named here: an attribution row says what it
    changes in its name, and the page its control."""
    lines = []
    for (dataset, model, partitioner, method), g in t.groupby(["dataset", "model", "partitioner", "method"]):
        rows = g.sort_values("workers").to_dict("records")
        words: dict[str, list[int]] = {}
        for r in rows:
            word = r["verdict"].word
            word = f"equivalent within ±{r['tested_margin_pt']:g} pt" if word == "equivalent" else word
            words.setdefault(word, []).append(r["workers"])
        summary = "; ".join(f"{word} at P={', '.join(map(str, ps))}" for word, ps in words.items())
        curve = "; ".join(f"P={r['workers']}: {r['verdict'].text}" for r in rows)
        lines.append(f"- {dataset} · {model} · {partitioner}: `{method}` {summary} ({curve})")
    return lines


def effect_vs_workers(t: pd.DataFrame, out_dir) -> list[Path]:
    """One small panel per method (by family), so no two methods' bands overlap: its accuracy effect against
    its control as P grows (log 2), the 95 % interval as a band, one line a partitioner (solid: the baseline,
    BASELINE_PARTITIONER; dash-dot: the next); grey: 0 (dashed) and ±1 point (dotted). Four panels a row with
    large text, to stay readable at the width of a README."""
    sty = figures.style(t["method"], t.attrs.get("groups"))
    setups = t[["dataset", "model"]].drop_duplicates()
    one_setup = len(setups) == 1
    partitioners = sorted(set(t["partitioner"]), key=lambda p: (p != BASELINE_PARTITIONER, p))
    # the grey reference lines are dashed (0) and dotted (±1): the partitioners' lines are solid, then dash-dot
    dashes = dict(zip(partitioners, ["-", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2))]))
    panels = list(t.groupby(["dataset", "model", "family", "method"], sort=True))
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    with figures.plt.rc_context({"font.size": 12, "axes.titlesize": 12, "legend.fontsize": 10}):
        fig, axes = figures.plt.subplots(rows, cols, figsize=(3.3 * cols, 2.9 * rows), squeeze=False,
                                         layout="constrained")
        for ax, ((dataset, model, family, method), m) in zip(axes.flat, panels):
            for line in (-1, 1):
                ax.axhline(line, color="grey", linestyle=":", linewidth=1)
            ax.axhline(0, color="grey", linestyle="--", linewidth=1)
            s = sty[method]
            for partitioner, mp in m.groupby("partitioner", sort=False):
                mp = mp.sort_values("workers")
                mean = [100 * e.mean for e in mp["effect"]]
                low = [100 * e.low if e.n >= 2 else math.nan for e in mp["effect"]]
                high = [100 * e.high if e.n >= 2 else math.nan for e in mp["effect"]]
                ax.plot(mp["workers"], mean, color=s["color"], marker=s["marker"], markerfacecolor="none",
                        linewidth=1.8, linestyle=dashes.get(partitioner, "-"), label=partitioner)
                ax.fill_between(mp["workers"], low, high, color=s["color"],
                                alpha=0.2 if partitioner == partitioners[0] else 0.1, linewidth=0)
            if set(m["partitioner"]) != {BASELINE_PARTITIONER}:
                ax.legend(loc="best", frameon=False)
            figures._workers_axis(ax, sorted(t["workers"].unique()))
            ax.set_xlabel("P (ranks)")
            figures._min_span(ax, 3.0)  # the ±1 point lines always inside
            ax.set_title(f"{method}\n({family}" + ("" if one_setup else f", {dataset} · {model}") + ")", fontsize=11)
        for ax in axes[:, 0]:
            ax.set_ylabel("effect (points)")
        figures._hide_unused(axes, len(panels))
        setup = " · ".join(setups.iloc[0]) + " · " + ", ".join(partitioners) if one_setup else ""
        fig.suptitle("Each approximation's accuracy effect against its exact control as P grows"
                     + (f": {setup}" if setup else "")
                     + "\nband: 95 % interval over paired seeds; grey: 0 (dashed) and ±1 point (dotted)")
        return figures.save(fig, out_dir, "effect_vs_workers")


def _counted(g: pd.DataFrame, m: int) -> str:
    """A regime's verdicts counted: its Holm family's size, the intervals that exclude 0 before the correction
    (a paired 95 % interval excludes 0 exactly where its t-test's p is below 5 %) against the count chance alone
    would give, and the verdicts by word."""
    raw = int((g["p"] < ALPHA).sum() + (g["comparator_p"][g["comparator"].astype(bool)] < ALPHA).sum())
    words = pd.Series([v.word for v in g["verdict"]]).value_counts()
    exclude = "interval excludes" if raw == 1 else "intervals exclude"
    return (f"{m} comparisons: {raw} {exclude} 0 uncorrected, where about {ALPHA * m:.1f} would by chance "
            f"alone (Holm's family: the rows and their paper comparators with 2 seeds or more). The {len(g)} rows: "
            + ", ".join(f"{n} {w}" for w, n in words.items()) + ".")


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    if t.empty:
        return ["## Study: scaling", "", "(no approximate method ran beside its control)", ""]
    margins = ", ".join(f"±{m:g}" for m in sorted(set(t["margin_pt"])))
    stopping = sorted({str(r["config"].get("stopping", "none")) for r in recs})
    parts = ["## Study: scaling (each approximation against its control as P grows)", "",
             "The study `scaling` (the presets this page's head names). The accuracy effect is the test accuracy "
             "of the model each run's stopping rule "
             f"reports (stopping: {', '.join(stopping)}, the same for a method and its control), the method minus its "
             "exact control seed by seed (same seeds, partition, initial weights and dropout masks: every draw is "
             "keyed by node, never by rank). *verdict* (`paired.verdict`, docs/analysis.md \"The verdict\"): "
             "\"costs\"/\"gains\" where the 95 % interval excludes 0 after Holm's step-down over the "
             "comparisons of its regime's section (one dataset · model · partitioner, a family of its own: "
             "family-wise 5 % in each; a regime added later leaves another's verdicts as they were); "
             f"\"equivalent within {margins} pt\" where TOST passes at the margin the preset declared before the "
             "runs; a method whose paper states its own accuracy claim (AdaQP: at most 0.3 pt) is tested at the "
             "claim instead, and reads \"untestable here\" where its seeds cannot resolve it; otherwise \"not "
             "resolved\", with the seeds a ±0.5 pt half-width would need (`python -m analysis seeds <records>` "
             "prints the sweep that runs them). "
             "*lr*: each family's rate (`sweep.lr_by_family`, chosen on each graph's validation set: "
             "docs/results/lr_choice*.md). "
             + ("*against the paper's comparator*: the row's test accuracy minus that of the method its paper set "
                "it beside (LLCG's Table 1: GGS), seed by seed at the same P, read by the same verdict and counted "
                "in Holm's correction. " if t["comparator"].astype(bool).any() else "") +
             "*epochs run*: median, with the runs the cap stopped; *epochs to target*: median epochs to 95 % of the "
             "best validation accuracy any run of the setting reached; *steps to target*: the optimiser steps in "
             "those epochs (a local-rounds method takes several an epoch; LLCG's server corrections count). "
             + fixed_budget_words(FIXED_BUDGET_EPOCHS) + " *halo "
             "rows / node*: the halos of all ranks summed, over the graph's nodes; *cut fraction*: cut edges "
             "over edges; *training nodes / part*; *label skew*: total-variation distance of a part's training "
             "labels from the global mix. *halo bytes*: every training byte but the gradient and parameter sums, "
             "per epoch, over `full_halo`'s at the same P. Epoch times at more ranks than this machine's cores "
             "are time-slicing and are not shown."
             + (" *boundary rows kept*: the rows a method that samples its boundary received at epoch 0 over "
                "its boundary rows, all ranks summed, mean over seeds (BNS-GCN keeps floor(p |B_ij|) of each "
                "pair's |B_ij|, less than p)." if t["kept_fraction"].notna().any() else ""), ""]
    for key, g in t.groupby(REGIME_KEYS, sort=True):
        parts += [f"### {' · '.join(key)}", "", _counted(g, t.attrs["families"][key]), "", markdown(g), ""]
    parts += ["The verdicts along P, in words (no cause is named; an attribution row's name says what it changes):",
              "", *curve_in_words(t), ""]
    for axis in BASELINES:
        b = between(t, axis)
        for key, g in ([] if b.empty else b.groupby(REGIME_KEYS, sort=True)):
            parts += [*between_words(g, b.attrs["families"][key]), between_markdown(g), ""]
    recovered = recovered_share(t)
    if not recovered.empty:
        parts += recovered_markdown(recovered)
    parts += [image(effect_vs_workers(t, out_dir / "figures" / "scaling"), out_dir), ""]
    return parts


def csv(recs: list[dict]) -> pd.DataFrame:
    """The table as data (docs/results/scaling.csv, which `advise` reads): effects in points."""
    t = table(recs)
    if t.empty:
        return t
    return pd.DataFrame({
        "method": t["method"], "dataset": t["dataset"], "model": t["model"], "partitioner": t["partitioner"],
        "workers": t["workers"], "control": t["control"], "pairs": [e.n for e in t["effect"]],
        "effect_pt": [paired.points(e, "mean") for e in t["effect"]],
        "effect_low_pt": [paired.points(e, "low") for e in t["effect"]],
        "effect_high_pt": [paired.points(e, "high") for e in t["effect"]],
        "p": t["p"].round(4), "holm": t["holm"], "halo_vs_full_halo": t["halo_vs_reference"].round(4),
        "bytes_vs_full_halo": t["bytes_vs_reference"].round(4), "halo_rows_per_node": t["halo_rows_per_node"].round(3),
        "kept_fraction": t["kept_fraction"].round(4), "verdict": [v.word for v in t["verdict"]],
        "margin_pt": t["tested_margin_pt"], "lr": t["lr"], "epochs_run": t["epochs_run"],
        "comparator": t["comparator"],
        "comparator_verdict": [v.word if v is not None else "" for v in t["comparator_verdict"]],
        "epochs_to_target": t["epochs_to_target"], "steps_to_target": t["steps_to_target"],
        **{k: t[k].round(3) for k in ("cut_fraction", "train_nodes_min", "train_nodes_mean", "label_skew_mean",
                                      "label_skew_max")}})
