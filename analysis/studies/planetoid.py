"""Study `planetoid` (experiment=planetoid_baselines_full): the single-process oracle in each paper's
whole regime on the Planetoid graphs, beside the papers' numbers and beside the same runs on raw
features.

Per dataset and model:
- the test accuracy of the model each run's stopping rule reports (`benchmarks/run/stopping.py`), the mean
  over seeds with a 95 % Student-t interval of that mean, in the regime's preprocessing
  (`dataset.transform=row_normalize`) and on raw features (`none`);
- the preprocessing's effect, row-normalised minus raw, paired seed by seed (analysis/paired.py), read
  by `paired.verdict` with Holm's correction over the page's rows (TOST at `paired.MARGIN_POINTS`);
- the published numbers of table `planetoid_baselines` (results/reference/papers.csv) for that dataset
  and model, each with the keys of its `config` the runs do not equal, and whether the published mean
  lies inside the measured interval. A paper's mean is of its own runs (100 for GCN and GAT), so "inside"
  says the two agree within this page's seed noise, not that they are equal;
- the epochs the runs trained (a stopping rule ends them early) and the epoch of the model reported.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import paired, records, reference
from analysis.markdown import fmt, md_table

KEYS = ["dataset", "model", "setting", "seed"]  # one process each
REGIME, RAW = "row_normalize", "none"
TABLE = "planetoid_baselines"


def _transform(config: dict) -> str:
    return (config.get("dataset") or {}).get("transform", RAW)


def _mean(values) -> paired.Effect:
    """The mean of `values` with a 95 % t interval (an `Effect` of the values themselves)."""
    return paired.effect(list(values))


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (dataset, model): each transform's mean and interval, the paired effect, the papers."""
    runs = records.runs(recs)
    selected = {Path(r["_path"]).stem: (r.get("summary") or {}).get("selected_epoch") for r in recs if "_path" in r}
    runs["selected_epoch"] = runs["run"].map(lambda run: selected.get(run))
    ok = runs[runs["status"] == "ok"].copy()
    ok["transform"] = ok["config"].map(_transform)
    ref = reference.load_reference()
    ref = ref[(ref["table"] == TABLE) & (ref["metric"] == "test_accuracy")]
    rows = []
    for (dataset, model), here in ok.groupby(["dataset", "model"], sort=True):
        by = {t: g for t, g in here.groupby("transform")}
        regime, raw = by.get(REGIME), by.get(RAW)
        effect = None
        if regime is not None and raw is not None:
            d = paired.differences(here, regime["variant"].iloc[0], raw["variant"].iloc[0], "test_acc", keys=KEYS)
            effect = (paired.effect(d), paired.p_value(d), d)
        papers = []
        for _, r in ref[(ref["dataset"].str.lower() == dataset) & (ref["family"] == model)].iterrows():
            row_config = reference.parse_config(r["config"])
            differs = reference.differences(row_config, regime["config"].iloc[0]) if regime is not None else []
            papers.append({"source": r["source"], "value": float(r["value"]), "differs": differs})
        rows.append({"dataset": dataset, "model": model,
                     "regime": _mean(regime["test_acc"]) if regime is not None else None,
                     "raw": _mean(raw["test_acc"]) if raw is not None else None,
                     "effect": effect[0] if effect else None, "p": effect[1] if effect else float("nan"),
                     "differences": effect[2] if effect else None,
                     "epochs": regime["epochs_run"].mean() if regime is not None else float("nan"),
                     "selected_epoch": regime["selected_epoch"].mean() + 1 if regime is not None else float("nan"),
                     "stopping": regime["config"].iloc[0].get("stopping", "none") if regime is not None else "",
                     "papers": papers})
    t = pd.DataFrame(rows)
    if len(t):
        t["holm"] = paired.holm(list(t["p"]))
        t["verdict"] = paired.verdicts(list(t["differences"]))
    return t


def _interval(e: paired.Effect | None) -> str:
    if e is None or e.n == 0:
        return "–"
    if e.n < 2:
        return f"{100 * e.mean:.1f} (1 seed)"
    return f"{100 * e.mean:.1f} [{100 * e.low:.1f}, {100 * e.high:.1f}] ({e.n})"


def _effect(r) -> str:
    v = r["verdict"]
    return "–" if v is None or v.n < 2 else v.text


def _paper(p: dict, measured: paired.Effect | None) -> str:
    inside = ""
    if measured is not None and measured.n >= 2:
        inside = "inside" if 100 * measured.low <= p["value"] <= 100 * measured.high else "outside"
        inside = f", {inside} the interval"
    differs = f"; differs: {', '.join(p['differs'])}" if p["differs"] else "; every key it records followed"
    return f"{p['value']:.1f} ({p['source']}{inside}{differs})"


def markdown(t: pd.DataFrame) -> str:
    return md_table(["dataset", "model", "stopping", "epochs run (mean)", "model of epoch (mean)",
                     "test %, regime [95 % CI] (seeds)", "test %, raw features [95 % CI] (seeds)",
                     "row-normalised - raw: verdict", "published test %"],
                    [[r["dataset"], r["model"], r["stopping"], fmt(r["epochs"], 0), fmt(r["selected_epoch"], 0),
                      _interval(r["regime"]), _interval(r["raw"]), _effect(r),
                      "<br>".join(_paper(p, r["regime"]) for p in r["papers"]) or "–"]
                     for r in t.to_dict("records")])


def csv(recs: list[dict]) -> pd.DataFrame:
    """The page's data: one row per (dataset, model, published row)."""
    t = table(recs)
    rows = []
    for r in t.to_dict("records"):
        base = {"dataset": r["dataset"], "model": r["model"], "stopping": r["stopping"]}
        for name in ("regime", "raw", "effect"):
            e = r[name]
            base.update({f"{name}_n": e.n if e else 0, f"{name}_mean_pt": paired.points(e, "mean"),
                         f"{name}_low_pt": paired.points(e, "low"), f"{name}_high_pt": paired.points(e, "high")})
        base["effect_holm"] = bool(r["holm"])
        base["effect_verdict"] = r["verdict"].word if r["verdict"] is not None else ""
        for p in r["papers"] or [{"source": "", "value": float("nan"), "differs": []}]:
            rows.append({**base, "paper_source": p["source"], "paper_pt": p["value"],
                         "paper_differs": "; ".join(p["differs"])})
    return pd.DataFrame(rows)


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    title = "## Study: the Planetoid baselines in each paper's regime, beside raw features"
    if t.empty:
        return [title, "", "(no successful runs)", ""]
    words = [v.word for v in t["verdict"] if v is not None and v.n >= 2]
    read = ", ".join(f"{words.count(w)} {w}" for w in dict.fromkeys(words)) or "none"
    effects = int(sum(r["effect"] is not None and r["effect"].n >= 2 for r in t.to_dict("records")))
    return [title, "",
            "`python -m benchmarks.commands.sweep experiment=planetoid_baselines_full dataset=cora,citeseer`. "
            "`single`, "
            "each model in its paper's whole regime (the preset's `regime` lists each item, followed or a "
            "deviation): GCN stops on Kipf & Welling's window of 10 epochs on the validation loss, GAT on "
            "Velickovic et al.'s patience of 100; GraphSAGE trains 200 epochs. The test accuracy is that of the "
            "model each run's stopping rule reports (GraphSAGE: the best validation accuracy's). Intervals: 95 % "
            "Student-t of the mean over seeds; the preprocessing's effect is paired seed by seed and read by the "
            "suite's verdict (`paired.verdict`, docs/analysis.md \"The verdict\": Holm's correction over the "
            f"{effects} rows, TOST at ±{paired.MARGIN_POINTS:g} pt): {read}. "
            "A published mean is of the paper's own runs (100 for GCN and GAT); \"inside the interval\" says the "
            "two agree within this page's seed noise. \"differs\" lists the keys of the published row's `config` "
            "that the regime's runs do not equal (results/reference/papers.csv).", "",
            markdown(t), ""]
