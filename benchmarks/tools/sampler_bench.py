"""`python -m benchmarks.tools.sampler_bench [--out PATH]`: the neighbour sampler alone, on one core.

Whole mini-batches of blocks (sampling, relabelling, block construction) for batches of 512
training nodes of the sampling study's synthetic graph (200k nodes, average degree 20), fan-outs
[15, 10, 5], over the replicated store; and the draws alone. Writes sampled edges per second as
JSON (default `results/sampling/sampler_throughput.json`, beside the sampling study's records,
whose report section shows it)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.datasets import synthetic
from benchmarks.sampling import SAMPLER, sample_blocks, sample_neighbors
from benchmarks.stores import ReplicatedStore


def sampler_throughput(batches: int = 30, batch_size: int = 512, fanouts=(15, 10, 5)) -> dict:
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.sampler_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/sampling/sampler_throughput.json")
    args = p.parse_args(argv)
    s = sampler_throughput()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(s, indent=1))
    print(f"sampler ({s['sampler']}, one core, fan-outs {s['fanouts']}, batches of {s['batch_size']}): "
          f"{s['blocks_edges_per_s'] / 1e6:.2f}M sampled edges/s for whole blocks, "
          f"{s['draw_only_edges_per_s'] / 1e6:.2f}M for the draws alone; {out}")


if __name__ == "__main__":
    main()
