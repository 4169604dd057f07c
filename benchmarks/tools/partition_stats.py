"""Partition statistics at the target scale (what the cost model needs): per-rank local nodes, in-edges,
halo nodes and peers, and the edge cut, for a graph partitioned to each P of a list, measured with
the suite's own partition path (`partition.partition`: the assignment, relabelling and cut that
`prepare_parts` caches, so the numbers are the record's `partition` section), or extrapolated from
measured P to larger P (or from a proxy graph to another graph's totals) by a fit whose error is shown.

    python -m benchmarks.tools.partition_stats dataset=synthetic dataset.nodes=200000 dataset.avg_degree=20 \\
        dataset.features=128 --workers 1,2,4,8,16,32,64,128 [--partitioner metis] \\
        [--extrapolate 256,512 [--fit-upto 16]]

Results: data/partition_stats/<dataset label>-<partitioner>[-s<seed>].json

    {"graph": {name, nodes, edges, features, classes, train_nodes, config}, "partitioner", "seed",
     "source": "measured",
     "by_workers": {"8": {nodes_per_rank, edges_per_rank, train_nodes_per_rank, halo_nodes_per_rank,
                          peers_per_rank, edge_cut, partition_time_s, cut_time_s,
                          halo_rows_per_node, cut_fraction, train_nodes_min, train_nodes_mean,
                          train_nodes_max, label_skew_per_rank, label_skew_mean, label_skew_max,
                          summary: {nodes_mean, nodes_max, ..., edge_cut}, fractions: {...}}, ...}}

The regime's statistics (halo_rows_per_node ... label_skew_max: `partition.REGIME_KEYS`, described in
docs/records.md) are optional for a reader: files measured before them lack them. A P already in the
file is not partitioned again (the file is the cache; it is used only for the same dataset config,
partitioner and seed), unless its entry predates the regime's statistics. `extrapolate` returns the
same `by_workers` shape with `summary` and `fractions` only (no per-rank lists, no regime statistics)
and `"source": "extrapolated"`. What the
projection reads of either shape is held by one schema, `analysis.projection.check_stats`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.core import datasets
from benchmarks.base.errors import Stopped, UserError, choose, stop_on_signals
from benchmarks.base.options import as_dict, defaults, validate
from benchmarks.core.partition import PARTITIONERS, REGIME_KEYS, partition
from benchmarks.base.outputs import check_writable, write_atomic

STATS_DIR = datasets.DATA / "partition_stats"  # shipped with the repository (data/README.md)


# --------------------------------------------------------------------------- configuration
def dataset_config(cfg_or_dataset: dict) -> tuple[dict, str | None]:
    """(the complete, validated dataset section, data_root) of a composed run config or of a bare
    dataset section (`{"name": "synthetic", "nodes": 1000}`; missing options take their defaults)."""
    full = "dataset" in cfg_or_dataset
    section = dict(cfg_or_dataset["dataset"] if full else cfg_or_dataset)
    if not isinstance(section.get("name"), str):
        raise UserError("the dataset section has no name (choose one with dataset=<name>)")
    options_cls = datasets.options(section["name"])
    options = validate(options_cls, section, section="dataset")
    return {"name": section["name"], **as_dict(options)}, (cfg_or_dataset.get("data_root") if full else None)


def label(dataset: dict) -> str:
    """`synthetic-avg_degree20-features128-nodes200000`: the name and the options that differ from
    the dataset's defaults (a real dataset: its name)."""
    base = defaults(datasets.options(dataset["name"]))
    extra = [f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in sorted(dataset.items())
             if k != "name" and base.get(k) != v]
    return "-".join([dataset["name"], *extra])


def results_path(dataset: dict, partitioner: str, seed: int, results_dir=STATS_DIR) -> Path:
    return Path(results_dir) / f"{label(dataset)}-{partitioner}{f'-s{seed}' if seed else ''}.json"


def check_workers(workers) -> list[int]:
    workers = list(workers)
    if not workers or any(isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in workers):
        raise UserError(f"workers must be a non-empty list of positive integers (got {workers!r})")
    return sorted(set(workers))


# --------------------------------------------------------------------------- measuring
def summary(nodes: list, edges: list, halo: list, peers: list, edge_cut: int) -> dict:
    """Mean and max per rank: the shape the cost model reads, measured or extrapolated."""
    out = {}
    for key, values in (("nodes", nodes), ("edges", edges), ("halo", halo), ("peers", peers)):
        out[f"{key}_mean"] = float(np.mean(values))
        out[f"{key}_max"] = int(max(values))
    out["edge_cut"] = int(edge_cut)
    return out


def fractions(s: dict, P: int, nodes: int, edges: int) -> dict:
    """A P's summary as scale-free quantities (what the fit extrapolates and what carries over to
    another graph's totals): halo per rank as a share of the graph's nodes, peers as a share of the
    other ranks, edge cut as a share of the undirected edges, and balance (max / mean per rank)."""
    undirected = max((edges - nodes) / 2, 1)  # `edges` counts both directions and one self-loop a node
    return {
        "halo_mean_frac": s["halo_mean"] / nodes, "halo_max_frac": s["halo_max"] / nodes,
        "peers_mean_share": s["peers_mean"] / (P - 1) if P > 1 else 0.0,
        "peers_max_share": s["peers_max"] / (P - 1) if P > 1 else 0.0,
        "edge_cut_frac": s["edge_cut"] / undirected,
        "node_imbalance": s["nodes_max"] / s["nodes_mean"], "edge_imbalance": s["edges_max"] / s["edges_mean"],
    }


def _load_cache(path: Path, graph_cfg: dict, partitioner: str, seed: int, log) -> dict | None:
    if not path.exists():
        return None
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        log(f"partition statistics {path} cannot be read ({e}); measuring again")
        return None
    if (cached.get("graph", {}).get("config") != graph_cfg or cached.get("partitioner") != partitioner
            or cached.get("seed", 0) != seed or cached.get("source") != "measured"):
        log(f"partition statistics {path} are for another dataset config, partitioner or seed; measuring again")
        return None
    return cached


def measure(cfg_or_dataset: dict, workers: list[int], partitioner: str = "metis", seed: int = 0,
            results_dir=STATS_DIR, log=print) -> dict:
    """Partition the graph of `cfg_or_dataset` (a composed run config or its `dataset` section) to
    every P of `workers` with `partition.partition` and return (and write, see the module's doc)
    the per-rank statistics. The graph is loaded once, and only when some P is not in the file."""
    workers = check_workers(workers)
    choose("partitioner", partitioner, PARTITIONERS)
    graph_cfg, data_root = dataset_config(cfg_or_dataset)
    path = results_path(graph_cfg, partitioner, seed, results_dir)
    stats = _load_cache(path, graph_cfg, partitioner, seed, log)
    missing = [P for P in workers if stats is None or str(P) not in stats["by_workers"]
               or not set(REGIME_KEYS) <= set(stats["by_workers"][str(P)])]  # measured before REGIME_KEYS
    if missing:
        t0 = time.perf_counter()
        graph = datasets.load_dataset(graph_cfg, data_root)
        log(f"loaded {graph.name} ({graph.num_nodes} nodes, {graph.num_edges} in-edges) "
            f"in {time.perf_counter() - t0:.1f} s")
        if max(missing) > graph.num_nodes:
            raise UserError(f"workers={max(missing)} exceeds the {graph.num_nodes} nodes of {graph.name}")
        if stats is None:
            stats = {"graph": {**{k: v for k, v in graph.summary().items() if k not in ("val_nodes", "test_nodes")},
                               "config": graph_cfg},
                     "partitioner": partitioner, "seed": seed, "source": "measured", "by_workers": {}}
        # The partition never reads the features: a zero-width copy keeps the relabelled graph and the
        # parts to the structure (at 1M nodes x 128 features that is half a GiB per copy saved).
        graph = replace(graph, x=graph.x[:, :0])
        for P in missing:
            t1 = time.perf_counter()
            _, parts, part_stats, partition_s = partition(graph, partitioner, P, seed)
            peers = [int((part.recv_counts > 0).sum()) for part in parts]  # ranks this rank receives rows from
            del parts
            entry = {k: part_stats[k] for k in ("nodes_per_rank", "edges_per_rank", "train_nodes_per_rank",
                                                 "halo_nodes_per_rank", "edge_cut", *REGIME_KEYS)}
            entry.update(peers_per_rank=peers, partition_time_s=partition_s,
                         cut_time_s=time.perf_counter() - t1 - partition_s)
            entry["summary"] = summary(entry["nodes_per_rank"], entry["edges_per_rank"],
                                       entry["halo_nodes_per_rank"], peers, entry["edge_cut"])
            entry["fractions"] = fractions(entry["summary"], P, graph.num_nodes, graph.num_edges)
            stats["by_workers"][str(P)] = entry
            stats["by_workers"] = dict(sorted(stats["by_workers"].items(), key=lambda kv: int(kv[0])))
            write_atomic(path, stats)  # after every P: a long run keeps what it measured
            log(f"P={P}: {partitioner} {partition_s:.1f} s, cut {entry['cut_time_s']:.1f} s")
    out = dict(stats, by_workers={str(P): stats["by_workers"][str(P)] for P in workers})
    out["path"] = str(path)
    return out


# --------------------------------------------------------------------------- extrapolating
# Fitted quantities. Halo per rank (as a share of N) and edge cut (as a share of the edges) follow
# y = c * P^b on log-log axes: a power law is the surface-to-volume law of a partitioned graph (a
# part of n = N/P nodes whose boundary grows as n^a has a halo share ~ P^-a, an edge cut ~ P^(1-a)),
# straight on log-log axes, two parameters, and it needs nothing the graph's totals do not give.
# Peers as a share of the other ranks, y = c * P^b, is 1 (b = 0) when every rank talks to every
# other (an expander-like graph) and falls as a power for graphs with locality; clipped to 1.
# The curves bend where the regime changes (at small P every rank's halo is most of the graph; a
# graph with k communities is cut along them up to P ~ k, then across them), so the line is fitted
# to the TAIL_POINTS largest measured P only: the local slope where the extrapolation starts. On
# the 200k-node synthetic graph (8 classes), a fit on P = 32, 64 predicts P = 128's mean halo
# within 2%, one on P <= 16 (before the bend) overestimates it 2.6x (docs/measurement.md).
# The balance (max / mean) is METIS's tolerance, not a function of P: the largest measured P's.
POWER_LAWS = ("halo_mean_frac", "halo_max_frac", "peers_mean_share", "peers_max_share", "edge_cut_frac")
CONSTANTS = ("node_imbalance", "edge_imbalance")
TAIL_POINTS = 3


def fit_power_law(ps: list[int], ys: list[float]) -> tuple[float, float]:
    """(c, b) of the least-squares line log y = log c + b log P."""
    if len(ps) == 1:
        return float(ys[0]), 0.0
    b, log_c = np.polyfit(np.log(ps), np.log(ys), 1)
    return float(math.exp(log_c)), float(b)


def _fit(quantity: str, ps: list[int], ys: list[float]) -> dict:
    """A power law fitted to the TAIL_POINTS largest P with a positive value, or for a balance (or a
    quantity that is 0 at every P) the largest P's value."""
    tail = [(p, y) for p, y in zip(ps, ys) if y > 0][-TAIL_POINTS:]
    if quantity in POWER_LAWS and tail:
        c, b = fit_power_law([p for p, _ in tail], [y for _, y in tail])
        return {"form": "c * P^b", "c": c, "b": b, "fitted_workers": [p for p, _ in tail]}
    return {"form": "largest measured P's value", "value": ys[-1]}


def _value(quantity: str, fit: dict, P: int) -> float:
    if "value" in fit:
        return fit["value"]
    cap = 1 - 1 / P if quantity.startswith("halo") else 1.0  # a halo never holds the rank's own nodes
    return min(fit["c"] * P ** fit["b"], cap)


def extrapolate(stats: dict, workers: list[int], nodes: int | None = None, edges: int | None = None,
                name: str | None = None) -> dict:
    """Project `stats` (measure's result, or a hand-made one: `graph` with `nodes` and `edges`, and
    per P either the per-rank lists or `fractions` with every key `fractions` writes, e.g. published
    halo shares) to every P of `workers`: a P of `stats` keeps its own fractions (`basis`:
    "measured"), any other P gets the fit's (`basis`: "fit").

    The power laws are fitted to the TAIL_POINTS largest measured P > 1 (P = 1 has no halo). The
    error is that of holding out the largest measured P and predicting it from the others the same
    way: `fit.holdout_rel_error[q]` = |predicted - measured| / measured (None with fewer than three
    measured P > 1).

    PROXY: with `nodes` and `edges` (and `name`) of another graph, the fractions measured on the
    graph of `stats` are applied to those totals: an estimate for a graph that cannot be loaded, valid
    only as far as the two graphs partition alike; the result says so in `proxy`."""
    workers = check_workers(workers)
    graph = stats["graph"]
    measured = sorted((int(P), entry) for P, entry in stats["by_workers"].items() if int(P) > 1)
    if not measured:
        raise UserError("extrapolation needs statistics for at least one P > 1")
    N0, E0 = graph["nodes"], graph["edges"]
    series = {P: entry.get("fractions") or fractions(entry.get("summary") or summary(
        entry["nodes_per_rank"], entry["edges_per_rank"], entry["halo_nodes_per_rank"], entry["peers_per_rank"],
        entry["edge_cut"]), P, N0, E0) for P, entry in measured}
    quantities = (*POWER_LAWS, *CONSTANTS)
    for P, f in series.items():
        if set(quantities) - set(f):
            raise UserError(f"the statistics for P={P} lack {', '.join(sorted(set(quantities) - set(f)))}")
    ps = [P for P, _ in measured]
    fit, errors = {}, {}
    for q in quantities:
        ys = [series[P][q] for P in ps]
        fit[q] = _fit(q, ps, ys)
        errors[q] = None
        if len(ps) >= 3:
            guess = _value(q, _fit(q, ps[:-1], ys[:-1]), ps[-1])
            errors[q] = abs(guess - ys[-1]) / ys[-1] if ys[-1] else (0.0 if guess == 0 else None)
    N = nodes if nodes is not None else N0
    E = edges if edges is not None else E0
    by_workers = {}
    for P in workers:
        # A measured P keeps its measured fractions (a proxy's P applies them to the other totals).
        basis = "measured" if P in series else "fit"
        f = {q: series[P][q] if P in series else _value(q, fit[q], P) for q in quantities}
        if P == 1:  # one rank: no halo, no peers, no cut
            f.update({q: 0.0 for q in POWER_LAWS})
        s = {"nodes_mean": N / P, "nodes_max": N / P * f["node_imbalance"],
             "edges_mean": E / P, "edges_max": E / P * f["edge_imbalance"],
             "halo_mean": f["halo_mean_frac"] * N, "halo_max": f["halo_max_frac"] * N,
             "peers_mean": f["peers_mean_share"] * (P - 1), "peers_max": f["peers_max_share"] * (P - 1),
             "edge_cut": f["edge_cut_frac"] * max((E - N) / 2, 1)}
        by_workers[str(P)] = {"summary": s, "fractions": f, "basis": basis}
    out = {"graph": {"name": name or graph["name"], "nodes": N, "edges": E},
           "partitioner": stats.get("partitioner"), "source": "extrapolated",
           "fit": {"measured_workers": ps, "quantities": fit, "holdout_workers": ps[-1] if len(ps) >= 3 else None,
                   "holdout_rel_error": errors},
           "by_workers": by_workers}
    if nodes is not None or edges is not None:
        out["proxy"] = (f"PROXY: fractions measured on {graph['name']} ({N0} nodes, {E0} edges) applied to "
                        f"{out['graph']['name']}'s totals ({N} nodes, {E} edges)")
    return out


# --------------------------------------------------------------------------- command line
def _regime(entry: dict) -> str:
    """The regime's statistics of a measured entry (`partition.REGIME_KEYS`); blank for an
    extrapolated one, which has none."""
    if not set(REGIME_KEYS) <= set(entry):
        return ""
    skew = "-" if entry["label_skew_mean"] is None else f"{entry['label_skew_mean']:.2f}/{entry['label_skew_max']:.2f}"
    train = f"{entry['train_nodes_min']}/{entry['train_nodes_mean']:.1f}/{entry['train_nodes_max']}"
    return f" {entry['halo_rows_per_node']:>9.3f} {entry['cut_fraction']:>8.3f} {train:>16} {skew:>10}"


def table(by_workers: dict) -> str:
    head = (f"{'P':>5} {'nodes mean':>11} {'max':>9} {'edges mean':>11} {'max':>10} {'halo mean':>10} "
            f"{'max':>9} {'peers mean':>10} {'max':>5} {'edge cut':>10} {'seconds':>8}")
    if any(set(REGIME_KEYS) <= set(entry) for entry in by_workers.values()):
        head += f" {'halo/node':>9} {'cut frac':>8} {'train min/mean/max':>16} {'skew mean/max':>10}"
    rows = [head]
    for P, entry in by_workers.items():
        s = entry["summary"]
        secs = "" if "partition_time_s" not in entry else f"{entry['partition_time_s'] + entry['cut_time_s']:.1f}"
        rows.append(f"{P:>5} {s['nodes_mean']:>11.0f} {s['nodes_max']:>9.0f} {s['edges_mean']:>11.0f} "
                    f"{s['edges_max']:>10.0f} {s['halo_mean']:>10.0f} {s['halo_max']:>9.0f} {s['peers_mean']:>10.1f} "
                    f"{s['peers_max']:>5.0f} {s['edge_cut']:>10.0f} "
                    f"{secs:>8}{_regime(entry)}")
    return "\n".join(rows)


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma list of integers (got {text!r})") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.partition_stats",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides: dataset=<name> dataset.<key>=<value> seed=...")
    parser.add_argument("--workers", type=_ints, required=True, help="P to measure, e.g. 8,16,32")
    parser.add_argument("--partitioner", choices=PARTITIONERS, default=None, help="default: the config's (metis)")
    parser.add_argument("--extrapolate", type=_ints, default=None,
                        help="P to project to from the measured --workers (compared with measured values in the file)")
    parser.add_argument("--results-dir", default=str(STATS_DIR))
    args = parser.parse_args(argv)
    import torch

    # The cut is many small tensor ops per rank: on a busy machine threads only contend (building 32
    # parts of a 50k-node graph took 3.8 s with 2 threads on 2 shared cores, 0.9 s with one).
    torch.set_num_threads(1)
    try:
        from benchmarks.commands.composition import check_composes, config_of
        from benchmarks.run.config import check
        from benchmarks.base.registry import check_overrides

        overrides = args.overrides + ([f"partitioner={args.partitioner}"] if args.partitioner else [])
        check_overrides(overrides)
        check_composes(overrides)
        cfg = config_of(overrides)
        run = check(cfg)
        check_writable("--results-dir", args.results_dir)  # found now, not after the first partition
        graph_cfg, _ = dataset_config(cfg)
        where = results_path(graph_cfg, run.partitioner, run.seed, args.results_dir)
        try:
            with stop_on_signals():  # a stop keeps every P measured so far (written after each)
                stats = measure(cfg, args.workers, run.partitioner, run.seed, args.results_dir,
                                log=lambda m: print(m, file=sys.stderr))
        except Stopped as e:
            kept = where if where.exists() else "nothing measured yet"
            print(f"{e}: partition statistics so far in {kept}", file=sys.stderr)
            sys.exit(128 + e.signum)
        print(f"{stats['graph']['name']} ({stats['graph']['nodes']} nodes, {stats['graph']['edges']} in-edges), "
              f"{stats['partitioner']}, measured: {stats['path']}")
        print(table(stats["by_workers"]))
        if args.extrapolate:
            projected = extrapolate(stats, args.extrapolate)
            print(f"\nextrapolated from P = {projected['fit']['measured_workers']} "
                  f"(hold-out error at P = {projected['fit']['holdout_workers']}: "
                  + ", ".join(f"{q} {e:.1%}" for q, e in projected["fit"]["holdout_rel_error"].items()
                              if e is not None) + ")")
            print(table(projected["by_workers"]))
            on_file = _load_cache(Path(stats["path"]), stats["graph"]["config"], stats["partitioner"], stats["seed"],
                                  log=lambda m: None)["by_workers"]
            compared = [P for P in projected["by_workers"] if P in on_file]
            if compared:
                print("\nrelative error of the extrapolation against the measured values:")
                keys = ("halo_mean", "halo_max", "peers_mean", "peers_max", "edge_cut", "nodes_max", "edges_max")
                print(f"{'P':>5} " + " ".join(f"{k:>10}" for k in keys))
                for P in compared:
                    got, want = projected["by_workers"][P]["summary"], on_file[P]["summary"]
                    print(f"{P:>5} " + " ".join(f"{(got[k] - want[k]) / want[k]:>+10.1%}" if want[k] else f"{'-':>10}"
                                                for k in keys))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
