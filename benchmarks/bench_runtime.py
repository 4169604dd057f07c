"""Runtime benchmark: the suite's `single` against a plain PyTorch Geometric full-batch loop with
the same model on the same graph, and `full_halo` with 1 worker against `single`.

    python -m benchmarks.bench_runtime [--nodes 200000 --avg-degree 20 --epochs 6 ...]

Every measurement runs in its own process (so peak memory is the run's own) and writes a record
under --results; the ratios printed at the end are measured in this one invocation. Graphs:
CiteSeer (from --data-root) and a synthetic graph; models GCN and SAGE, hidden 256, 3 layers.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench import run_cli
from benchmarks.datasets import PROJECT_ROOT


def pyg_baseline(args) -> None:
    """The plain PyG loop (run in a child process): GCNConv/SAGEConv stack, Adam, full batch."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv, SAGEConv

    from benchmarks.datasets import load_dataset
    from benchmarks.probes import MemoryProbe
    from benchmarks.record import environment, write_atomic

    dataset = {"name": args.dataset}
    if args.dataset == "synthetic":
        dataset.update(nodes=args.nodes, avg_degree=args.avg_degree, classes=8, features=args.features,
                       homophily=0.8, feature_noise=6.0, degree_skew=1.0, train_frac=0.3, val_frac=0.2,
                       test_frac=0.5, seed=0)
    graph = load_dataset(dataset, args.data_root)
    x, y, mask, edge_index = graph.x, graph.y, graph.train_mask, graph.edge_index()
    dims = [graph.num_features] + [args.hidden] * (args.layers - 1) + [graph.num_classes]
    torch.manual_seed(0)
    if args.model == "gcn":  # the graph already has its self-loops; cache the normalisation, as users do
        convs = [GCNConv(dims[i], dims[i + 1], add_self_loops=False, cached=True) for i in range(args.layers)]
    else:
        convs = [SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(args.layers)]
    convs = torch.nn.ModuleList(convs)
    opt = torch.optim.Adam(convs.parameters(), lr=0.01)
    del graph
    memory = MemoryProbe(torch.device("cpu"))
    memory.start_training()
    times = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        opt.zero_grad()
        h = x
        for i, conv in enumerate(convs):
            h = conv(F.dropout(h, 0.5, True), edge_index)
            if i < len(convs) - 1:
                h = F.relu(h)
        F.cross_entropy(h[mask], y[mask]).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    memory.pause()
    kept = times[1:] if len(times) > 1 else times
    mem = memory.result()
    write_atomic(Path(args.out), {
        "status": "ok", "method": "pyg_plain", "dataset": args.dataset, "model": args.model, "workers": 1,
        "env": environment("none", "cpu", torch.get_num_threads()),
        "history": [{"epoch": i, "epoch_time_s": t} for i, t in enumerate(times)],
        "summary": {"epoch_time_s_median": statistics.median(kept), "peak_rss_bytes_max": mem["peak_rss_bytes"],
                    "train_mem_delta_bytes_max": mem["train_mem_delta_bytes"]},
    })


def run_pyg(args, dataset: str, model: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_runtime", "--pyg-child", "--dataset", dataset, "--model", model,
           "--out", str(out), "--nodes", str(args.nodes), "--avg-degree", str(args.avg_degree),
           "--features", str(args.features), "--hidden", str(args.hidden), "--layers", str(args.layers),
           "--epochs", str(args.epochs)] + (["--data-root", args.data_root] if args.data_root else [])
    subprocess.run(cmd, cwd=PROJECT_ROOT, check=True)
    return json.loads(out.read_text())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["citeseer", "synthetic"])
    p.add_argument("--models", nargs="+", default=["gcn", "sage"])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--data-root", default=None)
    p.add_argument("--results", default="results/bench_runtime")
    p.add_argument("--pyg-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.pyg_child:
        return pyg_baseline(args)

    results = Path(args.results)
    rows = []
    for dataset in args.datasets:
        data = [f"dataset={dataset}"]
        if dataset == "synthetic":
            data += [f"dataset.nodes={args.nodes}", f"dataset.avg_degree={args.avg_degree}",
                     f"dataset.features={args.features}"]
        if args.data_root:
            data.append(f"data_root={args.data_root}")
        for model in args.models:
            common = [*data, f"model={model}", f"hidden={args.hidden}", f"layers={args.layers}",
                      f"epochs={args.epochs}", "warmup_epochs=1", f"eval_every={args.epochs}", "log_every=0",
                      "malloc_mmap_threshold=null",  # glibc's default allocator behaviour, as in the PyG child
                      f"results_dir={results}"]
            print(f"[{dataset} {model}] pyg_plain, single, full_halo(1)", flush=True)
            pyg = run_pyg(args, dataset, model, results / f"{dataset}-{model}-pyg_plain.json")
            single = run_cli(["method=single", *common])
            halo = run_cli(["method=full_halo", "workers=1", *common])
            t = {name: r["summary"]["epoch_time_s_median"] for name, r in
                 (("pyg", pyg), ("single", single), ("halo", halo))}
            m = {name: r["summary"]["peak_rss_bytes_max"] for name, r in
                 (("pyg", pyg), ("single", single), ("halo", halo))}
            rows.append({"dataset": dataset, "model": model, "pyg_s": t["pyg"], "single_s": t["single"],
                         "full_halo1_s": t["halo"], "pyg_over_single": t["pyg"] / t["single"],
                         "full_halo1_over_single": t["halo"] / t["single"], "pyg_peak_rss_GiB": m["pyg"] / 2**30,
                         "single_peak_rss_GiB": m["single"] / 2**30, "edges": single["graph"]["edges"]})
    print()
    print(f"{'dataset':<10} {'model':<5} {'pyg s':>8} {'single s':>9} {'halo1 s':>8} {'pyg/single':>11} "
          f"{'halo1/single':>13} {'pyg GiB':>8} {'single GiB':>10}")
    for r in rows:
        print(f"{r['dataset']:<10} {r['model']:<5} {r['pyg_s']:>8.3f} {r['single_s']:>9.3f} {r['full_halo1_s']:>8.3f} "
              f"{r['pyg_over_single']:>10.2f}x {r['full_halo1_over_single']:>12.2f}x {r['pyg_peak_rss_GiB']:>8.2f} "
              f"{r['single_peak_rss_GiB']:>10.2f}")
    (results / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"\nsummary: {results / 'summary.json'}  (goals: pyg/single >= 1 for GCN and >= 3 for SAGE on "
          "synthetic; halo1/single <= 1.1)")


if __name__ == "__main__":
    main()
