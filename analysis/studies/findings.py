"""Study `findings` (experiment=findings): the findings table of docs/findings.md. One row per registered
method, run at the preset's worker count beside its exact control and `single` on the same seeds:

- what it is: its family (the runtime base class it stands on), exact or what it approximates
  (`Method.About.approximates`), and where its paper says it wins (`Method.About.claim`: the paper named first, or
  "description:" for the suite's own baselines), as its records state
  them (`about`, written by the runtime: the report imports no plugin);
- what was measured: its largest rank's training working set against `single`'s, its training
  bytes per epoch against its reference (its exact control, else `full_halo`: the exact exchange at
  the same workers), and its accuracy effect, a paired mean over seeds with a 95 % interval
  (analysis/paired.py) against its exact control, or against `single` where it has none (the
  sampled methods; an exact method's effect is its noise against the oracle).

`csv` is the same table as data: `python -m analysis report <dir> --publish docs/results/findings.md`
writes it beside the page as `findings.csv`, which `python -m analysis advise` reads.

Beside the effect at the preset's P, each approximate method's effect at the largest P the `scaling`
study measured, read from that study's published table (`SCALING`, docs/results/scaling.csv: the
findings' records are at one P only), with the P named; "not measured" where it has none."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import PROJECT_ROOT, figures, paired, records
from analysis.markdown import fmt, image, md_table

#: A run and `single` pair on these (single always runs at one worker); a run and its control on `PAIR_KEYS`.
WITH_SINGLE = ["dataset", "model", "setting", "seed"]
#: The scaling study's published table (analysis/studies/scaling.py `csv`); tests point it elsewhere.
SCALING = PROJECT_ROOT / "docs" / "results" / "scaling.csv"


def at_largest_p(method: str, dataset: str, model: str) -> str:
    """`method`'s effect at the largest P of the scaling study on this dataset and model (METIS first),
    with its P and pairs, from `SCALING`; "not measured" where there is none."""
    if not SCALING.exists():
        return "not measured"
    t = pd.read_csv(SCALING)
    t = t[(t["method"] == method) & (t["dataset"] == dataset) & (t["model"] == model) & t["effect_pt"].notna()]
    if t.empty:
        return "not measured"
    t = t.assign(metis=t["partitioner"] == "metis").sort_values(["metis", "workers"])
    r = t.iloc[-1]
    low, high = r["effect_low_pt"], r["effect_high_pt"]
    noise = "" if low > 0 or high < 0 else ", " + paired.reading(low, high)
    return (f"{r['effect_pt']:+.1f} [{r['effect_low_pt']:+.1f}, {r['effect_high_pt']:+.1f}] "
            f"({int(r['pairs'])}{noise}) at P={int(r['workers'])}")


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (dataset, model, method) of the methods run at their defaults: a record whose
    variant is its method's plain name (a control, `bns_gcn boundary_fraction=1.0`, is a reference,
    not a row). What each method is comes from its records (`about`), not from importing it."""
    runs = records.runs(recs)
    about = records.abouts(recs)
    ok = runs[runs["status"] == "ok"]
    timing = records.time_to_accuracy(records.history(recs), ok)
    rows = []
    for (dataset, model, setting, variant), g in ok.groupby(["dataset", "model", "setting", "variant"], sort=True):
        if variant != g["method"].iloc[0]:  # a control, or a method at other options
            continue
        a = about.get(g["method"].iloc[0], {})
        kind = a.get("kind", "exact" if g["control"].isna().all() else "approximate")
        workers = int(g["workers"].max())
        here = ok[(ok["dataset"] == dataset) & (ok["model"] == model) & (ok["setting"] == setting)]
        control = g["control"].dropna()
        against = control.iloc[0] if kind == "approximate" and len(control) else "single"
        keys = WITH_SINGLE if against == "single" else paired.PAIR_KEYS  # single runs at one worker
        effect = paired.effect(paired.differences(here, variant, against, "test_acc", keys=keys))
        # bytes against the control's, or the exact exchange at the same P (single moves none across ranks)
        bytes_ref = against if kind == "approximate" and (against != "single" or workers == 1) else "full_halo"
        ref_bytes = here[(here["variant"] == bytes_ref) & (here["workers"] == workers)]["comm_bytes_per_epoch"].mean()
        single_ws = here[here["variant"] == "single"]["train_mem_bytes"].mean()
        reached = timing[timing["run"].isin(g["run"])]
        epochs = reached["epoch_to_target"].dropna()
        rows.append({"method": variant, "family": a.get("family", "?"), "exactness": kind,
                     "approximates": a.get("approximates", ""), "claim": a.get("claim", ""),
                     "reference": "" if variant == against else against,
                     "dataset": dataset, "model": model, "workers": workers, "seeds": len(g),
                     "test_acc": g["test_acc"].mean(), "test_acc_std": g["test_acc"].std(ddof=1),
                     # epochs to the target (`records.time_to_accuracy`: 95 % of the best validation
                     # accuracy any run of this dataset, model and setting reached), median over the
                     # seeds that reached it; an epoch is the method's own (a pass over the training
                     # nodes for the mini-batch and subgraph families, a round of local steps for the
                     # local-round ones, a full-graph step for the rest)
                     "target_val_acc": reached["target"].iloc[0] if len(reached) else math.nan,
                     "epochs_to_target": epochs.median() if len(epochs) else math.nan,
                     "missed_target": len(g) - len(epochs),
                     "effect": effect if variant != against else None,
                     "at_largest_p": at_largest_p(variant, dataset, model) if kind == "approximate" else "",
                     "ws_vs_single": g["train_mem_bytes"].mean() / single_ws if single_ws else math.nan,
                     "bytes_reference": bytes_ref, "bytes_per_epoch": g["comm_bytes_per_epoch"].mean(),
                     "bytes_vs_reference": (g["comm_bytes_per_epoch"].mean() / ref_bytes
                                            if variant != bytes_ref and ref_bytes and ref_bytes == ref_bytes
                                            else math.nan)})
    t = pd.DataFrame(rows)
    t.attrs["groups"] = runs.attrs["groups"]  # the figure's colours
    return t


def csv(recs: list[dict]) -> pd.DataFrame:
    """The table as data (docs/results/findings.csv): effects in points, empty where none."""
    t = table(recs)
    if t.empty:
        return t
    return pd.DataFrame({
        "method": t["method"], "family": t["family"], "exactness": t["exactness"], "reference": t["reference"],
        "dataset": t["dataset"], "model": t["model"], "workers": t["workers"], "seeds": t["seeds"],
        "test_acc": t["test_acc"].round(4),
        "effect_pt": [paired.points(e, "mean") for e in t["effect"]],
        "effect_low_pt": [paired.points(e, "low") for e in t["effect"]],
        "effect_high_pt": [paired.points(e, "high") for e in t["effect"]],
        "at_largest_p": t["at_largest_p"],
        "ws_vs_single": t["ws_vs_single"].round(3), "bytes_vs_control": t["bytes_vs_reference"].round(3),
        "bytes_per_epoch": t["bytes_per_epoch"].round(0),
        "target_val_acc": t["target_val_acc"].round(4), "epochs_to_target": t["epochs_to_target"],
        "missed_target": t["missed_target"]})


def _what(r) -> str:
    if r["exactness"] == "exact":
        return "exact"
    return f"{r['exactness']}: {r['approximates']}" if r["approximates"] else r["exactness"]


def _effect(r) -> str:
    e = r["effect"]
    if e is None:
        return "(the reference)"
    return f"{e.text()} vs `{r['reference']}`"


def markdown(t: pd.DataFrame) -> str:
    return md_table(["method", "family", "exact, or what it approximates", "train WS/rank × single",
                     "bytes/epoch × reference", "accuracy effect, pt [95 % CI] (pairs)",
                     "effect at the largest P measured (scaling)", "test acc %", "where its paper says it wins"],
                    [[f"`{r['method']}`", r["family"], _what(r), fmt(r["ws_vs_single"], 2),
                      (f"{fmt(r['bytes_vs_reference'], 3)} × `{r['bytes_reference']}`"
                       if r["bytes_vs_reference"] == r["bytes_vs_reference"] else
                       f"{fmt(r['bytes_per_epoch'], 2, scale=1e6)} MB"),
                      _effect(r), r["at_largest_p"] or "–", fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"]),
                      r["claim"]]
                     for r in t.to_dict("records")])


def headlines(t: pd.DataFrame) -> list[str]:
    """In words, the intervals that exclude 0, with the page's multiplicity: no correction is applied
    here, so each is "excludes 0 at 5 %, uncorrected" beside the count expected by chance."""
    compared = [r["effect"] for r in t.to_dict("records") if r["effect"] is not None and r["effect"].n >= 2]
    lines = [f"- {len(compared)} comparisons, no multiplicity correction: about {0.05 * len(compared):.1f} would "
             "exclude 0 at 5 % by chance alone"]
    for r in t.to_dict("records"):
        e = r["effect"]
        if e is not None and e.resolved:
            side = "above" if e.mean > 0 else "below"
            lines.append(f"- {r['dataset']}: `{r['method']}` is {side} `{r['reference']}` by {e.text()} pt "
                         "(excludes 0 at 5 %, uncorrected)")
    return lines if len(lines) > 1 else lines + ["- no interval excludes 0"]


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    if t.empty:
        return ["## Study: findings", "", "(no successful runs of a registered method at its defaults)", ""]
    parts = ["## Study: findings (every method against its reference)", "",
             "`experiment=findings`. One row per method at its default options. *train WS/rank × single*: the "
             "largest rank's training working set over `single`'s (the whole graph in one process), means over "
             "seeds. *bytes/epoch × reference*: training bytes per epoch, all ranks, over its exact control's, "
             "or, for a method without one, over `full_halo`'s at the same workers (a method that sends nothing "
             "shows 0; `single` and `pyg_plain`, which have no exchange, show their MB). *accuracy effect*: test "
             "accuracy at the best validation epoch, the method minus its reference seed by seed, mean with a "
             "95 % Student-t interval, read by the rule of docs/analysis.md (\"within noise\": it contains 0 and lies "
             "within ±1 point; \"not resolved\": it contains 0 and is wider). The reference is the exact control "
             "(the same method with its approximation off, same layer 0, partition and seeds) for an approximate "
             "method and `single` for the others. Every draw of training is keyed by node, never by rank "
             "(benchmarks/core/draws.py), so an exact method's effect against the oracle is 0 with an interval of 0, "
             "and a method and its control share each seed's dropout masks. *effect at the largest P measured*: "
             "the same effect from the `scaling` study (docs/results/scaling.md), at the largest P it ran. "
             "The last column (`Method.About.claim`) is "
             "the claim of the paper it names, or, where it starts \"description:\", the suite's own description of "
             "a method no paper claims for; not a measurement: the measured columns say whether this graph "
             "shows it.", ""]
    for (dataset, model), g in t.groupby(["dataset", "model"], sort=True):
        parts += [f"### {dataset} · {model} · {int(g['workers'].max())} workers", "", markdown(g), ""]
    parts += ["The intervals that exclude 0:", "", *headlines(t), ""]
    parts += [image(figures.effect_vs_bytes(t, out_dir / "figures" / "findings"), out_dir), ""]
    return parts
