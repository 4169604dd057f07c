"""Study `gas` (experiment=gas): GNNAutoScale on one device against full-batch `single`, its exact
control, and against `cluster_gcn` on the same clusters and batches, which drops the edges to
out-of-batch nodes where GAS reads their histories (docs/gas.md).

Per dataset: test accuracy over seeds; GAS's effect against `single` and against `cluster_gcn`, each
paired seed by seed and read by `paired.verdict` (Holm over the page's effects, TOST at
`paired.MARGIN_POINTS`), so the first is the histories' approximation and the second what the
histories buy over dropping the cut edges; the training working set against `single`'s (the
device's share, the point of the method); the history tables (host memory) and the host <-> device
bytes an epoch moves (`history_pull` + `history_push`; the refresh before each epoch, `history_fill`,
apart). No epoch time: the sweep's runs share this machine's two
cores with whatever else runs (docs/measurement.md)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import paired, records
from analysis.markdown import fmt, md_table

ORACLE, METHOD, NEAREST = "single", "gas", "cluster_gcn"
KEYS = ["dataset", "model", "setting", "seed"]  # one process each: workers is 1 for all three
PER_EPOCH = ("history_pull", "history_push")


def _history_bytes(record: dict) -> float:
    ranks = (record.get("summary") or {}).get("per_rank") or [{}]
    return float(ranks[0].get("history_bytes", 0.0))


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (dataset, model, setting, method): means over seeds, GAS's paired effects."""
    runs = records.runs(recs)
    history = {Path(r["_path"]).stem: _history_bytes(r) for r in recs if "_path" in r}
    runs["history_bytes"] = runs["run"].map(lambda run: history.get(run, 0.0))
    ok = runs[runs["status"] == "ok"]
    rows = []
    for (dataset, model, setting), here in ok.groupby(["dataset", "model", "setting"], sort=True):
        oracle = here[here["method"] == ORACLE]
        variant_of = {m: g["variant"].iloc[0] for m, g in here.groupby("method")}
        for method in (ORACLE, METHOD, NEAREST):
            g = here[here["method"] == method]
            if g.empty:
                continue
            variant = variant_of[method]

            def against(other):
                if method != METHOD or other not in variant_of:
                    return None
                return paired.differences(here, variant, variant_of[other], "test_acc", keys=KEYS)

            by_category = list(g["comm_by_category"])
            rows.append({"dataset": dataset, "model": model, "variant": variant, "method": method, "seeds": len(g),
                         "test_acc": g["test_acc"].mean(), "test_acc_std": g["test_acc"].std(ddof=1),
                         "d_single": against(ORACLE), "d_nearest": against(NEAREST),
                         "ws_vs_single": (g["train_mem_bytes"].mean() / oracle["train_mem_bytes"].mean()
                                          if len(oracle) else float("nan")),
                         "history_bytes": g["history_bytes"].mean(),
                         "copied_per_epoch": sum(sum(c.get(k, 0.0) for k in PER_EPOCH) for c in by_category)
                                             / len(by_category),
                         "fill_per_epoch": sum(c.get("history_fill", 0.0) for c in by_category) / len(by_category)})
    t = pd.DataFrame(rows)
    if len(t):  # one Holm family: every effect on the page (two a dataset)
        read = paired.verdicts([*t["d_single"], *t["d_nearest"]])
        t["vs_single"], t["vs_nearest"] = read[:len(t)], read[len(t):]
    return t


def comparisons(t: pd.DataFrame) -> int:
    """The effects on the page with an interval (the multiplicity Holm corrects for)."""
    return int(sum(v is not None and v.n >= 2 for col in ("vs_single", "vs_nearest") for v in t[col]))


def headlines(t: pd.DataFrame) -> list[str]:
    lines = []
    for r in t[t["method"] == METHOD].to_dict("records"):
        for name, v, other in (("histories' approximation", r["vs_single"], ORACLE),
                               ("histories over dropped edges", r["vs_nearest"], NEAREST)):
            if v is not None and v.n >= 2:
                lines.append(f"- {r['dataset']}: `{r['variant']}` minus `{other}` ({name}): {v.text}")
    return lines or ["- (no gas run paired with single or cluster_gcn)"]


def markdown(t: pd.DataFrame) -> str:
    def effect(v):
        return "–" if v is None else v.text

    return md_table(["dataset", "method", "seeds", "test acc %", "gas - single: verdict",
                     "gas - cluster_gcn: verdict", "train WS x single", "histories MB (host)",
                     "host<->device MB/epoch", "+ refresh MB/epoch"],
                    [[r["dataset"], r["variant"], r["seeds"], fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"]),
                      effect(r["vs_single"]), effect(r["vs_nearest"]), fmt(r["ws_vs_single"], 2),
                      fmt(r["history_bytes"], 3, scale=1e6), fmt(r["copied_per_epoch"], 3, scale=1e6),
                      fmt(r["fill_per_epoch"], 3, scale=1e6)] for r in t.to_dict("records")])


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    title = "## Study: GNNAutoScale (histories on one device) against full-batch and Cluster-GCN"
    if t.empty:
        return [title, "", "(no successful runs)", ""]
    return [title, "",
            "`python -m benchmarks.commands.sweep experiment=gas`. Test accuracy at the best validation epoch, "
            "mean ± standard deviation over seeds. GAS's effects are paired seed by seed with a 95 % Student-t "
            "interval, in points: against `single` (full-batch, its exact control: the histories' approximation) "
            "and against `cluster_gcn` on the same clusters and batches (cut edges dropped instead of read from "
            "histories). Train WS: the training working set over `single`'s. Histories: the host-resident "
            "tables; host<->device: the history rows an epoch's steps pull and push, and apart the refresh "
            "before each epoch (`fill_history=epoch`). Each effect reads by the suite's verdict "
            "(`paired.verdict`, docs/analysis.md, \"The verdict\"): it costs or gains where its interval "
            f"excludes 0 after Holm's correction over the page's {comparisons(t)} effects (about "
            f"{0.05 * comparisons(t):.1f} would exclude 0 at 5 % by chance alone), is equivalent within "
            f"±{paired.MARGIN_POINTS:g} pt where TOST passes at that margin (declared before the runs), else is "
            f"not resolved, with the seeds a ±{paired.HEADLINE_HALF_WIDTH_POINTS:g} pt half-width needs.", "",
            markdown(t), "", *headlines(t), ""]
