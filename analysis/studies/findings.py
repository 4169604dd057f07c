"""Study `findings` (experiment=findings): the findings table of docs/findings.md, at convergence. Every
registered method at the preset's worker count beside its exact control and `single` on the same seeds, each run
trained to a validation plateau (the preset's stopping rule, with `epochs` as the cap, the same for a method and
its reference), plus the preset's attribution rows and each paper's own comparator:

- what it is: its family (the runtime base class it stands on), exact or what it approximates
  (`Method.About.approximates`), and where its paper says it wins (`Method.About.claim`), as its records state
  them (`about`, written by the runtime: the report imports no plugin); its largest rank's training working set
  against `single`'s, its training bytes per epoch against its reference (its exact control, else `full_halo`);
- its accuracy at the plateau: the test effect against its reference (exact control, else `single`), read by
  `paired.verdict` with the margin the preset declares (`study_margin_pt`) and Holm's correction over every
  comparison of the page; the validation effect of the same models beside it; the seeds a 95 % half-width of
  `paired.HEADLINE_HALF_WIDTH_POINTS` would need; where its paper compared against another method
  (`COMPARATORS`: LLCG's Table 1 sets LLCG and PSGD-PA beside GGS), the effect against that one too;
- how fast: epochs and optimiser steps to the validation target (`records.time_to_accuracy`: 95 % of the best
  validation accuracy any run of the dataset, model and setting reached), medians over the seeds that reached it;
- the rows that attribute (`ISOLATES`, run by the preset's `sweep.variants`): a variant, or a method on another
  partitioner, each beside its own exact control, naming the cause it isolates; and beside them the partitions'
  regime statistics (each record's `partition` section: halo rows per node, cut fraction, training nodes per part,
  label skew), means over the seeds' partitions.

`csv` is the table of the methods at their defaults as data: `python -m analysis report <dir> --publish
docs/results/findings.md` writes it beside the page as `findings.csv`, which `python -m analysis advise` reads.

Beside the effect at the preset's P, each approximate method's effect at the largest P the `scaling` study
measured, read from that study's published table (`SCALING`, docs/results/scaling.csv), with the P named."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from analysis import PROJECT_ROOT, figures, paired, records
from analysis.markdown import fmt, image, md_table

#: A run and `single` pair on these (single always runs at one worker); a run and its control on `PAIR_KEYS`.
WITH_SINGLE = ["dataset", "model", "setting", "seed"]


def against_reference(pool: pd.DataFrame, variant: str, against: str, column: str = "test_acc") -> pd.Series:
    """`column` of `variant` minus `against`'s, seed by seed (`paired.paired_differences`), in `pool`: a run and its
    control pair at the same workers; `single`, which runs once at one worker, pairs with a run at any P."""
    keys = WITH_SINGLE if against == "single" else paired.PAIR_KEYS
    return paired.paired_differences(pool, variant, against, column, keys=keys)
#: The scaling study's published table (analysis/studies/scaling.py `csv`); tests point it elsewhere.
SCALING = PROJECT_ROOT / "docs" / "results" / "scaling.csv"
#: A method's own paper's comparator where the paper set it beside another method than its exact control:
#: LLCG's Table 1 (Ramezani et al., ICLR 2022) compares LLCG and PSGD-PA with GGS (`ggs`), not with full-graph training.
COMPARATORS = {"llcg": "ggs", "psgd_pa": "ggs"}
#: LLCG's own measure (Table 1, arXiv 2111.08202): the share of PSGD-PA's accuracy loss against GGS that LLCG's
#: server correction recovers, (LLCG - PSGD-PA) / (GGS - PSGD-PA); read where the three ran at one P.
RECOVERY = {"method": "llcg", "without": "psgd_pa", "comparator": "ggs", "table": "llcg_table1"}
#: A regime: the scaling page's own section and its own family for Holm's correction (the question "what does
#: each approximation cost here?" is asked once per regime; adding a regime does not weaken another's verdicts).
REGIME_KEYS = ["dataset", "model", "partitioner"]
#: A paper's own accuracy claim in points, where it states a number: the row of the method at its defaults is
#: tested against it (`paired.verdict`'s `claim_pt`: equivalence within it, or "untestable here" with the seeds
#: it would take) instead of the page's margin. AdaQP (Wan, Zhao, Wu, MLSys 2023; arXiv 2306.01381, abstract):
#: "an accuracy drop of at most 0.3 %" against vanilla full-graph training (../shared/reference/reference_numbers.csv).
CLAIMS = {"adaqp": 0.3}
#: The attribution rows conf/experiment/findings.yaml adds (`sweep.variants`), by row name, and the cause each
#: isolates; each is read against its own exact control, like every row.
ISOLATES = {
    "llcg correction_steps=8": "the server correction's share: 8 correction steps a round instead of 1",
    "bns_gcn boundary_fraction=0": "dropped halo rows: no boundary row in layers >= 1 (against p = 1, its control)",
    "psgd_pa on random parts": "label skew: random parts hold each part's training labels near the global mix "
                               "(at a larger cut; compare the regime table)",
}
#: The partition statistics shown beside the rows (`benchmarks.core.partition.REGIME_KEYS` less the per-rank list).
REGIME = ("halo_rows_per_node", "cut_fraction", "train_nodes_min", "train_nodes_mean", "train_nodes_max",
          "label_skew_mean", "label_skew_max")



def recovered_share(t: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, model, partitioner, P) where RECOVERY's three methods ran at their defaults (rows of the
    findings' or the scaling study's table, each with `acc_by_seed`): the comparator's gain over the method
    without the correction, the method's gain over it (seed by seed, the runs' own test accuracies), and their
    ratio with Fieller's interval (`paired.ratio`)."""
    names = [RECOVERY[k] for k in ("method", "without", "comparator")]
    rows = []
    if t.empty:
        return pd.DataFrame(rows)
    for (dataset, model, partitioner, workers), g in t[t["default"]].groupby([*REGIME_KEYS, "workers"], sort=True):
        by = {r["method"]: r["acc_by_seed"] for r in g.to_dict("records")}
        if not all(name in by for name in names):
            continue
        method, without, comparator = (by[name] for name in names)
        seeds = sorted(set(method) & set(without) & set(comparator))
        gain = [method[s] - without[s] for s in seeds]
        loss = [comparator[s] - without[s] for s in seeds]
        rows.append({"dataset": dataset, "model": model, "partitioner": partitioner, "workers": int(workers),
                     "gain": paired.effect(gain), "loss": paired.effect(loss), "share": paired.ratio(gain, loss)})
    return pd.DataFrame(rows)


def paper_shares() -> list[float]:
    """The share RECOVERY's table reports on each of its (graph, model) rows, from the published test
    accuracies (results/reference/papers.csv)."""
    from analysis.reference import load_reference

    ref = load_reference()
    ref = ref[(ref["table"] == RECOVERY["table"]) & ref["metric"].str.startswith("test_")]
    shares = []
    for _, g in ref.groupby(["dataset", "model"], sort=True):
        value = {m.lower().replace("-", "_"): float(v) for m, v in zip(g["method"], g["value"])}
        method, without, comparator = (value.get(RECOVERY[k]) for k in ("method", "without", "comparator"))
        if None not in (method, without, comparator) and comparator != without:
            shares.append((method - without) / (comparator - without))
    return shares


def recovered_markdown(r: pd.DataFrame) -> list[str]:
    method, without, comparator = (RECOVERY[k] for k in ("method", "without", "comparator"))
    shares = sorted(paper_shares())
    published = (f"its {len(shares)} graph-model rows recover {100 * shares[0]:.0f}-{100 * shares[-1]:.0f} % "
                 f"(median {100 * float(pd.Series(shares).median()):.0f} %; results/reference/papers.csv)"
                 if shares else "its rows are not in results/reference/papers.csv")
    return [f"### {method}'s own measure: the share of `{without}`'s loss to `{comparator}` it recovers", "",
            f"LLCG's Table 1 reads ({method} − {without}) / ({comparator} − {without}): the share of what the "
            f"local rounds lose against `{comparator}` (neighbours sampled from the whole graph) that the server's "
            f"correction wins back; {published}, on Flickr, ogbn-proteins, ogbn-arxiv and Reddit at 8 workers, "
            "thousands of training nodes a part. Other graphs, another regime: compare the shape, not the "
            "number. Here each share is the ratio of the two paired means, seed by seed on the runs' own test "
            "accuracy, with Fieller's 95 % interval (`paired.ratio`), unbounded where the denominator's interval "
            "reaches 0.", "",
            md_table(["regime", "P", f"`{comparator}` − `{without}`, pt", f"`{method}` − `{without}`, pt",
                      "share recovered"],
                     [[f"{x['dataset']} · {x['model']} · {x['partitioner']}", x["workers"], paired.interval(x["loss"]),
                       paired.interval(x["gain"]), x["share"].text()]
                      for x in r.sort_values(["partitioner", "workers"]).to_dict("records")]), ""]


#: The former page's fixed budget, kept as a secondary view (`records.test_at_budget`).
FIXED_BUDGET_EPOCHS = 100


def fixed_budget_words(epochs: int) -> str:
    """How a page names the secondary view of `epochs` epochs."""
    every = records.BUDGET_CHECK_EVERY
    return (f"*fixed budget*, a secondary view: the former page's effect, the test accuracy at the best of "
            f"{epochs // every} validation checks in the first {epochs} epochs (one every {every}th), read from the "
            "same runs' histories (a run's first epochs do not depend on its cap), minus its reference's: it mixes "
            "how fast a method learns with where it ends, so no verdict is read from it.")


def at_largest_p(method: str, dataset: str, model: str) -> str:
    """`method`'s effect at the largest P of the scaling study on this dataset and model (METIS first),
    with its P, pairs and the scaling page's own verdict word where its table states one, from `SCALING`;
    "not measured" where there is none."""
    if not SCALING.exists():
        return "not measured"
    t = pd.read_csv(SCALING)
    t = t[(t["method"] == method) & (t["dataset"] == dataset) & (t["model"] == model) & t["effect_pt"].notna()]
    if t.empty:
        return "not measured"
    t = t.assign(metis=t["partitioner"] == "metis").sort_values(["metis", "workers"])
    r = t.iloc[-1]
    low, high = r["effect_low_pt"], r["effect_high_pt"]
    stated = r.get("verdict")
    if isinstance(stated, str) and stated:  # the page's verdict (Holm over its rows, TOST at its margin)
        noise = f", {stated}"
    else:  # a table from before the verdicts
        noise = "" if low > 0 or high < 0 else ", " + paired.reading(low, high)
    return (f"{r['effect_pt']:+.1f} [{r['effect_low_pt']:+.1f}, {r['effect_high_pt']:+.1f}] "
            f"({int(r['pairs'])}{noise}) at P={int(r['workers'])}")


def _name(variant: str) -> str:
    """A variant as ISOLATES names it: `boundary_fraction=0.0` and `=0` are one option value."""
    return re.sub(r"=(-?\d+)\.0\b", r"=\1", variant)


def regime(recs: list[dict]) -> pd.DataFrame:
    """Per (dataset, setting, workers): the partitions' regime statistics (`REGIME`), means over the seeds'
    partitions (a seed's partition is shared by every run of that seed), and how many partitions."""
    seen, rows = set(), []
    for r in recs:
        part = r.get("partition")
        key = (r["dataset"], r["setting"], int(r["workers"]), r["seed"])
        if not isinstance(part, dict) or r["status"] != "ok" or key[2] < 2 or key in seen:
            continue  # records from before the statistics, or one-process runs, state none
        stated = {k: float(part[k]) for k in REGIME
                  if isinstance(part.get(k), (int, float)) and not isinstance(part.get(k), bool)}
        if "halo_rows_per_node" not in stated:
            continue
        seen.add(key)
        rows.append({"dataset": key[0], "setting": key[1], "workers": key[2],
                     "partitioner": str(r["config"].get("partitioner", "?")),
                     **{k: stated.get(k, math.nan) for k in REGIME}})
    if not rows:
        return pd.DataFrame(columns=["dataset", "setting", "workers", "partitioner", *REGIME, "partitions"])
    df = pd.DataFrame(rows)
    out = df.groupby(["dataset", "setting", "workers", "partitioner"], sort=True)[list(REGIME)].mean(numeric_only=True)
    out["partitions"] = df.groupby(["dataset", "setting", "workers", "partitioner"], sort=True).size()
    return out.reset_index().sort_values(["dataset", "workers", "partitioner"], ignore_index=True)


def _steps_per_epoch(run: pd.Series) -> float:
    """Optimiser steps a run took per epoch: the steps its ranks state (`records.runs`' `steps`) over its epochs,
    plus LLCG's server correction steps a round (`method.correction_steps`); 1 where it states none (a full-graph
    step an epoch)."""
    local = run["steps"] / run["epochs_run"] if run["steps"] == run["steps"] and run["epochs_run"] else 1.0
    return local + float((run["config"].get("method") or {}).get("correction_steps") or 0)


def how_runs_ended(g: pd.DataFrame, timing: pd.DataFrame) -> dict:
    """How the runs `g` of one row ended: the epochs they trained (median) before the stopping rule ended them,
    the cap (`epochs`) and how many ran to it instead (had not met the rule), and the epochs and optimiser steps
    (`_steps_per_epoch`) to the validation target (`records.time_to_accuracy`'s `timing`; medians over the runs
    that reached it), with how many missed it."""
    reached = timing[timing["run"].isin(g["run"].dropna())]  # a run is its record's file (records.load)
    epochs = reached["epoch_to_target"].dropna()
    per_epoch = g.set_index("seed").apply(_steps_per_epoch, axis=1)
    steps = [e * per_epoch[s] for s, e in zip(reached["seed"], reached["epoch_to_target"]) if e == e]
    cap = g["config"].map(lambda c: c.get("epochs")).max()
    return {"epochs_run": g["epochs_run"].median(), "cap": cap,
            "at_cap": int((g["epochs_run"] >= cap).sum()) if cap == cap else 0,
            "target_val_acc": reached["target"].iloc[0] if len(reached) else math.nan,
            "epochs_to_target": epochs.median() if len(epochs) else math.nan,
            "steps_to_target": pd.Series(steps).median() if steps else math.nan,
            "missed_target": len(g) - len(epochs)}


def regime_at(stats: pd.DataFrame, dataset: str, setting: str, workers: int) -> dict:
    """The partitions' statistics (`REGIME`, from `regime`) of one dataset, setting and P; NaN where none."""
    row = stats[(stats["dataset"] == dataset) & (stats["setting"] == setting) & (stats["workers"] == workers)]
    return {k: (row[k].iloc[0] if len(row) else math.nan) for k in REGIME}


def _main_setting(ok: pd.DataFrame) -> str:
    """The setting of a (dataset, model)'s rows at the preset's defaults: `single`'s, else the one most runs share."""
    single = ok[ok["variant"] == "single"]["setting"]
    return single.iloc[0] if len(single) else ok["setting"].value_counts().index[0]


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (dataset, model, setting, variant) that is not only a reference: every method at its
    defaults, and the preset's attribution rows (a variant, or a method on another partitioner: `ISOLATES`);
    `row` names it. A control (`bns_gcn boundary_fraction=1.0`) is a reference, not a row, and in a setting
    other than the defaults' (`_main_setting`) so is a plain method that is only a control there. What each
    method is comes from its records (`about`), not from importing it. `effect`/`val_effect`: the paired test
    and validation effects (`paired.Effect`) of the reported models; `p`/`comparator_p`: their paired t-tests,
    which `verdicts` corrects over the page."""
    runs = records.runs(recs)
    about = records.abouts(recs)
    records.one_rate_each(runs, "findings")
    ok = runs[runs["status"] == "ok"]
    hist = records.history(recs)
    timing = records.time_to_accuracy(hist, ok)
    ok = ok.assign(test_at_budget=records.test_at_budget(hist, ok, FIXED_BUDGET_EPOCHS))  # a secondary view
    stats = regime(recs)
    rows = []
    for (dataset, model), here_dm in ok.groupby(["dataset", "model"], sort=True):
        main = _main_setting(here_dm)
        default_partitioner = here_dm[here_dm["setting"] == main]["config"].iloc[0].get("partitioner")
        for (setting, variant), g in here_dm.groupby(["setting", "variant"], sort=True):
            method = g["method"].iloc[0]
            here = here_dm[here_dm["setting"] == setting]
            controls = set(here["control"].dropna())
            if variant in controls and (variant != method or setting != main):
                continue  # only a reference here
            partitioner = g["config"].iloc[0].get("partitioner")
            name = variant if partitioner == default_partitioner else f"{variant} on {partitioner} parts"
            a = about.get(method, {})
            kind = a.get("kind", "exact" if g["control"].isna().all() else "approximate")
            workers = int(g["workers"].max())
            control = g["control"].dropna()
            against = control.iloc[0] if kind == "approximate" and len(control) else "single"
            d_test = list(against_reference(here, variant, against, "test_acc"))
            d_val = list(against_reference(here, variant, against, "val_acc"))
            comparator = COMPARATORS.get(method)
            d_cmp = (paired.differences(here, variant, comparator, "test_acc") if comparator else [])
            # bytes against the control's, or the exact exchange at the same P (single moves none across ranks)
            bytes_ref = against if kind == "approximate" and (against != "single" or workers == 1) else "full_halo"
            at_workers = here[here["workers"] == workers]
            ref_bytes = at_workers[at_workers["variant"] == bytes_ref]["comm_bytes_per_epoch"].mean()
            single_ws = here[here["variant"] == "single"]["train_mem_bytes"].mean()
            rows.append({"row": name, "method": variant, "base": method, "family": a.get("family", "?"),
                         "exactness": kind, "approximates": a.get("approximates", ""), "claim": a.get("claim", ""),
                         "isolates": ISOLATES.get(_name(name), ""), "default": name == method,
                         "reference": "" if variant == against else against, "partitioner": partitioner,
                         "dataset": dataset, "model": model, "workers": workers, "seeds": len(g),
                         "lr": g["lr"].iloc[0], "reference_lr": here[here["variant"] == against]["lr"].max(),
                         "test_acc": g["test_acc"].mean(), "test_acc_std": g["test_acc"].std(ddof=1),
                         "acc_by_seed": dict(zip(g["seed"], g["test_acc"])),  # for `recovered_share`
                         "effect": paired.effect(d_test) if variant != against else None,
                         "differences": d_test if variant != against else [],
                         "p": paired.p_value(d_test) if variant != against else math.nan,
                         "val_effect": paired.effect(d_val) if variant != against else None,
                         "budget_effect": (paired.effect(list(against_reference(here, variant, against,
                                                                                "test_at_budget")))
                                           if variant != against else None),
                         "comparator": comparator if comparator and len(d_cmp) else "",
                         "comparator_differences": d_cmp, "comparator_p": paired.p_value(d_cmp),
                         **how_runs_ended(g, timing),
                         "margin_pt": g["config"].apply(lambda c: c.get("study_margin_pt")).dropna().max(),
                         "at_largest_p": at_largest_p(variant, dataset, model) if kind == "approximate" and
                         name == method else "",
                         "ws_vs_single": g["train_mem_bytes"].mean() / single_ws if single_ws else math.nan,
                         "bytes_reference": bytes_ref, "bytes_per_epoch": g["comm_bytes_per_epoch"].mean(),
                         "bytes_vs_reference": (g["comm_bytes_per_epoch"].mean() / ref_bytes
                                                if variant != bytes_ref and ref_bytes and ref_bytes == ref_bytes
                                                else math.nan),
                         **regime_at(stats, dataset, setting, workers)})
    t = pd.DataFrame(rows)
    if not t.empty:  # each method at its defaults, then its attribution rows
        t = t.sort_values(["dataset", "model", "base", "default", "row"], ascending=[True, True, True, False, True],
                          ignore_index=True)
        t = verdicts(t)
    t.attrs["groups"] = runs.attrs["groups"]  # the figure's colours
    t.attrs["regime"] = stats
    return t


def verdicts(t: pd.DataFrame) -> pd.DataFrame:
    """Each row's `verdict` (against its reference) and `comparator_verdict` (against its paper's comparator)
    by `paired.verdict`, at the margin its records declare (`study_margin_pt`; `paired.MARGIN_POINTS` where
    none does; a method's row at its defaults at its paper's own claim, `CLAIMS`: `tested_margin_pt`), with
    Holm's correction over every comparison of the page that has a p-value (both kinds; `holm`, and the count in
    `attrs["comparisons"]`); `seeds_half_width`: the
    seeds a 95 % half-width of `paired.HEADLINE_HALF_WIDTH_POINTS` needs at the row's paired SD (">cap" where
    `paired.SEED_CAP` falls short)."""
    t = t.copy()
    tests = [(i, "differences", "p") for i in t.index if t.at[i, "effect"] is not None] + \
            [(i, "comparator_differences", "comparator_p") for i in t.index if t.at[i, "comparator"]]
    tests = [(i, c, p) for i, c, p in tests if t.at[i, p] == t.at[i, p]]  # a test with fewer than 2 pairs has no p
    rejected = dict(zip([(i, c) for i, c, _ in tests], paired.holm([t.at[i, p] for i, _, p in tests])))
    t["margin_pt"] = t["margin_pt"].fillna(paired.MARGIN_POINTS)
    verdict, cmp_verdict, need, tested = [], [], [], []
    for i in t.index:
        margin = t.at[i, "margin_pt"]
        d = t.at[i, "differences"]
        claim = CLAIMS.get(t.at[i, "base"]) if t.at[i, "default"] else None
        tested.append(claim or margin)
        verdict.append(paired.verdict(d, rejected=rejected.get((i, "differences"), False), margin_pt=margin,
                                      claim_pt=claim) if t.at[i, "effect"] is not None else None)
        cmp_verdict.append(paired.verdict(t.at[i, "comparator_differences"], margin_pt=margin,
                                          rejected=rejected.get((i, "comparator_differences"), False))
                           if t.at[i, "comparator"] else None)
        sd = pd.Series(d, dtype=float).std(ddof=1) * 100 if len(d) >= 2 else math.nan
        plan = paired.seeds_for_half_width(sd, paired.HEADLINE_HALF_WIDTH_POINTS) if sd == sd else None
        need.append("" if plan is None else f"{'>' if plan.capped else ''}{plan.n}")
    t["verdict"], t["comparator_verdict"], t["seeds_half_width"] = verdict, cmp_verdict, need
    t["tested_margin_pt"] = tested  # the equivalence margin the verdict tested: a paper's claim where it states one
    t["holm"] = [rejected.get((i, "differences"), False) for i in t.index]  # the interval excludes 0 after Holm
    t.attrs["comparisons"] = len(tests)
    return t


def csv(recs: list[dict]) -> pd.DataFrame:
    """The methods at their defaults as data (docs/results/findings.csv): effects in points (the plateau's test
    effect; `val_effect_pt` the validation's), empty where none; the verdict's word and the regime's statistics."""
    t = table(recs)
    if t.empty:
        return t
    t = t[t["default"]]
    return pd.DataFrame({
        "method": t["method"], "family": t["family"], "exactness": t["exactness"], "reference": t["reference"],
        "dataset": t["dataset"], "model": t["model"], "workers": t["workers"], "seeds": t["seeds"],
        "test_acc": t["test_acc"].round(4),
        "effect_pt": [paired.points(e, "mean") for e in t["effect"]],
        "effect_low_pt": [paired.points(e, "low") for e in t["effect"]],
        "effect_high_pt": [paired.points(e, "high") for e in t["effect"]],
        "verdict": [v.word if v is not None else "" for v in t["verdict"]],
        "margin_pt": t["margin_pt"], "seeds_for_half_width": t["seeds_half_width"],
        "val_effect_pt": [paired.points(e, "mean") for e in t["val_effect"]],
        "at_largest_p": t["at_largest_p"],
        "ws_vs_single": t["ws_vs_single"].round(3), "bytes_vs_control": t["bytes_vs_reference"].round(3),
        "bytes_per_epoch": t["bytes_per_epoch"].round(0),
        "target_val_acc": t["target_val_acc"].round(4), "epochs_to_target": t["epochs_to_target"],
        "steps_to_target": t["steps_to_target"], "missed_target": t["missed_target"],
        "epochs_run": t["epochs_run"], "partitioner": t["partitioner"],
        **{k: t[k].round(4) for k in REGIME}})


def _what(r) -> str:
    if r["exactness"] == "exact":
        return "exact"
    return f"{r['exactness']}: {r['approximates']}" if r["approximates"] else r["exactness"]


def markdown(t: pd.DataFrame) -> str:
    """What each method at its defaults is and costs."""
    return md_table(["method", "family", "exact, or what it approximates", "train WS/rank × single",
                     "bytes/epoch × reference", "effect at the largest P measured (scaling page)",
                     "where its paper says it wins"],
                    [[f"`{r['method']}`", r["family"], _what(r), fmt(r["ws_vs_single"], 2),
                      (f"{fmt(r['bytes_vs_reference'], 3)} × `{r['bytes_reference']}`"
                       if r["bytes_vs_reference"] == r["bytes_vs_reference"] else
                       f"{fmt(r['bytes_per_epoch'], 2, scale=1e6)} MB"),
                      r["at_largest_p"] or "–", r["claim"]]
                     for r in t[t["default"]].to_dict("records")])


def accuracy_markdown(t: pd.DataFrame) -> str:
    """The plateau's verdicts, one row per method and attribution row."""
    def reference(r):
        return "(the reference)" if r["verdict"] is None else f"`{r['reference']}`"
    def lr(r):  # each family's rate (`sweep.lr_by_family`), the reference's where it differs
        same = r["reference_lr"] != r["reference_lr"] or r["reference_lr"] == r["lr"]
        return fmt(r["lr"], 4) + ("" if same else f" ({fmt(r['reference_lr'], 4)})")
    return md_table(["row", "what it isolates", "against", "lr (reference's)", "plateau effect, test (verdict)",
                     "validation effect, pt [95 % CI]", "against the paper's comparator (test)",
                     "seeds for ±0.5 pt", "epochs run (at cap)", "epochs to target", "optimiser steps to target",
                     f"fixed budget: test effect at {FIXED_BUDGET_EPOCHS} epochs, pt", "test acc %"],
                    [[f"`{r['row']}`", r["isolates"] or ("–" if r["default"] else "a variant"), reference(r), lr(r),
                      str(r["verdict"]) if r["verdict"] is not None else "–",
                      paired.interval(r["val_effect"]),
                      f"vs `{r['comparator']}`: {r['comparator_verdict']}" if r["comparator"] else "–",
                      r["seeds_half_width"] or "–",
                      f"{fmt(r['epochs_run'], 0)} ({r['at_cap']}/{r['seeds']})",
                      fmt(r["epochs_to_target"], 0)
                      + (f" ({r['missed_target']} missed)" if r["missed_target"] else ""),
                      fmt(r["steps_to_target"], 0), paired.interval(r["budget_effect"]),
                      fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"])]
                     for r in t.to_dict("records")])


def regime_markdown(stats: pd.DataFrame) -> str:
    return md_table(["partitioner", "P", "halo rows / node", "cut fraction", "training nodes / part (min, mean, max)",
                     "label skew (mean, max)", "partitions"],
                    [[r["partitioner"], int(r["workers"]), fmt(r["halo_rows_per_node"], 3),
                      fmt(r["cut_fraction"], 3),
                      f"{fmt(r['train_nodes_min'], 0)}, {fmt(r['train_nodes_mean'], 1)}, "
                      f"{fmt(r['train_nodes_max'], 0)}",
                      f"{fmt(r['label_skew_mean'], 2)}, {fmt(r['label_skew_max'], 2)}", int(r["partitions"])]
                     for r in stats.to_dict("records")])


def headlines(t: pd.DataFrame) -> list[str]:
    """In words, the rows whose verdict is "costs" or "gains" after Holm's correction over the page."""
    lines = [f"- {t.attrs.get('comparisons', 0)} comparisons, Holm's correction over all of them at 5 %"]
    for r in t.to_dict("records"):
        for v, against in ((r["verdict"], r["reference"]), (r["comparator_verdict"], r["comparator"])):
            if v is not None and v.word in ("costs", "gains"):
                lines.append(f"- {r['dataset']}: `{r['row']}` against `{against}` {v}")
    return lines if len(lines) > 1 else lines + ["- no row costs or gains after the correction"]


def _rule(t: pd.DataFrame, recs: list[dict]) -> str:
    """The stopping rule and cap the rows' records state, in words."""
    said = {(r["config"].get("stopping"), r["config"].get("patience"), r["config"].get("epochs"),
             r["config"].get("eval_every")) for r in recs if r["status"] == "ok"}
    return "; ".join(f"stopping={s}" + (f" patience={p}" if s != "none" else "") + f", cap {e} epochs, evaluated "
                     f"every {'' if v == 1 else f'{v}th '}epoch" for s, p, e, v in sorted(said, key=str))


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    if t.empty:
        return ["## Study: findings", "", "(no successful runs of a registered method at its defaults)", ""]
    margins = ", ".join(f"±{m:g}" for m in sorted(set(t["margin_pt"])))
    parts = ["## Study: findings (every method against its reference, at convergence)", "",
             f"`experiment=findings`. Every run trains to a validation plateau: {_rule(t, recs)}, the same for a "
             "method and its reference; *epochs run* is the median over seeds, with how many ran to the cap (had "
             "not met the rule). Each run reports the model its stopping rule selects "
             "(benchmarks/run/stopping.py). " + fixed_budget_words(FIXED_BUDGET_EPOCHS)
             + " *lr*: each family's learning rate, chosen on validation before these runs (`sweep.lr_by_family`, "
             "experiment=lr_choice: "
             "docs/results/lr_choice.md), the reference's beside it where its family chose another; no method is "
             "compared at another family's rate.", "",
             "*train WS/rank × single*: the largest rank's training working set over `single`'s, means over seeds. "
             "*bytes/epoch × reference*: training bytes per epoch, all ranks, over its exact control's, or, for a "
             "method without one, over `full_halo`'s at the same workers (`single` and `pyg_plain`, which have no "
             "exchange, show their MB). The last column (`Method.About.claim`) is the claim of the paper it names, "
             "or, where it starts \"description:\", the suite's own description; not a measurement.", "",
             "*plateau effect*: the reported model's test accuracy, the row minus its reference seed by seed "
             "(the exact control: the same method with its approximation off, same layer 0, partition and seeds; "
             "`single` for a method without one), read by `paired.verdict` (docs/analysis.md, \"The verdict\"): "
             "\"costs\"/\"gains\" when the 95 % interval excludes 0 after Holm's correction over every comparison "
             f"of the page, \"equivalent within ±m\" when TOST passes at the declared margin ({margins} pt, "
             "`study_margin_pt`), else \"not resolved\" with the seeds a ±0.5 pt half-width needs; each states "
             "its seeds. A row whose paper states an accuracy claim in points (`CLAIMS`: AdaQP's at most 0.3 pt) "
             "is tested against that claim instead: \"equivalent within ±0.3 pt\", or \"untestable here\" with the "
             "seeds a half-width of the claim would take. *validation effect*: the same models' validation accuracy, "
             "paired the same way (the "
             "metric the plateau was chosen on). *against the paper's comparator*: the row minus the method its "
             "paper compared against (LLCG's Table 1: `ggs` for `llcg` and `psgd_pa`), same verdict. *seeds for "
             "±0.5 pt*: seeds a 95 % half-width of 0.5 pt needs at the row's paired SD. *epochs/optimiser steps "
             "to target*: the first epoch whose validation accuracy reached 95 % of the best any run of the "
             "setting reached, median over the seeds that did; steps are the optimiser steps up to it (local "
             "steps a round, mini-batch steps, LLCG's correction steps; one a full-graph epoch). *what it "
             "isolates*: the attribution rows the preset adds, each against its own exact control.", ""]
    for (dataset, model), g in t.groupby(["dataset", "model"], sort=True):
        workers = int(g[g["default"]]["workers"].max())
        parts += [f"### {dataset} · {model} · {workers} workers", "", markdown(g), "",
                  "Accuracy at the plateau, and speed to the target:", "", accuracy_markdown(g), ""]
        stats = t.attrs["regime"]
        stats = stats[stats["dataset"] == dataset]
        if len(stats):
            parts += ["The partitions' regime (each record's `partition` section, means over the seeds' "
                      "partitions): halo rows summed over the parts per node, the share of in-edges cut, training "
                      "nodes per part, and label skew (total-variation distance of a part's training labels from "
                      "the global mix).", "", regime_markdown(stats), ""]
    parts += ["The rows that cost or gain:", "", *headlines(t), ""]
    recovered = recovered_share(t)
    if not recovered.empty:
        parts += recovered_markdown(recovered)
    defaults = t[t["default"]]
    parts += [image(figures.effect_vs_bytes(defaults, out_dir / "figures" / "findings"), out_dir), ""]
    return parts
