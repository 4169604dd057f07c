"""Study `digest` (experiment=digest_accuracy): stale halo representations keep the accuracy that
partition-only training loses, at a fraction of exact training's halo traffic; and study
`digest_stragglers` (experiment=digest_stragglers): DIGEST against DIGEST-A with one slow worker.

Time to target: 95 % of the best validation accuracy any run reached on that dataset, partition
and model (the report's definition: the partitioner is part of the setting)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import figures, records
from analysis.markdown import fmt, image, md_table

# Halo traffic every epoch; DIGEST's one-time fetch of the halo input features (`halo_inputs`) is
# reported apart, amortised over the run.
# Records written before every byte was counted once, at its sender, also hold DIGEST-A's pulls
# (`stale_pull`): left out, so old and new records count the same thing.
HALO = ("halo_fwd", "halo_bwd", "stale_sync", "stale_push")
COLUMNS = ["test_acc", "epoch_time_s", "comm_bytes_per_epoch", "halo_bytes_per_epoch", "inputs_bytes_per_epoch",
           "time_to_target_s", "epoch_to_target", "train_time_s"]
KEYS = ["dataset", "partitioner", "model", "variant"]
# The variants the accuracy curves are about.
CURVES = ("full_halo", "digest", "digest asynchronous=True", "psgd_pa", "llcg")


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per dataset, partitioner, model and variant: means over seeds (a time to target that
    some seed never reached stays NaN, as does any metric of a failed run)."""
    runs_df = records.runs(recs)
    timing = records.time_to_accuracy(records.history(recs), runs_df)
    df = runs_df.merge(timing[["run", "time_to_target_s", "epoch_to_target"]], on="run")
    df["partitioner"] = df["config"].map(lambda c: c.get("partitioner"))
    df["halo_bytes_per_epoch"] = df["comm_by_category"].map(lambda c: sum(c.get(k, 0) for k in HALO))
    df["inputs_bytes_per_epoch"] = df["comm_by_category"].map(lambda c: c.get("halo_inputs", 0))
    return df.groupby(KEYS, as_index=False)[COLUMNS].agg(lambda v: v.mean(skipna=False))


def goals(t: pd.DataFrame) -> list[str]:
    """DIGEST (sync_every 10) against full_halo: within 1 point of its test accuracy, at most 1/8 of
    its halo bytes per epoch; PSGD-PA beside them (what dropping the cut edges costs)."""
    by = {tuple(r[k] for k in KEYS): r for r in t.to_dict("records")}
    lines = []
    for (d, p, m, v), r in sorted(by.items()):
        exact = by.get((d, p, m, "full_halo"))
        if v != "digest" or exact is None:
            continue
        psgd = by.get((d, p, m, "psgd_pa"), {}).get("test_acc", float("nan"))
        gap = 100 * (exact["test_acc"] - r["test_acc"])
        ratio = r["halo_bytes_per_epoch"] / exact["halo_bytes_per_epoch"]
        amortised = (r["halo_bytes_per_epoch"] + r["inputs_bytes_per_epoch"]) / exact["halo_bytes_per_epoch"]
        lines.append(f"- {d} {p} {m}: digest s=10 test {100 * r['test_acc']:.1f} vs full_halo "
                     f"{100 * exact['test_acc']:.1f} (gap {gap:+.1f} pt, "
                     f"goal <= 1: {'met' if gap <= 1 else 'NOT met'}); "
                     f"halo bytes {ratio:.3f}x of full_halo (goal <= 0.125: {'met' if ratio <= 0.125 else 'NOT met'}; "
                     f"{amortised:.3f}x with the one-time input fetch amortised); psgd_pa {fmt(100 * psgd, 1)}")
    return lines


def _never(v, digits: int) -> str:
    return "never" if pd.isna(v) else f"{v:.{digits}f}"


def markdown(t: pd.DataFrame) -> str:
    return md_table(["dataset", "partition", "model", "method", "test acc %", "epoch s", "comm MB/epoch",
                     "halo MB/epoch", "+ inputs once, MB/epoch", "epochs to target", "s to target"],
                    [[r["dataset"], r["partitioner"], r["model"], r["variant"], fmt(100 * r["test_acc"], 1),
                      fmt(r["epoch_time_s"], 3), fmt(r["comm_bytes_per_epoch"], 2, scale=1e6),
                      fmt(r["halo_bytes_per_epoch"], 2, scale=1e6), fmt(r["inputs_bytes_per_epoch"], 2, scale=1e6),
                      _never(r["epoch_to_target"], 0), _never(r["time_to_target_s"], 1)] for r in t.to_dict("records")])


def curves(recs: list[dict], out: Path) -> list[list[Path]]:
    """Validation accuracy against epoch and against training time, one figure per dataset."""
    runs_df, hist = records.runs(recs), records.history(recs)
    runs_df.attrs["settings"] = records.settings_described(runs_df)  # titles name the partitioner
    paths = []
    for dataset in sorted(runs_df["dataset"].unique()):
        sub = runs_df[(runs_df["dataset"] == dataset) & runs_df["variant"].isin(CURVES)]
        if len(sub):
            sub.attrs = runs_df.attrs
            paths.append(figures.accuracy_vs_time(hist[hist["run"].isin(sub["run"])], sub, out / dataset))
    return paths


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    return ["## Study: DIGEST against exact and partition-parallel training", "",
            "`experiment=digest_accuracy`. Means over seeds; test accuracy at the best validation epoch; halo "
            "MB/epoch: the halo exchange every epoch (DIGEST's stale pushes and pulls included), beside it DIGEST's "
            "one-time fetch of the halo input features amortised over the run; time to target: 95 % of the best "
            "validation accuracy any run reached on that dataset, partition and model.", "",
            markdown(t), "", "Goals:", "", *(goals(t) or ["- (no digest and full_halo pair here)"]), "",
            *[image(p, out_dir) for p in curves(recs, out_dir / "figures" / "digest")], ""]


def stragglers_section(recs: list[dict], out_dir: Path) -> list[str]:
    """One worker slower per step: synchronous DIGEST waits for it every step, DIGEST-A only at
    evaluations. Steps per rank show how far the slow rank fell behind."""
    t = table(recs)
    steps = {}
    for r in recs:
        steps.setdefault(r["variant"], []).append(
            [p.get("steps") for p in (r.get("summary") or {}).get("per_rank", [])])
    cfg = recs[0]["config"]
    rows = [[r["variant"], fmt(100 * r["test_acc"], 1), fmt(r["train_time_s"], 1),
             _never(r["time_to_target_s"], 1), " / ".join(str(s) for s in steps.get(r["variant"], [[]])[0])]
            for r in t.to_dict("records")]
    return ["## Study: DIGEST against DIGEST-A with a straggler", "",
            f"`experiment=digest_stragglers`: {cfg['dataset']['name']}, {cfg['model']['name']}, "
            f"{cfg.get('partitioner')}, seconds of sleep per step per rank {cfg.get('straggler_delay_s')}, evaluation "
            f"every {cfg.get('eval_every')} epochs. Training time excludes evaluation.", "",
            md_table(["method", "test acc %", "training s", "s to target", "steps per rank"], rows), ""]
