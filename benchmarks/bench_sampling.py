"""Where full-graph training wins and loses against sampling, on the same graph, model code, probes
and evaluation.

Runs `neighbor_sampling` (both graph stores), `cluster_gcn`, `graphsaint`, `full_halo` and `sar`
with 1, 2 and 4 workers on CiteSeer, Cora and a synthetic graph of 200k nodes, for SAGE and GCN
(`experiment=sampling_baselines`), then measures the sampler alone.

    python -m benchmarks.bench_sampling [--datasets citeseer cora synthetic] [--models sage gcn]
                                        [--workers 1 2 4] [--seeds 0] [--methods neighbor_sampling ...]
                                        [--set key=value ...] [--skip-sampler]

Every run is its own process and writes its record under --results (runs resume: an `ok` record is
not rerun; `--methods` keeps the variants of the methods named, `--seeds` adds seeds, so a second
call can add seeds where a comparison needs them). The table (means over the seeds present) and goals printed at the end are computed from the records with the analysis
library: test accuracy at the best validation epoch, time to target (95 % of the best validation
accuracy any run reached on that dataset and model, as in `python -m analysis report`), sampled
edges per second (per rank: edges drawn / time in the sampling phase), the largest rank's peak
memory, and bytes fetched per epoch (sampling requests and answers plus input features; for the
full-graph methods, their halo exchange). The sampler benchmark draws [15, 10, 5] blocks for
batches of 512 training nodes of the synthetic graph on one thread (one core), with the replicated
store, and reports sampled edges per second.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from analysis import figures, records
from benchmarks.bench import run_cli
from benchmarks.cli import registered_methods

VARIANTS = [
    ["method=neighbor_sampling", "method.store=partitioned"],
    ["method=neighbor_sampling", "method.store=replicated"],
    ["method=cluster_gcn"],
    ["method=graphsaint"],
    ["method=full_halo"],
    ["method=sar"],
]
# The synthetic graph: 200k nodes, 5 % of them labelled for training (ogbn-products labels 8 %).
# Neighbour sampling takes ~20 optimizer steps an epoch there (10k seeds in batches of 512) and gets
# 20 epochs; full-graph training takes one step an epoch and the subgraph samplers a few, so they
# get 100 (evaluated every 5th): each method runs long enough to converge, and time to target
# compares them at the same target.
SYNTHETIC = ["dataset.nodes=200000", "dataset.avg_degree=20", "dataset.train_frac=0.05", "epochs=100", "eval_every=5"]
SYNTHETIC_NS = ["epochs=20", "eval_every=1"]
FETCHED = ("sample_request", "sample_response", "feature_request", "feature_fetch", "halo_fwd", "halo_bwd",
           "halo_refetch")
COLUMNS = ["test_acc", "epoch_time_s", "time_to_target_s", "sampled_edges_per_s", "peak_rss_bytes",
           "fetched_bytes_per_epoch", "comm_bytes_per_epoch"]


def sweep(args, results: Path) -> None:
    wanted = set(args.methods or registered_methods()) & set(registered_methods())
    for dataset in args.datasets:
        for model in args.models:
            for workers in args.workers:
                for seed in args.seeds:
                    base = ["experiment=sampling_baselines", f"dataset={dataset}", f"model={model}",
                            f"workers={workers}", f"seed={seed}", f"results_dir={results}"]
                    for extra in VARIANTS:
                        method = extra[0].split("=")[1]
                        if method not in wanted:
                            continue
                        if dataset == "synthetic":
                            extra = [*SYNTHETIC, *(SYNTHETIC_NS if method == "neighbor_sampling" else []), *extra]
                        print(f"[{dataset} {model} {workers} workers seed {seed}] {' '.join(extra)}", flush=True)
                        run_cli([*base, *extra, *args.set], check=False)


def sampled_edges_per_s(record: dict) -> float:
    """Per rank, edges drawn / seconds in the sampling phase; mean over ranks (NaN without sampler)."""
    ranks = [r for r in (record.get("summary") or {}).get("per_rank", []) if r.get("sampled_edges")]
    rates = [r["sampled_edges"] / r["phase_time_s"]["sampling"] for r in ranks if r["phase_time_s"]["sampling"] > 0]
    return sum(rates) / len(rates) if rates else float("nan")


def table(runs_dir: Path) -> pd.DataFrame:
    """One row per dataset, model, worker count, method variant and epoch budget: means over seeds.
    Time to target: 95 % of the best validation accuracy any run on that dataset and model reached,
    whatever its epoch budget."""
    recs = records.load(runs_dir)
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
    keys = ["dataset", "model", "workers", "variant", "epochs"]
    out = df.groupby(keys, as_index=False)[COLUMNS].mean()
    seeds = df.groupby(keys, as_index=False)["seed"].nunique()
    return out.merge(seeds.rename(columns={"seed": "seeds"}), on=keys)


def goals(t: pd.DataFrame) -> list[str]:
    """Neighbour sampling against full_halo on Cora and CiteSeer: per worker count, and over all
    worker counts (each a mean over its seeds)."""
    lines = []
    planetoid = t[t["dataset"] != "synthetic"]
    for (dataset, model), g in planetoid.groupby(["dataset", "model"]):
        exact = g[g["variant"] == "full_halo"].set_index("workers")["test_acc"]
        for variant in sorted(v for v in g["variant"].unique() if v.startswith("neighbor_sampling")):
            ns = g[g["variant"] == variant].set_index("workers")["test_acc"]
            both = exact.index.intersection(ns.index)
            if both.empty:
                continue
            per = ", ".join(f"{w}w {100 * (exact[w] - ns[w]):+.1f}" for w in both)
            gap = 100 * (exact[both].mean() - ns[both].mean())
            lines.append(f"{dataset:8s} {model:4s} {variant}: test {100 * ns[both].mean():.1f} vs full_halo "
                         f"{100 * exact[both].mean():.1f} over {len(both)} worker counts (gap {gap:+.1f} pt; per "
                         f"worker count {per}; goal <= 1.5: {'met' if gap <= 1.5 else 'NOT met'})")
    return lines


def markdown(t: pd.DataFrame) -> str:
    def fmt(v, spec, scale=1.0, unit=""):
        return "–" if pd.isna(v) else format(v / scale, spec) + unit

    head = ("| dataset | model | workers | method | epochs | seeds | test acc % | epoch s | s to target | sampled edges/s per rank "
            "| peak RSS GiB/rank | fetched MB/epoch | comm MB/epoch |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['dataset']} | {r['model']} | {r['workers']} | {r['variant']} | {r['epochs']} | {r['seeds']} | {100 * r['test_acc']:.1f} "
        f"| {r['epoch_time_s']:.3f} | {fmt(r['time_to_target_s'], '.1f')} | {fmt(r['sampled_edges_per_s'], '.2f', 1e6, 'M')} "
        f"| {r['peak_rss_bytes'] / 2**30:.2f} | {r['fetched_bytes_per_epoch'] / 1e6:.2f} "
        f"| {r['comm_bytes_per_epoch'] / 1e6:.2f} |\n" for r in t.to_dict("records"))


def accuracy_summary(t: pd.DataFrame) -> str:
    """Test accuracy (%) per dataset and model, one column per method variant (at its longest epoch
    budget there), averaged over worker counts (and seeds): the accuracy story in one small table."""
    longest = t.groupby(["dataset", "model", "variant"])["epochs"].transform("max")
    pivot = t[t["epochs"] == longest].pivot_table(index=["dataset", "model"], columns="variant", values="test_acc",
                                                  aggfunc="mean") * 100
    cols = list(pivot.columns)
    head = "| dataset | model | " + " | ".join(cols) + " |\n|---|---|" + "---|" * len(cols) + "\n"
    return head + "".join(f"| {d} | {m} | " + " | ".join("–" if pd.isna(v) else f"{v:.1f}" for v in row) + " |\n"
                          for (d, m), row in zip(pivot.index, pivot.values))


def curves(runs_dir: Path, out: Path, workers: int = 4) -> list[Path]:
    """Validation accuracy against epoch and training time on the synthetic graph, `workers` ranks,
    every method at its longest epoch budget, one panel per model (their epoch budgets differ, so
    they are drawn as one setting)."""
    recs = records.load(runs_dir)
    runs_df, hist = records.runs(recs), records.history(recs)
    runs_df["epochs"] = runs_df["config"].map(lambda c: c["epochs"])
    longest = runs_df.groupby(["dataset", "model", "variant"])["epochs"].transform("max")
    sub = runs_df[(runs_df["dataset"] == "synthetic") & (runs_df["workers"] == workers)
                  & (runs_df["epochs"] == longest)].assign(setting="synthetic")
    if sub.empty:
        return []
    return figures.accuracy_vs_time(hist[hist["run"].isin(sub["run"])], sub, out)


def sampler_throughput(batches: int = 30, batch_size: int = 512, fanouts=(15, 10, 5)) -> dict:
    """Sampled edges per second on one core: whole mini-batches of blocks (sampling, relabelling,
    block construction) over the replicated store of the benchmark's synthetic graph."""
    from benchmarks.datasets import synthetic
    from methods._sampling import SAMPLER, sample_neighbors
    from methods.neighbor_sampling import ReplicatedStore, sample_blocks

    torch.set_num_threads(1)
    g = synthetic(nodes=200_000, avg_degree=20, classes=8, features=64, homophily=0.8, feature_noise=6.0,
                  degree_skew=1.0, train_frac=0.05, val_frac=0.2, test_frac=0.5, seed=0)
    store = ReplicatedStore(g.indptr, g.indices, g.x)
    gen = torch.Generator().manual_seed(0)
    train = g.train_mask.nonzero().squeeze(1)
    seeds = [train[torch.randperm(train.numel(), generator=gen)[:batch_size]] for _ in range(batches)]
    sample_blocks(store, seeds[0], list(fanouts), gen)  # warm-up
    start, edges = time.perf_counter(), 0
    for s in seeds:
        edges += sample_blocks(store, s, list(fanouts), gen)[2]
    blocks_s = time.perf_counter() - start
    nodes = torch.randint(0, g.num_nodes, (200_000,), generator=gen)
    start, drawn = time.perf_counter(), 0
    for k in fanouts:
        drawn += sample_neighbors(g.indptr, g.indices, nodes, k, gen)[1].numel()
    hop_s = time.perf_counter() - start
    return {"sampler": SAMPLER, "graph": g.summary(), "fanouts": list(fanouts), "batch_size": batch_size,
            "blocks_edges_per_s": edges / blocks_s, "draw_only_edges_per_s": drawn / hop_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["citeseer", "cora", "synthetic"])
    ap.add_argument("--models", nargs="+", default=["sage", "gcn"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--methods", nargs="+", help="only the variants of these methods (default: all)")
    ap.add_argument("--set", nargs="*", default=[], help="extra overrides for every run, e.g. epochs=20")
    ap.add_argument("--skip-sampler", action="store_true")
    ap.add_argument("--results", default="results/bench_sampling")
    args = ap.parse_args()
    results = Path(args.results)
    out = {}
    if not args.skip_sampler:
        out["sampler"] = sampler_throughput()
        s = out["sampler"]
        print(f"sampler ({s['sampler']}, one core, fan-outs {s['fanouts']}, batches of {s['batch_size']}): "
              f"{s['blocks_edges_per_s'] / 1e6:.2f}M sampled edges/s for whole blocks, "
              f"{s['draw_only_edges_per_s'] / 1e6:.2f}M for the draws alone (goal >= 5M: "
              f"{'met' if s['blocks_edges_per_s'] >= 5e6 else 'NOT met'})", flush=True)
    sweep(args, results / "runs")
    main_table = table(results / "runs")
    out["table"] = main_table.astype(object).where(main_table.notna(), None).to_dict("records")
    print("\n" + markdown(main_table))
    print("\n" + accuracy_summary(main_table))
    print("\n".join(goals(main_table)))
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(out, indent=1))
    (results / "summary.md").write_text(markdown(main_table) + "\n" + accuracy_summary(main_table))
    out["figures"] = [str(p) for p in curves(results / "runs", results / "figures")]
    print(f"\nsummary: {results / 'summary.json'}")


if __name__ == "__main__":
    main()
