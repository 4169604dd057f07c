"""Study `sampling` (experiment=sampling_baselines): where full-graph training wins and loses
against sampling, on the same graph, model code, probes and evaluation.

Per dataset, model, worker count, variant and epoch budget: test accuracy at the best validation
epoch, epoch time, time to target (95 % of the best validation accuracy any run on that dataset and
model reached, whatever its epoch budget), sampled edges per second (per rank: edges drawn / time
in the sampling phase), the largest rank's peak PSS (the replicated store's graph is shared between
a machine's ranks; RSS, marked, in records without PSS), and bytes fetched per epoch (sampling
requests and answers plus input features; for the full-graph methods, their halo exchange). The
sampler micro-benchmark (`python -m benchmarks.tools.sampler_bench`) is shown when its JSON is in the
records' folder."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis import figures, records
from analysis.markdown import fmt, fmt_peak, image, md_table

FETCHED = ("sample_request", "sample_response", "feature_request", "feature_fetch", "halo_fwd", "halo_bwd",
           "halo_refetch")
COLUMNS = ["test_acc", "epoch_time_s", "time_to_target_s", "sampled_edges_per_s", "peak_mem_bytes",
           "fetched_bytes_per_epoch", "comm_bytes_per_epoch"]
KEYS = ["dataset", "model", "workers", "variant", "epochs"]
SAMPLER_JSON = "sampler_throughput.json"  # what benchmarks.tools.sampler_bench writes


def sampled_edges_per_s(record: dict) -> float:
    """Per rank, edges drawn / seconds in the sampling phase; mean over ranks (NaN without sampler)."""
    ranks = [r for r in (record.get("summary") or {}).get("per_rank", []) if r.get("sampled_edges")]
    rates = [r["sampled_edges"] / r["phase_time_s"]["sampling"] for r in ranks if r["phase_time_s"]["sampling"] > 0]
    return sum(rates) / len(rates) if rates else float("nan")


def table(recs: list[dict]) -> pd.DataFrame:
    """Means over the ok seeds present, and how many there are."""
    runs_df = records.runs(recs)
    runs_df["epochs"] = runs_df["config"].map(lambda c: c["epochs"])
    hist = records.history(recs)
    timing = pd.concat([records.time_to_accuracy(hist, g, target=0.95 * g["best_val_acc"].max())
                        for _, g in runs_df.groupby(["dataset", "model"])])
    df = runs_df.merge(timing[["run", "time_to_target_s"]], on="run")
    rates = {Path(r["_path"]).stem: sampled_edges_per_s(r) for r in recs}
    df["sampled_edges_per_s"] = df["run"].map(rates)
    df["fetched_bytes_per_epoch"] = df["comm_by_category"].map(lambda c: sum(c.get(k, 0) for k in FETCHED))
    df = df[df["status"] == "ok"]
    out = df.groupby(KEYS, as_index=False)[COLUMNS].mean()
    seeds = df.groupby(KEYS, as_index=False).agg(seeds=("seed", "nunique"),
                                                 peak_mem_kind=("peak_mem_kind", lambda k: "/".join(sorted(set(k)))))
    return out.merge(seeds, on=KEYS)


def goals(t: pd.DataFrame) -> list[str]:
    """Neighbour sampling against full_halo on the real (non-synthetic) graphs: per worker count, and
    over all worker counts (each a mean over its seeds); goal: within 1.5 points."""
    lines = []
    for (dataset, model), g in t[t["dataset"] != "synthetic"].groupby(["dataset", "model"]):
        exact = g[g["variant"] == "full_halo"].set_index("workers")["test_acc"]
        for variant in sorted(v for v in g["variant"].unique() if v.startswith("neighbor_sampling")):
            ns = g[g["variant"] == variant].set_index("workers")["test_acc"]
            both = exact.index.intersection(ns.index)
            if both.empty:
                continue
            per = ", ".join(f"{w}w {100 * (exact[w] - ns[w]):+.1f}" for w in both)
            gap = 100 * (exact[both].mean() - ns[both].mean())
            lines.append(f"- {dataset} {model} {variant}: test {100 * ns[both].mean():.1f} vs full_halo "
                         f"{100 * exact[both].mean():.1f} over {len(both)} worker counts (gap {gap:+.1f} pt; per "
                         f"worker count {per}; goal <= 1.5: {'met' if gap <= 1.5 else 'NOT met'})")
    return lines


def markdown(t: pd.DataFrame) -> str:
    return md_table(["dataset", "model", "workers", "method", "epochs", "seeds", "test acc %", "epoch s", "s to target",
                     "sampled edges/s per rank", "peak PSS GiB/rank", "fetched MB/epoch", "comm MB/epoch"],
                    [[r["dataset"], r["model"], r["workers"], r["variant"], r["epochs"], r["seeds"],
                      fmt(100 * r["test_acc"], 1), fmt(r["epoch_time_s"], 3), fmt(r["time_to_target_s"], 1),
                      fmt(r["sampled_edges_per_s"], 2, scale=1e6, suffix="M"),
                      fmt_peak(r["peak_mem_bytes"], r["peak_mem_kind"], 2, 2**30),
                      fmt(r["fetched_bytes_per_epoch"], 2, scale=1e6), fmt(r["comm_bytes_per_epoch"], 2, scale=1e6)]
                     for r in t.to_dict("records")])


def accuracy_summary(t: pd.DataFrame) -> str:
    """Test accuracy (%) per dataset and model, one column per variant (at its longest epoch budget
    there), averaged over worker counts (and seeds): the accuracy story in one small table."""
    longest = t.groupby(["dataset", "model", "variant"])["epochs"].transform("max")
    pivot = t[t["epochs"] == longest].pivot_table(index=["dataset", "model"], columns="variant", values="test_acc",
                                                  aggfunc="mean") * 100
    return md_table(["dataset", "model", *pivot.columns],
                    [[d, m, *(fmt(v, 1) for v in row)] for (d, m), row in zip(pivot.index, pivot.values)])


def curves(recs: list[dict], out: Path, workers: int = 4) -> list[Path]:
    """Validation accuracy against epoch and training time on the synthetic graph, `workers` ranks
    (else the most there are), every variant at its longest epoch budget, one panel per model
    (their epoch budgets differ, so they are drawn as one setting)."""
    runs_df, hist = records.runs(recs), records.history(recs)
    runs_df["epochs"] = runs_df["config"].map(lambda c: c["epochs"])
    synthetic = runs_df[runs_df["dataset"] == "synthetic"]
    if synthetic.empty:
        return []
    workers = workers if (synthetic["workers"] == workers).any() else synthetic["workers"].max()
    longest = synthetic.groupby(["model", "variant"])["epochs"].transform("max")
    sub = synthetic[(synthetic["workers"] == workers) & (synthetic["epochs"] == longest)].assign(setting="synthetic")
    return figures.accuracy_vs_time(hist[hist["run"].isin(sub["run"])], sub, out) if len(sub) else []


def sampler_line(folder: Path) -> list[str]:
    path = folder / SAMPLER_JSON
    if not path.exists():
        return [f"The sampler alone: run `python -m benchmarks.tools.sampler_bench --out {path}` to add it here.", ""]
    s = json.loads(path.read_text())
    return [f"The sampler alone ({s['sampler']}, one core, fan-outs {s['fanouts']}, batches of {s['batch_size']}): "
            f"{s['blocks_edges_per_s'] / 1e6:.2f}M sampled edges/s for whole blocks, "
            f"{s['draw_only_edges_per_s'] / 1e6:.2f}M for the draws alone (goal >= 5M: "
            f"{'met' if s['blocks_edges_per_s'] >= 5e6 else 'NOT met'}).", ""]


def section(recs: list[dict], out_dir: Path) -> list[str]:
    t = table(recs)
    fig = curves(recs, out_dir / "figures" / "sampling")
    return ["## Study: sampling baselines against full-graph training", "",
            "`experiment=sampling_baselines`. " + __doc__.split("\n\n")[1].replace("\n", " "), "",
            *sampler_line(Path(recs[0]["_path"]).parent), markdown(t), "",
            "Test accuracy (%), mean over worker counts and seeds, each variant at its longest epoch budget:", "",
            accuracy_summary(t), "", "Goals:", "",
            *(goals(t) or ["- (no neighbour sampling and full_halo pair on a real graph here)"]),
            "", *([image(fig, out_dir), ""] if fig else [])]
