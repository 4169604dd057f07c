"""`python -m benchmarks.tools.sampler_bench [--out PATH] [--frontier]`: the neighbour sampler alone, on one core.

Whole mini-batches of blocks (sampling, relabelling, block construction) for batches of 512
training nodes of the sampling study's synthetic graph (200k nodes, average degree 20), fan-outs
[15, 10, 5], over the replicated store; and the draws alone. Writes sampled edges per second as
JSON (default `results/sampling/sampler_throughput.json`, beside the sampling study's records,
whose report section shows it).

`--frontier`: the cost model's expected batch shapes (`benchmarks.base.traffic`: `sampled_hops`,
`walk_batch`) against what the suite's samplers draw (5 batches each, by stream) on Cora, CiteSeer
and a 50k-node synthetic graph: the measured ratios docs/projection.md gives."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.base import traffic
from benchmarks.core.datasets import load_dataset, synthetic
from benchmarks.core.graph import Graph, degree_histogram
from benchmarks.core.sampling import SAMPLER, StreamDraws, induced_subgraph, sample_blocks, sample_neighbors
from benchmarks.core.stores import ReplicatedStore


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


#: (seeds, fan-outs) of neighbour sampling and (roots, walk length, roots from the training nodes) of
#: random walks: the suite's defaults and the small-graph cases where neighbourhoods overlap most.
FRONTIER_CASES = {"hops": [(64, [10, 10, 10]), (256, [10, 10, 10]), (1024, [15, 10, 5]), (512, [5, 5])],
                  "walks": [(6000, 2, True), (2000, 2, True), (256, 2, False), (1000, 4, False)]}
FRONTIER_GRAPHS = [{"name": "cora"}, {"name": "citeseer"},
                   {"name": "synthetic", "nodes": 50_000, "avg_degree": 20, "classes": 8, "features": 16,
                    "homophily": 0.8, "feature_noise": 6.0, "degree_skew": 1.0, "train_frac": 0.05,
                    "val_frac": 0.2, "test_frac": 0.5, "seed": 0}]


def frontier_ratios(g: Graph, batches: int = 5) -> list[dict]:
    """Measured over modelled rows: per hop of neighbour sampling (frontier rows), and per random-walk
    subgraph (nodes, induced edges), for `FRONTIER_CASES` on `g`."""
    from methods.graphsaint import random_walks  # the plugin's walk, as graphsaint samples it
    degrees = traffic.Degrees(tuple(map(tuple, degree_histogram(g.in_degree()))))
    gen = torch.Generator().manual_seed(0)
    nodes, train = torch.arange(g.num_nodes), g.train_mask.nonzero().squeeze(1)
    rows = []
    for seeds, fanouts in FRONTIER_CASES["hops"]:
        measured = [0.0] * len(fanouts)
        for _ in range(batches):
            frontier = nodes[torch.randperm(g.num_nodes, generator=gen)[:seeds]]
            for hop, fanout in enumerate(fanouts):
                drawn = g.indices[sample_neighbors(g.indptr, g.indices, frontier, fanout, StreamDraws(gen))[1]]
                frontier = torch.unique(torch.cat([frontier, drawn]))
                measured[hop] += frontier.numel() / batches
        modelled = [r for r, _ in traffic.sampled_hops(degrees, seeds, fanouts)]
        rows.append({"graph": g.name, "case": f"{seeds} seeds, fan-outs {fanouts}",
                     "ratios": [m / p for m, p in zip(measured, modelled)], "what": "frontier rows per hop"})
    for roots, length, from_train in FRONTIER_CASES["walks"]:
        pool = train if from_train else nodes
        n = e = 0.0
        for _ in range(batches):
            walked = random_walks(g.indptr, g.indices, pool[torch.randint(pool.numel(), (roots,), generator=gen)],
                                  length, gen)
            sub = torch.unique(walked)
            n, e = n + sub.numel() / batches, e + induced_subgraph(g.indptr, g.indices, sub)[1].numel() / batches
        mn, me, _ = traffic.walk_batch(degrees, roots, length, pool.numel())
        rows.append({"graph": g.name, "case": f"{roots} walks of {length} from {pool.numel()} nodes",
                     "ratios": [n / mn, e / me], "what": "walk subgraph nodes, edges"})
    return rows


def frontier_graph(cfg: dict) -> Graph:
    """One of `FRONTIER_GRAPHS`, loaded (the synthetic one generated from its options)."""
    if cfg["name"] == "synthetic":
        return synthetic(**{k: v for k, v in cfg.items() if k != "name"})
    return load_dataset(cfg)


def frontier_table() -> str:
    lines = ["| graph | case | measured / modelled | of |", "|---|---|---|---|"]
    for cfg in FRONTIER_GRAPHS:
        for r in frontier_ratios(frontier_graph(cfg)):
            lines.append(f"| {r['graph']} | {r['case']} | {', '.join(f'{x:.2f}' for x in r['ratios'])} | {r['what']} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.sampler_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/sampling/sampler_throughput.json")
    p.add_argument("--frontier", action="store_true", help="print the batch-shape model against the samplers")
    args = p.parse_args(argv)
    if args.frontier:
        print(frontier_table())
        return
    s = sampler_throughput()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(s, indent=1))
    print(f"sampler ({s['sampler']}, one core, fan-outs {s['fanouts']}, batches of {s['batch_size']}): "
          f"{s['blocks_edges_per_s'] / 1e6:.2f}M sampled edges/s for whole blocks, "
          f"{s['draw_only_edges_per_s'] / 1e6:.2f}M for the draws alone; {out}")


if __name__ == "__main__":
    main()
