"""SAR's memory claim on one machine: per-rank training working set and epoch time of `single`,
`full_halo` and `sar` in its three modes, for workers 1, 2, 4, 8, on the `experiment=sar_memory`
graph (a ~200k-node synthetic graph of average degree 20, 128 features; 3 layers, hidden 256,
GAT 4 x 64), then the largest graph that fits a per-rank budget under `full_halo` and `sar`.

    python -m benchmarks.bench_sar [--models sage gat] [--workers 1 2 4 8] [--budget-gib 2] [--skip-fit]
    python -m benchmarks.bench_sar --anchor-only   # against IntelLabs/SAR's numbers on this machine

Every run is its own process and writes its record under --results; the ratios printed at the
end are measured in this invocation.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.bench import label, run_cli

METHODS = [("full_halo", []), ("sar", ["method.mode=sar"]), ("sar", ["method.mode=sa"]),
           ("sar", ["method.mode=one_shot"])]
GIB = 2 ** 30


def sweep(args, results: Path) -> list[dict]:
    base = ["experiment=sar_memory", f"dataset.nodes={args.nodes}", f"epochs={args.epochs}",
            f"eval_every={args.epochs}", "log_every=0", f"results_dir={results}"]
    records = []
    for model in args.models:
        print(f"[{model}] single", flush=True)
        records.append(run_cli([*base, f"model={model}", "method=single"]))
        for workers in args.workers:
            for method, extra in METHODS:
                print(f"[{model}] {method} {' '.join(extra)} workers={workers}", flush=True)
                records.append(run_cli([*base, f"model={model}", f"method={method}", *extra, f"workers={workers}"]))
    return records


def row(r: dict) -> dict:
    s = r["summary"]
    return {"model": r["model"], "method": label(r), "workers": r["workers"], "epoch_s": s["epoch_time_s_median"],
            "train_ws_max_GiB": s["train_mem_delta_bytes_max"] / GIB, "peak_rss_max_GiB": s["peak_rss_bytes_max"] / GIB,
            "comm_MB_per_epoch": s["comm_bytes_per_epoch"] / 1e6}


def fits(args, results: Path, method: list[str], nodes: int) -> tuple[bool, dict]:
    record = run_cli(["experiment=sar_memory", "model=gat", *method, "workers=4", f"dataset.nodes={nodes}",
                      "epochs=2", "eval_every=1000", "log_every=0", f"results_dir={results}"], check=False)
    ok = record["status"] == "ok" and record["summary"]["train_mem_delta_bytes_max"] <= args.budget_gib * GIB
    return ok, record


def largest_fitting(args, results: Path, method: list[str], per_node_bytes: float) -> dict:
    """Bisection on the node count (average degree fixed) for the largest graph whose largest rank's
    training working set stays within the budget; the first bracket comes from a linear estimate."""
    guess = int(args.budget_gib * GIB / per_node_bytes)
    lo, hi = None, None
    probes = []
    nodes = guess
    while lo is None or hi is None:  # find a bracket around the estimate
        ok, record = fits(args, results, method, nodes)
        probes.append({"nodes": nodes, "fits": ok, "train_ws_max_GiB": _ws(record)})
        print(f"  {' '.join(method)} nodes={nodes}: {'fits' if ok else 'too big'} ({_ws(record):.2f} GiB)", flush=True)
        if ok:
            lo, nodes = nodes, int(nodes * 1.5) if hi is None else nodes
        else:
            hi, nodes = nodes, int(nodes / 1.5) if lo is None else nodes
    while hi - lo > args.fit_tolerance * lo:
        mid = (lo + hi) // 2
        ok, record = fits(args, results, method, mid)
        probes.append({"nodes": mid, "fits": ok, "train_ws_max_GiB": _ws(record)})
        print(f"  {' '.join(method)} nodes={mid}: {'fits' if ok else 'too big'} ({_ws(record):.2f} GiB)", flush=True)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return {"method": " ".join(method), "largest_nodes": lo, "smallest_too_big": hi, "probes": probes}


def _ws(record: dict) -> float:
    return record["summary"]["train_mem_delta_bytes_max"] / GIB if record["status"] == "ok" else float("nan")


# IntelLabs/SAR (DGL 2.1, gloo) measured on this machine's kind (2 cores): 100k nodes, 2M edges,
# 128 features, SAGE 3x256; seconds per iteration and per-rank peak RSS (GB) at 1 / 2 / 4 workers.
SAR_PUBLIC_ANCHOR = {1: (1.54, 1.79), 2: (1.82, 1.39), 4: (1.68, 1.38)}


def anchor(results: Path) -> list[dict]:
    """Our `sar` on the anchor's graph and model, beside the public implementation's numbers."""
    rows = []
    for workers, (their_s, their_gb) in SAR_PUBLIC_ANCHOR.items():
        r = run_cli(["experiment=sar_memory", "model=sage", "method=sar", f"workers={workers}", "dataset.nodes=100000",
                     "epochs=6", "eval_every=6", "log_every=0", f"results_dir={results / 'anchor'}"])
        s = r["summary"]
        rows.append({"workers": workers, "epoch_s": s["epoch_time_s_median"], "peak_rss_GB": s["peak_rss_bytes_max"] / 1e9,
                     "train_ws_GB": s["train_mem_delta_bytes_max"] / 1e9, "edges": r["graph"]["edges"],
                     "sar_public_s": their_s, "sar_public_peak_rss_GB": their_gb})
    print(f"\nanchor (100k nodes, ~2M edges, SAGE 3x256): {'workers':>7} {'ours s':>7} {'public s':>8} "
          f"{'ours peak GB':>12} {'public peak GB':>14} {'ours train WS GB':>16}")
    for r in rows:
        print(f"{'':44}{r['workers']:>7} {r['epoch_s']:>7.2f} {r['sar_public_s']:>8.2f} {r['peak_rss_GB']:>12.2f} "
              f"{r['sar_public_peak_rss_GB']:>14.2f} {r['train_ws_GB']:>16.3f}")
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["sage", "gat"])
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--budget-gib", type=float, default=2.0)
    p.add_argument("--fit-tolerance", type=float, default=0.1, help="stop bisecting within this relative gap")
    p.add_argument("--skip-fit", action="store_true", help="skip the largest-graph bisection")
    p.add_argument("--anchor-only", action="store_true", help="only the comparison with SAR's public code")
    p.add_argument("--results", default="results/sar_memory")
    args = p.parse_args(argv)
    results = Path(args.results)
    if args.anchor_only:
        (results / "anchor").mkdir(parents=True, exist_ok=True)
        (results / "anchor" / "summary.json").write_text(json.dumps(anchor(results), indent=1))
        return

    rows = [row(r) for r in sweep(args, results)]
    print(f"\n{'model':<5} {'method':<14} {'workers':>7} {'epoch s':>8} {'train WS GiB':>12} {'peak RSS GiB':>12} "
          f"{'comm MB/ep':>10}")
    for r in rows:
        print(f"{r['model']:<5} {r['method']:<14} {r['workers']:>7} {r['epoch_s']:>8.3f} {r['train_ws_max_GiB']:>12.3f} "
              f"{r['peak_rss_max_GiB']:>12.3f} {r['comm_MB_per_epoch']:>10.1f}")

    def pick(model, method, workers):
        return next((r for r in rows if (r["model"], r["method"], r["workers"]) == (model, method, workers)), None)

    ratios = {}
    for model in args.models:
        single, halo, sar = pick(model, "single", 1), pick(model, "full_halo", 4), pick(model, "sar", 4)
        if single and halo and sar:
            ratios[model] = {"sar_ws_over_single": sar["train_ws_max_GiB"] / single["train_ws_max_GiB"],
                             "sar_ws_over_full_halo": sar["train_ws_max_GiB"] / halo["train_ws_max_GiB"],
                             "sar_time_over_full_halo": sar["epoch_s"] / halo["epoch_s"]}
    print("\nat 4 workers (largest rank's training working set; median epoch time):")
    for model, r in ratios.items():
        print(f"  {model}: sar/single memory {r['sar_ws_over_single']:.2f}x, sar/full_halo memory "
              f"{r['sar_ws_over_full_halo']:.2f}x, sar/full_halo time {r['sar_time_over_full_halo']:.2f}x")

    fit = []
    if not args.skip_fit and "gat" in args.models:
        print(f"\nlargest GAT graph within {args.budget_gib} GiB per rank, 4 workers:", flush=True)
        for method, name in ((["method=full_halo"], "full_halo"), (["method=sar", "method.mode=sar"], "sar")):
            r = pick("gat", name, 4)
            # Working set per node of the whole graph, measured at 4 workers in the sweep above.
            per_node = r["train_ws_max_GiB"] * GIB / args.nodes if r else 1e4
            fit.append(largest_fitting(args, results, method, per_node))
        print(f"  full_halo: {fit[0]['largest_nodes']} nodes; sar: {fit[1]['largest_nodes']} nodes; "
              f"ratio {fit[1]['largest_nodes'] / fit[0]['largest_nodes']:.2f}x")
    (results / "summary.json").write_text(json.dumps({"rows": rows, "ratios_at_4_workers": ratios,
                                                      "largest_fitting": fit}, indent=1))
    print(f"\nsummary: {results / 'summary.json'}")


if __name__ == "__main__":
    main()
