"""Study `families` (experiment=families): exact full-graph training laid out four ways on the same
graph, partition, model and probes. Domain parallelism with a halo (`full_halo`: one all-to-all of
the rows each rank needs per layer; `sar`: the same rows, one remote shard at a time), CAGNET's 1D
broadcast of whole blocks (`cagnet`) and generic tensor parallelism (`tensor_parallel`: the whole
structure on every rank, feature slices aggregated over every edge; not NeutronTP, whose decoupled
training it lacks: docs/tensor_parallel.md). `single` is the oracle.

All are exact, so accuracy is a check, not a finding: each method's effect against `single`, paired
seed by seed, read by `paired.verdict` (Holm over the page, TOST at ±`paired.MARGIN_POINTS`): with every draw
keyed by node (`draws=layout`), an exact layout trains the model `single` trains, so the verdict should be
"equivalent" with an interval of +0.0 [+0.0, +0.0]. What differs, and what the section is for:

- training bytes per epoch, all ranks, against `full_halo`'s at the same P, and against what the
  method's `traffic` hook states for the same partition (`projection.epoch_bytes`: the cost model's
  analytic volume; 1.000 where the count is the model);
- the categories the bytes fall in (halo rows, broadcast blocks, layout switches);
- the largest rank's training working set against `single`'s, and its process peak (PSS) beside the
  pre-flight check's projection of it (`projection.process_peaks`).

No epoch time: the sweep's runs share this machine's two cores with each other's ranks (4 workers)
and whatever else runs, so times across its runs are not a finding (docs/measurement.md); the
projection (`python -m analysis project`) carries bytes to a cluster's links."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import costmodel, paired, projection, records
from analysis.markdown import fmt, md_table

ORACLE = "single"
ORDER = ["single", "full_halo", "sar", "cagnet", "tensor_parallel"]
#: a single process pairs with a multi-rank run on these (its record says workers=1)
WITH_SINGLE = ["dataset", "model", "setting", "seed"]


def _projected(record: dict) -> tuple[float, float]:
    """(the bytes per epoch the method's `traffic` hook states for this record's partition and model,
    the pre-flight check's projected process peak): NaN where the model states nothing, or where the
    record lacks what the projection reads (`projection.record_inputs`: a record from before it)."""
    if record["status"] != "ok" or projection.skip_reason(record):
        return math.nan, math.nan
    try:
        model, ranks = projection.record_inputs(record)
    except (records.BadRecord, KeyError):
        return math.nan, math.nan
    try:  # a plugin whose hook raises: nothing projected for its records (its line is in costmodel.FAILED)
        moved = (projection.epoch_bytes(record["method"], record["config"]["method"], model, record["partition"],
                                        record["workers"]) if record["workers"] > 1 else math.nan)
        return moved, projection.process_peaks(record, model, ranks)["projected_process_peak_bytes"]
    except costmodel.PluginFailed:
        return math.nan, math.nan


def _top_categories(by_category: list[dict], share: float = 0.05) -> str:
    """The categories holding at least `share` of the bytes, largest first, as `name share%`."""
    total = {}
    for c in by_category:
        for k, v in c.items():
            total[k] = total.get(k, 0.0) + v
    whole = sum(total.values())
    if not whole:
        return "–"
    top = sorted(((v / whole, k) for k, v in total.items() if v / whole >= share), reverse=True)
    return ", ".join(f"{k} {100 * s:.0f}%" for s, k in top)


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (dataset, model, setting, workers, variant); `single` (one process) appears under
    every worker count its partners ran at."""
    runs = records.runs(recs)
    by_run = {Path(r["_path"]).stem: r for r in recs if "_path" in r}
    projected = [_projected(by_run[run]) if run in by_run else (math.nan, math.nan) for run in runs["run"]]
    runs["projected_bytes"] = [b for b, _ in projected]
    runs["projected_peak"] = [p for _, p in projected]
    ok = runs[runs["status"] == "ok"]
    rows = []
    for (dataset, model, setting), here in ok.groupby(["dataset", "model", "setting"], sort=True):
        oracle = here[here["variant"] == ORACLE]
        for workers in sorted(set(here["workers"]) - {1}):
            at = here[here["workers"] == workers]
            halo = at[at["variant"] == paired.PLAIN]
            for variant, g in pd.concat([oracle, at]).groupby("variant", sort=False):
                d = [] if variant == ORACLE else paired.differences(
                    pd.concat([oracle, g]), variant, ORACLE, "test_acc", keys=WITH_SINGLE)
                effect = None if variant == ORACLE else paired.effect(d)
                rows.append({
                    "dataset": dataset, "model": model, "setting": setting, "workers": workers, "variant": variant,
                    "seeds": len(g), "test_acc": g["test_acc"].mean(), "test_acc_std": g["test_acc"].std(ddof=1),
                    "effect": effect, "differences": d, "p": paired.p_value(d) if d else math.nan,
                    "bytes_per_epoch": g["comm_bytes_per_epoch"].mean(),
                    "bytes_vs_full_halo": (g["comm_bytes_per_epoch"].mean() / halo["comm_bytes_per_epoch"].mean()
                                           if len(halo) and variant not in (ORACLE, paired.PLAIN) else math.nan),
                    "bytes_vs_model": (g["comm_bytes_per_epoch"] / g["projected_bytes"]).mean(),
                    "categories": _top_categories(list(g["comm_by_category"])),
                    "ws_vs_single": g["train_mem_bytes"].mean() / oracle["train_mem_bytes"].mean()
                                    if len(oracle) else math.nan,
                    "peak_bytes": g["peak_mem_bytes"].mean(), "projected_peak": g["projected_peak"].mean()})
    t = pd.DataFrame(rows)
    if not t.empty:
        t["verdict"] = paired.verdicts([None if r["effect"] is None else r["differences"]
                                        for r in t.to_dict("records")])
        t["order"] = t["variant"].map(lambda v: ORDER.index(v) if v in ORDER else len(ORDER))
        t = t.sort_values(["dataset", "model", "setting", "workers", "order", "variant"]).drop(columns="order")
    return t.reset_index(drop=True)


def headlines(t: pd.DataFrame) -> list[str]:
    """The exactness check and the bytes, in words."""
    lines = []
    judged = [r for r in t.to_dict("records") if r["verdict"] is not None and r["verdict"].n >= 2]
    single_seed = sorted({r["workers"] for r in t.to_dict("records")
                          if r["verdict"] is not None and r["verdict"].n < 2})
    if single_seed:
        lines.append(f"- P={', '.join(map(str, single_seed))}: one seed (the preset's bytes and working sets), no "
                     "accuracy verdict; the difference from `single` is in the table")
    other = [r for r in judged if r["verdict"].word != "equivalent"]
    if other:
        lines += [f"- {r['dataset']} P={r['workers']}: `{r['variant']}` against `single`: {r['verdict']}"
                  + (": an exact method should not differ; look at this run set"
                     if r["verdict"].word in ("costs", "gains") else "") for r in other]
    if judged and not other:
        lines.append(f"- every exact method is equivalent to `single` within ±{paired.MARGIN_POINTS:g} pt (TOST), "
                     "as exactness requires")
    for variant in ("cagnet", "tensor_parallel", "sar"):
        mine = t[t["variant"] == variant].dropna(subset=["bytes_vs_full_halo"])
        if len(mine):
            spans = ", ".join(f"{r['dataset']} P={r['workers']} {r['bytes_vs_full_halo']:.2f}x"
                              for r in mine.to_dict("records"))
            lines.append(f"- `{variant}` moves, per epoch, {spans} `full_halo`'s bytes")
    off = t.dropna(subset=["bytes_vs_model"])
    off = off[(off["bytes_vs_model"] - 1).abs() > 1e-3]
    lines.append("- every counted volume equals its `traffic` hook's (the cost model's) to 0.1 %" if off.empty else
                 "- counted bytes differ from the cost model's by more than 0.1 % for: " + ", ".join(
                     f"{r['dataset']} P={r['workers']} `{r['variant']}` ({r['bytes_vs_model']:.3f}x)"
                     for r in off.to_dict("records")))
    return lines


def _verdict(r: dict) -> str:
    """The row's verdict; with one seed, its difference from `single` (no interval, no verdict)."""
    if r["verdict"] is None:
        return "–"
    if r["verdict"].n == 1:
        return f"{100 * r['differences'][0]:+.1f} pt (1 seed: no verdict)"
    return r["verdict"].text


def markdown(t: pd.DataFrame) -> str:
    return md_table(
        ["dataset", "P", "method", "seeds", "test acc %", "verdict: effect vs single", "MB/epoch",
         "x full_halo", "x cost model", "where the bytes go", "train WS/rank x single", "peak/rank GB (projected)"],
        [[r["dataset"], r["workers"], r["variant"], r["seeds"],
          fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"]),
          _verdict(r), fmt(r["bytes_per_epoch"], 3, scale=1e6),
          fmt(r["bytes_vs_full_halo"], 2), fmt(r["bytes_vs_model"], 3), r["categories"], fmt(r["ws_vs_single"], 2),
          f"{fmt(r['peak_bytes'], 2, scale=1e9)} ({fmt(r['projected_peak'], 2, scale=1e9)})"]
         for r in t.to_dict("records")])


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    title = "## Study: families of exact training (halo, broadcast, tensor parallel)"
    if t.empty:
        return [title, "", "(no successful runs)", ""]
    return [title, "",
            "`python -m benchmarks.commands.sweep experiment=families`. Test accuracy at the best validation epoch, "
            "mean ± "
            "standard deviation over seeds; the effect is the method minus `single` seed by seed, read by the verdict "
            "(docs/analysis.md, \"The verdict\": \"costs\"/\"gains\" after Holm over the page, \"equivalent "
            f"within ±{paired.MARGIN_POINTS:g} pt\" by TOST, otherwise \"not resolved\"). "
            "MB/epoch: training bytes per epoch, all ranks; x cost model: over what the method's `traffic` hook "
            "states for the same partition. Train WS: the largest "
            "rank's training working set over `single`'s; peak: the largest rank process's peak (PSS) beside the "
            "pre-flight check's projection. No epoch time: the runs share two cores (the module's docstring).", "",
            markdown(t), "", *headlines(t), ""]
