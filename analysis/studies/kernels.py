"""Study `kernels` (experiment=kernels): epochs with the native kernels against torch's CSR kernels
(`kernel=spmm`), runs of one sweep. Goals (issue 26): `single` SAGE and GAT 3x256 on the 200k-node
graph at least 1.8x faster with native; `sar` at 1 and 2 workers on the public anchor's graph at least
1.5x faster per iteration than IntelLabs/SAR's (results/reference/sar_public_anchor.csv)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import records
from analysis.markdown import fmt, md_table
from analysis.studies.sar import ANCHOR

EPOCH_GOAL, ANCHOR_GOAL = 1.8, 1.5


def kernel_of(run: dict) -> str:
    return run["config"].get("kernel", "spmm")  # records from before `native` ran torch's CSR kernels


def table(recs: list[dict]) -> pd.DataFrame:
    """One row per (method, model, workers, kernel): mean epoch time, training working set, peak
    memory and test accuracy over its ok runs."""
    df = records.runs(recs)
    df = df[df["status"] == "ok"].copy()
    df["kernel"] = [kernel_of(r) for r in df.to_dict("records")]
    return df.groupby(["method", "model", "workers", "kernel"], as_index=False)[
        ["epoch_time_s", "train_mem_bytes", "peak_mem_bytes", "test_acc"]].mean()


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    public = pd.read_csv(ANCHOR).set_index("workers")["epoch_time_s"]
    rows, goals = [], []
    for (method, model, workers), g in t.groupby(["method", "model", "workers"]):
        by = {r["kernel"]: r for r in g.to_dict("records")}
        new, old = by.get("native"), by.get("spmm")
        speedup = old["epoch_time_s"] / new["epoch_time_s"] if new and old else float("nan")
        anchor = public.get(workers) if method == "sar" and model == "sage" else None
        rows.append([method, model, workers, fmt(old and old["epoch_time_s"], 3), fmt(new and new["epoch_time_s"], 3),
                     fmt(speedup, 2, suffix="x"), fmt(anchor, 2),
                     fmt(anchor / new["epoch_time_s"] if anchor and new else None, 2, suffix="x"),
                     fmt(old and old["train_mem_bytes"], 3, scale=1e9),
                     fmt(new and new["train_mem_bytes"], 3, scale=1e9),
                     fmt(old and old["test_acc"], 3), fmt(new and new["test_acc"], 3)])
        if method == "single" and speedup == speedup:
            goals.append(f"- single {model}: native {speedup:.2f}x faster than spmm per epoch (goal >= {EPOCH_GOAL}: "
                         f"{'met' if speedup >= EPOCH_GOAL else 'NOT met'})")
        if anchor and new:
            ratio = anchor / new["epoch_time_s"]
            goals.append(f"- sar sage, {workers} worker(s): {ratio:.2f}x faster per iteration than IntelLabs/SAR's "
                         f"{anchor:.2f} s (goal >= {ANCHOR_GOAL}: {'met' if ratio >= ANCHOR_GOAL else 'NOT met'})")
    head = ["method", "model", "workers", "spmm s/epoch", "native s/epoch", "native speed-up", "IntelLabs/SAR s/iter",
            "native vs SAR", "spmm train WS GB", "native train WS GB", "spmm test acc", "native test acc"]
    return ["## Study: native kernels against torch's CSR kernels", "",
            "`python -m benchmarks.commands.sweep experiment=kernels`: each pair ran in one sweep on one machine; the "
            "speed-up is the ratio of their median epoch times. IntelLabs/SAR's seconds per iteration are from "
            f"`results/reference/{ANCHOR.name}` (dropout 0, as these sar runs).", "",
            md_table(head, rows), "", *goals, ""]
