"""Study `boundary` (experiment=boundary_methods): the full-graph methods that cut boundary
communication (PipeGCN, BNS-GCN, Sancus), DIGEST and partition-only training (psgd_pa), each against
its exact control run on the same seeds (`sweep.controls`: PipeGCN without pipelining, BNS-GCN at
p = 1, Sancus at threshold 0, DIGEST's and PSGD-PA's full_halo with the same layer 0), and against
plain exact training (full_halo).

Accuracy is attributed, not just compared (analysis/paired.py): the approximation's effect is method
minus control, the treatment's is control minus full_halo (layer 0 cached or precomputed, PipeGCN's
receiver-side dropout), each a paired mean over seeds with a 95 % interval; a goal on accuracy is
judged on the interval. Halo bytes: every epoch's exchange of halo rows and gradients (and DIGEST's
stale syncs, Sancus's skip flags); the one-time fetch of the halo input features (`halo_inputs`) is
shown apart, amortised. Halo wait: seconds each rank was blocked in halo communication
(`comm_blocked_s_by_category`, measured by `Comm` the same way for every method), per epoch; the
ratio to the control is taken rank by rank and the worst rank shown."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import figures, paired, records
from analysis.markdown import fmt, image, md_table

HALO = ("halo_fwd", "halo_bwd", "stale_sync", "stale_push", "skip_flags")
KEYS = ["dataset", "model", "setting", "workers", "variant"]
# (variant, goal on the accuracy effect against its control in points, on halo bytes and on wait ratios to it)
GOALS = {"pipegcn": (1.0, None, 0.2), "bns_gcn": (1.0, 0.15, None), "sancus": (1.0, 0.5, None)}


def _halo_wait_per_epoch(record: dict) -> list[float]:
    """Per rank: seconds blocked in halo communication per training epoch (NaN where not measured)."""
    ranks = (record.get("summary") or {}).get("per_rank") or []
    epochs = max(1, len(record.get("history") or []))
    out = []
    for r in ranks:
        blocked = r.get("comm_blocked_s_by_category")
        out.append(math.nan if blocked is None else sum(blocked.get(k, 0.0) for k in HALO) / epochs)
    return out


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per setting, worker count and variant: means and standard deviations over seeds, the
    variant's exact control, the approximation's and the treatment's accuracy effects
    (`paired.Effect`s), and halo bytes and waits as ratios to the control's and to full_halo's;
    `wait_ratio_worst` is the largest of the per-rank ratios to the control."""
    runs_df = records.runs(recs)
    runs_df["halo_bytes_per_epoch"] = runs_df["comm_by_category"].map(lambda c: sum(c.get(k, 0) for k in HALO))
    runs_df["inputs_bytes_per_epoch"] = runs_df["comm_by_category"].map(lambda c: c.get("halo_inputs", 0))
    waits = {Path(r["_path"]).stem: _halo_wait_per_epoch(r) for r in recs if "_path" in r}
    runs_df["halo_wait_s"] = runs_df["run"].map(lambda run: waits.get(run, []))
    ok = runs_df[runs_df["status"] == "ok"]
    rows = []
    for key, g in ok.groupby(KEYS, sort=True):
        per_rank = [sum(x) / len(x) for x in zip(*g["halo_wait_s"]) if x]  # mean over seeds, rank by rank
        control = g["control"].dropna()
        rows.append({**dict(zip(KEYS, key)), "seeds": len(g), "control": control.iloc[0] if len(control) else "",
                     "test_acc": g["test_acc"].mean(), "test_acc_std": g["test_acc"].std(ddof=1),
                     "halo_bytes_per_epoch": g["halo_bytes_per_epoch"].mean(),
                     "inputs_bytes_per_epoch": g["inputs_bytes_per_epoch"].mean(),
                     "halo_wait_s_per_rank": per_rank})
    t = pd.DataFrame(rows)
    t.attrs["groups"] = runs_df.attrs["groups"]  # the figures' colours
    if t.empty:
        return t
    by_variant = {tuple(r[k] for k in KEYS): r for r in rows}

    def other(r, variant):
        return by_variant.get((*(r[k] for k in KEYS[:-1]), variant))

    def ratio(r, variant, column):
        e = other(r, variant) if variant else None
        return math.nan if e is None or not e[column] else r[column] / e[column]

    def worst_wait_ratio(r):
        e = other(r, r["control"]) if r["control"] else None
        if e is None or len(e["halo_wait_s_per_rank"]) != len(r["halo_wait_s_per_rank"]):
            return math.nan
        ratios = [m / x for m, x in zip(r["halo_wait_s_per_rank"], e["halo_wait_s_per_rank"]) if x > 0]
        return max(ratios) if ratios and not any(map(math.isnan, ratios)) else math.nan

    def paired_effect(r, variant, against):
        where = {k: r[k] for k in ("dataset", "model", "setting", "workers")}
        return paired.effect(paired.differences(runs_df, variant, against, "test_acc", where))

    t["approximation"] = [paired_effect(r, r["variant"], r["control"]) if r["control"] else None for r in rows]
    # the treatment of a control (or of an exact variant other than full_halo): itself against full_halo
    t["treatment"] = [paired_effect(r, r["control"] or r["variant"], paired.PLAIN)
                      if (r["control"] or r["variant"]) != paired.PLAIN else None for r in rows]
    t["bytes_vs_control"] = [ratio(r, r["control"], "halo_bytes_per_epoch") for r in rows]
    t["bytes_vs_full_halo"] = [ratio(r, paired.PLAIN, "halo_bytes_per_epoch") for r in rows]
    t["wait_ratio_worst"] = [worst_wait_ratio(r) for r in rows]
    return t


def goals(t: pd.DataFrame) -> list[str]:
    lines = []
    for r in t.to_dict("records"):
        goal = GOALS.get(r["variant"])
        if goal is None or r["approximation"] is None:
            continue
        gap_goal, bytes_goal, wait_goal = goal
        e = r["approximation"]
        if e.n == 0:
            lines.append(f"- {r['dataset']} P={r['workers']} {r['variant']}: not judged (its control "
                         f"`{r['control']}` has no ok run on these seeds)")
            continue
        parts = [f"against `{r['control']}` {e.text()} pt (goal >= -{gap_goal:g} on the interval: "
                 f"{paired.within(e, gap_goal)})"]
        if bytes_goal is not None:
            b = r["bytes_vs_control"]
            parts.append(f"halo bytes {b:.3f}x its control's (goal <= {bytes_goal:g}: "
                         f"{'met' if b <= bytes_goal else 'NOT met'})")
        if wait_goal is not None:
            w = r["wait_ratio_worst"]
            parts.append("halo wait not measured" if w != w else
                         f"halo wait {w:.2f}x its control's on its worst rank (goal <= {wait_goal:g}: "
                         f"{'met' if w <= wait_goal else 'NOT met'})")
        lines.append(f"- {r['dataset']} P={r['workers']} {r['variant']}: " + "; ".join(parts))
    return lines


def headlines(t: pd.DataFrame) -> list[str]:
    """What the table supports, in words: a difference is named only where its interval excludes 0."""
    lines = []
    for r in t.to_dict("records"):
        for name, e, against in (("approximation", r["approximation"], r["control"]),
                                 ("treatment", r["treatment"], paired.PLAIN)):
            if e is not None and e.resolved:
                side = "above" if e.mean > 0 else "below"
                who = r["variant"] if name == "approximation" else f"its control `{r['control'] or r['variant']}`"
                lines.append(f"- {r['dataset']} P={r['workers']}: {who} is {side} `{against}` by "
                             f"{e.text()} pt ({name})")
    lines = list(dict.fromkeys(lines))  # a control's treatment is named once, not once per row that shows it
    return lines or ["- no accuracy difference here excludes 0: every interval contains it"]


def markdown(t: pd.DataFrame) -> str:
    def effect(e):
        return "–" if e is None else e.text()

    return md_table(["dataset", "P", "variant", "seeds", "test acc %", "exact control",
                     "approximation: - control, pt [95 % CI] (pairs)", "treatment: control - full_halo, pt [95 % CI]",
                     "halo MB/epoch", "x control", "x full_halo", "+ inputs once, MB/epoch",
                     "halo wait ms/epoch per rank", "wait x control (worst rank)"],
                    [[r["dataset"], r["workers"], r["variant"], r["seeds"],
                      fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"]), r["control"] or "(exact)",
                      effect(r["approximation"]), effect(r["treatment"]),
                      fmt(r["halo_bytes_per_epoch"], 3, scale=1e6), fmt(r["bytes_vs_control"], 3),
                      fmt(r["bytes_vs_full_halo"], 3), fmt(r["inputs_bytes_per_epoch"], 3, scale=1e6),
                      " / ".join(fmt(w, 1, scale=1e-3) for w in r["halo_wait_s_per_rank"]) or "–",
                      fmt(r["wait_ratio_worst"], 2)] for r in t.to_dict("records")])


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    if t.empty:
        return ["## Study: boundary communication", "", "(no successful runs)", ""]
    return ["## Study: boundary communication (PipeGCN, BNS-GCN, Sancus, DIGEST, PSGD-PA)", "",
            "`experiment=boundary_methods`. Test accuracy at the best validation epoch, mean ± standard deviation "
            "over seeds. Each approximate method is set against its exact control, run on the same seeds: the "
            "approximation's effect is method - control, the treatment's is control - full_halo (layer 0 cached or "
            "precomputed, PipeGCN's receiver-side dropout), each the mean of per-seed differences with a 95 % "
            "Student-t interval; \"within noise\" where it contains 0 and lies within ±1 point, \"not resolved\" "
            "where it contains 0 and is wider (docs/analysis.md). Halo MB/epoch: every epoch's halo "
            "rows and gradients (DIGEST's stale syncs and Sancus's skip flags included), all ranks, and as ratios "
            "to the control's and full_halo's; beside it the one-time fetch of the halo input features, amortised "
            "over the run; halo wait: seconds each rank was blocked in halo communication per epoch (a ratio "
            "between runs of one run set; with more ranks than cores the waits include time-slicing). The goals, "
            "each against the method's control: accuracy within 1 point (the interval's lower end >= -1); "
            "bns_gcn <= 0.15x and sancus <= 0.5x its halo bytes; pipegcn <= 0.2x its halo wait on every rank.", "",
            markdown(t), "", "What the intervals resolve:", "", *headlines(t), "",
            "Goals:", "", *(goals(t) or ["- (no method with a goal and a control here)"]), "",
            image(figures.accuracy_vs_bytes(t, out_dir / "figures" / "boundary"), out_dir), ""]
