"""Study `runtime` (experiment=runtime): the suite's runtime against a plain PyTorch Geometric
full-batch loop (`pyg_plain`) with the same model on the same graph, and `full_halo` with 1 worker
against `single`. Goals: PyG / single >= 1 for GCN and >= 3 for SAGE on the synthetic graph;
full_halo(1) / single <= 1.1."""
from __future__ import annotations

from pathlib import Path

from analysis import records
from analysis.markdown import fmt, md_table

GIB = 2 ** 30


def ratios(recs: list[dict]):
    """Per dataset and model: each variant's median epoch time and peak RSS (mean over ok seeds)."""
    runs_df = records.runs(recs)
    ok = runs_df[runs_df["status"] == "ok"]
    return ok.groupby(["dataset", "model", "variant", "workers"], as_index=False)[
        ["epoch_time_s", "peak_rss_bytes"]].mean()


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = ratios(recs)
    out_rows, goals = [], []
    for (dataset, model), g in t.groupby(["dataset", "model"]):
        pick = {(r["variant"], r["workers"]): r for r in g.to_dict("records")}
        pyg, single, halo = pick.get(("pyg_plain", 1)), pick.get(("single", 1)), pick.get(("full_halo", 1))

        def ratio(a, b, col="epoch_time_s"):
            return a[col] / b[col] if a and b else float("nan")

        out_rows.append([dataset, model, fmt(pyg and pyg["epoch_time_s"], 3), fmt(single and single["epoch_time_s"], 3),
                         fmt(halo and halo["epoch_time_s"], 3), fmt(ratio(pyg, single), 2, suffix="x"),
                         fmt(ratio(halo, single), 2, suffix="x"), fmt(pyg and pyg["peak_rss_bytes"], 2, scale=GIB),
                         fmt(single and single["peak_rss_bytes"], 2, scale=GIB)])
        if dataset == "synthetic" and pyg and single:
            want = 3.0 if model == "sage" else 1.0
            goals.append(f"- {dataset} {model}: PyG / single {ratio(pyg, single):.2f}x (goal >= {want:g}: "
                         f"{'met' if ratio(pyg, single) >= want else 'NOT met'})")
        if halo and single:
            goals.append(f"- {dataset} {model}: full_halo(1) / single {ratio(halo, single):.2f}x (goal <= 1.1: "
                         f"{'met' if ratio(halo, single) <= 1.1 else 'NOT met'})")
    return ["## Study: the runtime against plain PyTorch Geometric", "",
            "`experiment=runtime`. Median epoch time after warm-up; peak RSS of the process.", "",
            md_table(["dataset", "model", "plain PyG s/epoch", "single s/epoch", "full_halo 1 worker s/epoch",
                      "PyG / single", "full_halo(1) / single", "PyG peak RSS GiB", "single peak RSS GiB"],
                     out_rows), "",
            "Goals:", "", *(goals or ["- (pyg_plain, single and full_halo are not all here)"]), ""]
