"""Study `lr_choice` (experiment=lr_choice): each family's learning rate, chosen on validation. The preset
runs a few members of every family at a small grid of rates, on a few seeds, under the stopping rule the
comparisons use; per family, the rate whose runs reach the highest mean validation accuracy (of the model the
stopping rule reports) is chosen. Test accuracy is not read. The section ends with the `sweep.lr_by_family`
mapping a comparison preset copies (benchmarks/commands/sweep.py applies it to every run and its control)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import records
from analysis.markdown import fmt, md_table


def choices(recs: list[dict]) -> pd.DataFrame:
    """Per graph, model, family and rate (a choice is one graph's and one model's): the members' mean validation
    accuracy over their ok runs (`val_mean`, in
    points), its standard deviation, the runs, those stopped by the cap (still improving when it stopped)
    and the failed; `chosen` marks each family's best rate (the lower rate on a tie)."""
    df = records.runs(recs)
    df["family"] = [(r.get("about") or {}).get("family", "unknown") for r in recs]
    df["capped"] = [len(r.get("history") or []) >= int(r["config"]["epochs"]) for r in recs]
    rows = []
    for (dataset, model, family, lr), g in df.groupby(["dataset", "model", "family", "lr"], sort=True):
        ok = g[g["status"] == "ok"]
        rows.append({"dataset": dataset, "model": model, "family": family, "lr": lr,
                     "members": ", ".join(sorted(set(g["method"]))),
                     "val_mean": 100 * ok["val_acc"].mean() if len(ok) else math.nan,
                     "val_sd": 100 * ok["val_acc"].std(ddof=1) if len(ok) > 1 else math.nan,
                     "runs": len(ok), "capped": int(ok["capped"].sum()), "failed": len(g) - len(ok)})
    out = pd.DataFrame(rows)
    if out.empty:
        return out.assign(chosen=[])
    best = out.dropna(subset=["val_mean"]).sort_values(["val_mean", "lr"], ascending=[False, True])
    chosen = set(best.groupby(["dataset", "model", "family"]).head(1).index)
    out["chosen"] = [i in chosen for i in out.index]
    return out


def lr_by_family(table: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(graph, model) -> the chosen rate of each family: the mapping a preset of that graph and model copies."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in table[table["chosen"]].to_dict("records"):
        out.setdefault((r["dataset"], r["model"]), {})[r["family"]] = float(r["lr"])
    return out


def section(recs: list[dict], out_dir: Path) -> list[str]:
    table = choices(recs)
    seeds = sorted({r["seed"] for r in recs})
    rows = [[r["dataset"], r["model"], r["family"], r["members"], fmt(r["lr"], 4),
             fmt(r["val_mean"], 1, std=r["val_sd"]),
             f"{r['runs']}" + (f" ({r['failed']} failed)" if r["failed"] else ""), r["capped"],
             "**chosen**" if r["chosen"] else ""] for r in table.to_dict("records")]
    gaps: dict[tuple[str, str], list[str]] = {}  # per graph and model: each family's lead
    for (dataset, model, family), g in table.dropna(subset=["val_mean"]).groupby(["dataset", "model", "family"]):
        ranked = g.sort_values("val_mean", ascending=False)
        if len(ranked) > 1:
            best, runner_up = ranked.iloc[0], ranked.iloc[1]
            lead = best["val_mean"] - runner_up["val_mean"]
            gaps.setdefault((dataset, model), []).append(
                f"{family} {lead:.1f} pt over lr {runner_up['lr']:g}"
                + (" (less than the runs' SD)" if lead < max(best["val_sd"], runner_up["val_sd"]) else ""))
    mappings = [f"{dataset} · {model}:\n\n```yaml\n  lr_by_family:\n"
                + "\n".join(f"    {family}: {lr:g}" for family, lr in chosen.items()) + "\n```"
                for (dataset, model), chosen in lr_by_family(table).items()]
    return ["## Study: each family's learning rate, chosen on validation", "",
            "The study `lr_choice` (the preset this page's head names): each family's members at every rate of the "
            f"grid, seeds {seeds}, trained under "
            "the comparisons' stopping rule; per graph, model and family, the rate with the highest mean validation "
            "accuracy (of the model the stopping rule reports, in points, ± its standard deviation over the "
            "family's runs) is chosen; test accuracy is not read. `capped`: runs the cap stopped (still improving).",
            "", md_table(["graph", "model", "family", "members run", "lr", "validation accuracy %", "runs",
                          "capped", ""], rows), "",
            "The chosen rate's lead over the next: "
            + "; ".join(f"{dataset} · {model}: " + ", ".join(leads) for (dataset, model), leads in gaps.items())
            + ". A lead smaller than the runs' spread "
            "is the rule's choice, not a finding that the rate matters: it only fixes each family's rate before "
            "the comparisons, on validation, the same way for every family.", "",
            "The mapping a comparison preset of that graph and model copies into its `sweep` section:", "",
            *mappings, ""]
