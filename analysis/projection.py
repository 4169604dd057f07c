"""`python -m analysis project <records dir> --hardware <profile> --workers 8,16,... [--graph STATS]`:
the cost model (`analysis.costmodel`) applied to every modelled configuration of a folder of records.

- At each record's own worker count the model is given the record's partition (`partition.*_per_rank`)
  and projects beside what the run measured (`measured_epoch_s`, `measured_train_mem_bytes`): the
  validation, when the profile is this machine's calibration.
- At each `--workers` P it is given the partition statistics of `--graph` (a
  `benchmarks.tools.partition_stats` JSON: measured or extrapolated, per P) and the graph's own features and
  classes, with the record's model, method and options: the projection to a cluster.

Writes `projection.json` (one row per method, model, workers and hardware, with every term),
`projection.md` and `figures/projection_*.png` (projected, so marked).
"""
from __future__ import annotations

import functools
import json
import math
import re
import statistics
from pathlib import Path

from analysis import PROJECT_ROOT, costmodel
from analysis.markdown import fmt, md_table
from analysis.records import BadRecord, is_whole
from benchmarks.run.methods_table import family
from benchmarks.base.traffic import Degrees, Rank, cache_hit_rate

GiB = 2 ** 30


def build_model(model: str, features: int, hidden: int, classes: int, layers: int, heads: int = 4,
                batch_norm: bool = False, dropout: float = 0.0, heads_concat: bool = True):
    """The suite's own model, for its counts (work per layer, exchange widths, parameters)."""
    from benchmarks.core.models import build_model as build
    return build(model, features, hidden, classes, layers, dropout, 0, heads=heads, batch_norm=batch_norm,
                 heads_concat=heads_concat)


def _model_of(cfg: dict, features: int, classes: int):
    """The model a record's configuration (its `config`, `RunConfig.as_dict()` when it ran) builds; a
    key the configuration leaves out (an older record's) takes the schema's default, not one retyped
    here. A run about to start is modelled from its `RunConfig` instead (`run_inputs`)."""
    from benchmarks.run.config import RunOptions
    from benchmarks.core.models import ModelOptions
    from benchmarks.base.options import defaults
    run, spec = {**defaults(RunOptions), **cfg}, {**defaults(ModelOptions), **cfg["model"]}
    model = build_model(spec["name"], features, run["hidden"], classes, run["layers"], spec["heads"],
                        run["batch_norm"], run["dropout"], spec["heads_concat"])
    model.kernel = run["kernel"]  # some memory terms are the kernel's (costmodel.kernel_of)
    return model


def skip_reason(record: dict) -> str | None:
    """Why a record is outside the model, or None."""
    if record["status"] != "ok":
        return "failed run"
    return outside_model(record["method"], record["config"])


def outside_model(method: str, cfg: dict) -> str | None:
    """Why a run of `method` with the configuration `cfg` (a record's `config`) is outside the model,
    or None: what `project` leaves out and the pre-flight memory check does not check."""
    return _outside(method, cfg.get("precision", "fp32"), (cfg.get("comm") or {}).get("quantize", "none"),
                    (cfg.get("memory") or {}).get("checkpoint", "none"), cfg["method"])


def outside_run(run) -> str | None:
    """`outside_model` for a run about to start, from its `RunConfig` (the pre-flight check)."""
    return _outside(run.method_name, run.precision, run.comm.quantize, run.memory.checkpoint, run.method)


def _outside(method: str, precision: str, quantize: str, checkpoint: str, options) -> str | None:
    why = costmodel.why_not_modelled(method)
    if why:
        return why
    if precision != "fp32" or quantize != "none":
        return "the model covers fp32 rows (no bf16/fp16, no quantised messages but AdaQP's)"
    if checkpoint != "none":
        return "the model has no activation checkpointing"
    from benchmarks.base.errors import UserError
    try:
        costmodel.typed_options(costmodel.plugin(method), options)
    except UserError as e:
        return f"options its plugin refuses ({e})"
    return None


def ranks_of(partition: dict, workers: int, peers: list[int] | None = None, graph: Degrees | None = None) -> list[Rank]:
    """Per-rank shapes from a record's `partition` section (with `peers`, its ranks' counted peers)
    or a partition-statistics entry, with the graph's `Degrees` (`graph_degrees`); where neither gives
    peers, every rank is taken to receive from every other. An extrapolated entry has no per-rank
    lists, only its `summary`: its largest rank stands for all."""
    if "nodes_per_rank" not in partition:
        s = partition["summary"]
        return [Rank(round(s["nodes_max"]), round(s["edges_max"]), round(s["halo_max"]), round(s["peers_max"]),
                     workers, s.get("train_max", 0), graph)]
    peers = peers or partition.get("peers_per_rank") or [workers - 1] * workers
    train = partition.get("train_nodes_per_rank") or [0] * workers
    return [Rank(int(n), int(e), int(h), int(k), workers, int(t), graph) for n, e, h, k, t in
            zip(partition["nodes_per_rank"], partition["edges_per_rank"], partition["halo_nodes_per_rank"], peers,
                train)]


#: Part counts the edge-cut share is stated at for the sampled families' shapes (cluster_gcn cuts
#: P x num_parts parts, GAS num_parts): powers of two, fitted beyond the largest measured.
CUT_PARTS = tuple(2 ** i for i in range(1, 14))


def graph_degrees(graph: dict, stats: dict | None = None, partition: dict | None = None,
                  workers: int = 1) -> Degrees | None:
    """The graph's `Degrees`: its degree histogram (a record's or a statistics file's `graph`) and its
    METIS cut shares, from a statistics file (`stats`: every P it holds, and the power law of
    `benchmarks.tools.partition_stats` fitted beyond them) and a record's own `partition` at `workers`.
    None where the graph states no histogram (records from before it)."""
    histogram = graph.get("degree_histogram")
    if not histogram:
        return None
    nodes, edges = graph["nodes"], graph["edges"]
    cuts = {}
    if stats:
        cuts = {int(p): cut_share(entry, nodes, edges) for p, entry in stats["by_workers"].items() if int(p) > 1}
    if partition and workers > 1 and "edge_cut" in partition:
        cuts[workers] = cut_share({"edge_cut": partition["edge_cut"]}, nodes, edges)
    measured = sorted(p for p in cuts if cuts[p] > 0)
    if len(measured) >= 2:
        from benchmarks.tools.partition_stats import TAIL_POINTS, _fit, _value
        tail = measured[-TAIL_POINTS:]
        fit = _fit("edge_cut_frac", tail, [cuts[p] for p in tail])
        for p in CUT_PARTS:
            if p > measured[-1]:
                cuts[p] = min(1.0, _value("edge_cut_frac", fit, p))
    return Degrees(tuple((float(d), float(n)) for d, n in histogram), tuple(sorted(cuts.items())))


def cut_share(entry: dict, nodes: int, edges: int) -> float:
    """A statistics entry's edge cut as a share of the graph's undirected edges (`edges` counts both
    directions and one self-loop a node): its `fractions.edge_cut_frac`, else its `summary`'s or its
    own `edge_cut` over those edges (`check_stats` holds one of them at every P > 1)."""
    f = entry.get("fractions") or {}
    if "edge_cut_frac" in f:
        return f["edge_cut_frac"]
    return (entry.get("summary") or {}).get("edge_cut", entry.get("edge_cut")) / max((edges - nodes) / 2, 1)


def matching_stats(graph: dict, stats_dir=None) -> dict | None:
    """The measured partition statistics of the same graph (name, nodes and edges), if any: the cut
    shares at other part counts than a record's own."""
    from benchmarks.tools.partition_stats import STATS_DIR
    key = (graph.get("name"), graph.get("nodes"), graph.get("edges"))
    return _stats_by_graph(str(stats_dir or STATS_DIR)).get(key)


@functools.cache
def _stats_by_graph(folder: str) -> dict:
    """The statistics files of `folder` by (name, nodes, edges), read once a process (a folder of
    records asks for each record)."""
    out = {}
    for stats in measured_stats(folder, required=False):
        g = stats["graph"]
        out.setdefault((g["name"], g["nodes"], g["edges"]), stats)
    return out


def row(record_or_setting: dict, proj: costmodel.Projection, workers: int, profile, **extra) -> dict:
    peak, host = costmodel.peaks(profile, proj.memory_terms, proj.train_mem_bytes)
    return {"method": record_or_setting["method"], "variant": record_or_setting.get("variant"),
            "family": family(costmodel.plugin(record_or_setting["method"])),
            "model": record_or_setting["model"], "dataset": record_or_setting["dataset"], "workers": workers,
            "hardware": profile.name, "projected_epoch_s": proj.epoch_s,
            "projected_train_mem_bytes": proj.train_mem_bytes, "projected_peak_mem_bytes": peak,
            "projected_host_mem_bytes": host, "fits": costmodel.fits(profile, workers, peak, host),
            "time_terms": proj.time_terms, "memory_terms": proj.memory_terms,
            "measured_epoch_s": None, "measured_train_mem_bytes": None, **extra}


_MISSING = object()


def _whole(value, what: str, least: int = 1) -> int:
    if value is _MISSING:
        raise BadRecord(f"missing field '{what}'")
    if not is_whole(value, least):
        raise BadRecord(f"{what} is {value!r}, not a whole number of at least {least}")
    return value


def record_inputs(record: dict) -> tuple:
    """The model and per-rank shapes a record is projected with, at its own worker count: from its
    `config` (model, hidden, layers), `graph` (features, classes) and `partition` (per-rank lists).
    Raises BadRecord (or KeyError) naming what is missing or of the wrong kind."""
    from benchmarks.base.errors import UserError
    cfg, graph, partition = record["config"], record["graph"], record["partition"]
    if not isinstance(graph, dict) or not isinstance(partition, dict) or not isinstance(cfg.get("model"), dict):
        raise BadRecord("field 'graph', 'partition' or 'config.model' is not a mapping")
    for key in ("features", "classes"):
        _whole(graph.get(key, _MISSING), f"graph.{key}")
    for key in ("hidden", "layers"):
        _whole(cfg.get(key, _MISSING), f"config.{key}")
    workers = record["workers"]
    for key in ("nodes_per_rank", "edges_per_rank", "halo_nodes_per_rank"):
        per_rank = partition[key]
        if not (isinstance(per_rank, list) and len(per_rank) == workers):
            raise BadRecord(f"partition.{key} is not a list of {workers} counts")
        for n in per_rank:
            _whole(n, f"an entry of partition.{key}", 0)
    try:
        model = _model_of(cfg, graph["features"], graph["classes"])
    except UserError as e:  # an unknown model name, options its layers refuse
        raise BadRecord(str(e)) from None
    per_rank = (record.get("summary") or {}).get("per_rank") or []
    peers = [p["peers"] for p in per_rank if isinstance(p, dict) and "peers" in p]  # absent in older records
    return model, _ranks(graph, partition, workers, peers if len(peers) == workers else None)


def run_inputs(run, graph: dict, partition: dict, workers: int) -> tuple:
    """`record_inputs` for a run about to start (the pre-flight check): the model its `RunConfig`
    builds (`benchmarks.run.train.model_for`, the run's own), and per-rank shapes from the prepared
    partition (`graph` and `partition` as its record will hold them; no peers counted yet)."""
    from benchmarks.run.train import model_for
    model = model_for(run, graph["features"], graph["classes"])
    model.kernel = run.kernel
    return model, _ranks(graph, partition, workers, None)


def _ranks(graph: dict, partition: dict, workers: int, peers: list[int] | None) -> list[Rank]:
    return ranks_of(partition, workers, peers, graph_degrees(graph, matching_stats(graph), partition, workers))


def measured_working_set(summary: dict) -> float | None:
    """What a record measured of the working set the cost model projects: the training delta less the
    library code its probe epochs faulted in (`train_data_delta_bytes_max`); a record from before that
    field gives its whole delta."""
    return summary.get("train_data_delta_bytes_max", summary.get("train_mem_delta_bytes_max"))


def check_record(record: dict) -> None:
    """What the projection reads of a record beyond what every consumer reads
    (`analysis.records.check`), for `records.load(folder, check_record)`: a record it will project
    (`skip_reason` is None) must have the inputs of `record_inputs`. A record it leaves out anyway
    (failed, a method off the model) is kept, to be listed with its reason."""
    if skip_reason(record) is None:
        record_inputs(record)
        if not isinstance(record.get("summary"), dict):
            raise BadRecord("field 'summary' is not a mapping")


def project_records(records: list[dict], profile, workers: list[int], graph_stats: dict | None,
                    hidden: int | None = None) -> tuple[list, list]:
    """Rows for every modelled record (measured beside projected) and, with `graph_stats`, for each
    distinct (method, variant, model) at each P of `workers` (with `hidden`, the records' models at
    that width). Returns (rows, skipped). Records are those of `records.load(folder, check_record)`."""
    rows, skipped, targets = [], [], {}
    for r in records:
        why = skip_reason(r)
        if why:
            skipped.append((Path(r.get("_path", "?")).name, why))
            continue
        if not costmodel.plugin(r["method"]).single_process:  # one process whatever `workers` says:
            # nothing to project to P ranks
            targets.setdefault((r["method"], r["variant"], r["model"]), r)
        if graph_stats:  # a projection elsewhere: a run measured here is no check of it
            continue
        model, ranks = record_inputs(r)
        s = r["summary"]
        try:  # a plugin whose hook raises leaves its records out with its one line; the others go on
            rows.append(row(r, costmodel.project(r["method"], r["config"]["method"], model, ranks, r["workers"],
                                                 profile), r["workers"], profile, seed=r["seed"],
                            projected_bytes_per_epoch=epoch_bytes(r["method"], r["config"]["method"], model,
                                                                  r["partition"], r["workers"], ranks[0].graph),
                            measured_bytes_per_epoch=s.get("comm_bytes_per_epoch"),
                            measured_epoch_s=s["epoch_time_s_median"],
                            measured_train_mem_bytes=measured_working_set(s), **process_peaks(r, model, ranks)))
        except costmodel.PluginFailed as e:
            skipped.append((Path(r.get("_path", "?")).name, str(e)))
    if graph_stats:
        g = graph_stats["graph"]
        for _, r in sorted(targets.items()):
            model = _model_of({**r["config"], **({"hidden": hidden} if hidden is not None else {})},
                              g["features"], g["classes"])
            try:
                projected, missing = project_setting(r, r["config"]["method"], model, graph_stats, workers, profile)
            except costmodel.PluginFailed as e:
                projected, missing = [], [(r["variant"] or r["method"], str(e))]
            rows += projected
            skipped += missing
    return rows, skipped


def process_peaks(record: dict, model, ranks: list[Rank]) -> dict:
    """The pre-flight memory check's quantity for a record (`record_inputs`' `model` and `ranks`): its
    largest rank process's projected peak (`costmodel.process_peak`, in the launching process unless
    its ranks were spawned) beside the measured one (`summary.process_peak_pss_bytes_max`; its RSS
    where PSS is unknown; None in records from before the probe had it)."""
    s = record["summary"]
    in_process = (record.get("env") or {}).get("launcher") != "spawn"
    return {"projected_process_peak_bytes": costmodel.process_peak(record["method"], record["config"]["method"], model,
                                                                   ranks, record["workers"], in_process),
            "measured_process_peak_bytes": s.get("process_peak_pss_bytes_max") or s.get("process_peak_rss_bytes_max")}


def project_setting(setting: dict, options, model, graph_stats: dict, workers: list[int], profile) -> tuple[list, list]:
    """One setting (its `method`, `variant` and model name, `model`: a record, or no record at all)
    with `options` and a built `model`, projected at each P of `workers` on the partition statistics
    `graph_stats`: what `project --workers` and `advise` share. Returns (rows, skipped)."""
    rows, skipped = [], []
    method = setting["method"]
    degrees = graph_degrees(graph_stats["graph"], graph_stats)
    for p in workers:
        stats = graph_stats["by_workers"].get(str(p))
        if stats is None:
            skipped.append((f"{method} at P={p}", f"no partition statistics for P={p} in the graph file"))
            continue
        proj = costmodel.project(method, options, model, ranks_of(stats, p, graph=degrees), p, profile)
        rows.append(row({**setting, "dataset": graph_stats["graph"]["name"]}, proj, p, profile,
                        partition_source=graph_stats.get("source", "measured"),
                        projected_bytes_per_epoch=epoch_bytes(method, options, model, stats, p, degrees)))
    return rows, skipped


def epoch_bytes(method, options, model, partition: dict, workers: int, degrees: Degrees | None = None) -> float:
    """Training bytes per epoch summed over the ranks (what the records count): each rank's traffic
    from per-rank lists, or, for an extrapolated entry (no lists), its mean rank's times P."""
    def moved(rank: Rank) -> float:
        return sum(t.bytes for t in costmodel.traffic(method, options, model, rank))

    if workers < 2 and not costmodel.plugin(method).single_process:  # one rank moves nothing between ranks
        return 0.0
    if "nodes_per_rank" in partition:
        return float(sum(moved(r) for r in ranks_of(partition, workers, graph=degrees)))
    s = partition["summary"]  # a hand-made summary may state only the maxima
    mean = Rank(*(round(s.get(f"{k}_mean", s[f"{k}_max"])) for k in ("nodes", "edges", "halo", "peers")), workers,
                s.get("train_mean", s.get("train_max", 0)), degrees)
    return workers * moved(mean)


#: Graphs too large to load here, by their totals: nodes, in-edges as the suite counts them (both
#: directions and a self-loop per node), features, classes, training nodes (OGB's dataset pages and
#: splits: products 196,615, papers100M 1,207,179; Reddit: its DGL/PyG loaders' 114,615,892 directed
#: edges plus self-loops, 153,431 training nodes).
TOTALS = {"ogbn-products": (2449029, 126167309, 100, 47, 196615),
          "ogbn-papers100M": (111059956, 3342431700, 128, 172, 1207179),
          "reddit": (232965, 114848857, 602, 41, 153431)}


def load_stats(graph: str, workers: list[int], stats_dir=None) -> dict:
    """`--graph`: a partition-statistics file (`benchmarks.tools.partition_stats`), or the name of a graph of
    TOTALS, whose statistics are a proxy (`proxy_stats`) from the measured graphs in `stats_dir`. A file
    without the fields the projection reads (`check_stats`) is refused with one line."""
    from benchmarks.base.errors import UserError
    if graph in TOTALS:
        nodes, edges, features, classes, train = TOTALS[graph]
        return proxy_stats(measured_stats(stats_dir), graph, nodes, edges, features, classes, workers, train)
    try:
        stats = json.loads(Path(graph).read_text())
        check_stats(stats)
    except OSError as e:
        raise UserError(f"--graph {graph}: not a partition-statistics file ({e}) nor one of "
                        f"{', '.join(TOTALS)}") from None
    except ValueError as e:  # a file, but not JSON of the schema: what is wrong, by key
        raise UserError(f"--graph {graph}: not a partition-statistics file ({e})") from None
    return stats


#: A statistics entry's per-rank lists (`benchmarks.tools.partition_stats.measure`): the first three
#: are what the projection needs, the other two it reads where present.
PER_RANK = ("nodes_per_rank", "edges_per_rank", "halo_nodes_per_rank", "peers_per_rank", "train_nodes_per_rank")
#: What an entry without per-rank lists (an extrapolated one) must state: its largest rank.
SUMMARY_MAXIMA = ("nodes_max", "edges_max", "halo_max", "peers_max")


def check_stats(stats) -> None:
    """The schema of a partition-statistics file (`benchmarks.tools.partition_stats`: measured,
    extrapolated or hand-made), held to everything the projection reads of one so that nothing fails
    later: raise ValueError naming the first key that is missing or of the wrong kind.
    - `graph`: `name` (text); `nodes`, `edges`, `features`, `classes` (whole numbers of at least 1);
      where present, `train_nodes` (a count) and `degree_histogram` ([degree, nodes] pairs of numbers).
    - `by_workers`: keyed by worker count P as written ("8": a whole number of at least 1), each entry
      a mapping with either the per-rank lists (PER_RANK: the first three, the others where present),
      each of P counts (every rank holding a node), or a `summary` stating SUMMARY_MAXIMA (`nodes_max`
      at least 1: the cost model's per-node rates divide by it); `summary` and `fractions`, where present,
      mappings of numbers; at P > 1 an edge cut (`edge_cut`, a count, `summary.edge_cut` or
      `fractions.edge_cut_frac`)."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0

    g = stats.get("graph") if isinstance(stats, dict) else None
    if not isinstance(g, dict):
        raise ValueError("no 'graph' mapping")
    if not isinstance(g.get("name"), str):
        raise ValueError("graph.name is not text")
    for key in ("nodes", "edges", "features", "classes"):
        if key not in g:
            raise ValueError(f"no key graph.{key}")
        if not is_whole(g[key], 1):
            raise ValueError(f"graph.{key} is {g[key]!r}, not a whole number of at least 1")
    if "train_nodes" in g and not is_whole(g["train_nodes"]):
        raise ValueError(f"graph.train_nodes is {g['train_nodes']!r}, not a count")
    histogram = g.get("degree_histogram", [])
    if not (isinstance(histogram, list) and all(isinstance(pair, list) and len(pair) == 2 and all(map(number, pair))
                                                for pair in histogram)):
        raise ValueError("graph.degree_histogram is not a list of [degree, nodes] pairs of numbers")
    if not isinstance(stats.get("by_workers"), dict):
        raise ValueError("no 'by_workers' mapping")
    for p, entry in stats["by_workers"].items():
        if not re.fullmatch(r"[1-9][0-9]*", p):
            raise ValueError(f"by_workers key {p!r} is not a worker count (a whole number of at least 1, as \"8\")")
        if not isinstance(entry, dict):
            raise ValueError(f"by_workers.{p} is not a mapping")
        for key in ("summary", "fractions"):
            if key in entry and not (isinstance(entry[key], dict) and all(map(number, entry[key].values()))):
                raise ValueError(f"by_workers.{p}.{key} is not a mapping of numbers")
        if "nodes_per_rank" in entry:
            for key in (k for k in PER_RANK if k in entry or k in PER_RANK[:3]):
                counts, least = entry[key], int(key == "nodes_per_rank")  # a rank holds a node at least
                if not (isinstance(counts, list) and len(counts) == int(p) and all(is_whole(n, least) for n in counts)):
                    raise ValueError(f"by_workers.{p}.{key} is not a list of {p} counts"
                                     + (" of at least 1" if least else ""))
        else:
            missing = [k for k in SUMMARY_MAXIMA if k not in (entry.get("summary") or {})]
            if missing:
                raise ValueError(f"by_workers.{p} has neither per-rank counts (nodes_per_rank, ...) nor a summary "
                                 f"of their maxima (no summary.{missing[0]})")
            if entry["summary"]["nodes_max"] < 1:
                raise ValueError(f"by_workers.{p}.summary.nodes_max is {entry['summary']['nodes_max']!r}, "
                                 "not at least 1")
        if "edge_cut" in entry and not is_whole(entry["edge_cut"]):
            raise ValueError(f"by_workers.{p}.edge_cut is {entry['edge_cut']!r}, not a count")
        if int(p) > 1 and not ("edge_cut" in entry or "edge_cut" in (entry.get("summary") or {})
                               or "edge_cut_frac" in (entry.get("fractions") or {})):
            raise ValueError(f"by_workers.{p} states no edge cut (edge_cut, summary.edge_cut or "
                             "fractions.edge_cut_frac)")


def measured_stats(stats_dir=None, required: bool = True) -> list[dict]:
    """Every measured partition-statistics file (data/partition_stats/ by default): the graphs a proxy
    can be taken from (`required`: at least one), each held to `check_stats` (a file that is not
    refused in one line naming it)."""
    from benchmarks.base.errors import UserError
    from benchmarks.tools.partition_stats import STATS_DIR
    folder = Path(stats_dir or STATS_DIR)
    stats = []
    for path in sorted(folder.glob("*.json")):
        try:
            stats.append(json.loads(path.read_text()))
            check_stats(stats[-1])
        except (OSError, ValueError) as e:
            raise UserError(f"{path}: not a partition-statistics file ({e})") from None
    if required and not stats:
        raise UserError(f"no measured partition statistics in {folder} to build a proxy from")
    return stats


def _median_max(xs: list[float]) -> dict:
    return {"n": len(xs), "median": statistics.median(xs) if xs else math.nan, "max": max(xs) if xs else math.nan}


def errors(rows: list[dict]) -> dict:
    """Relative errors of projected against measured, over the rows that have both. For the process
    peak also `under`: the largest measured peak over its projection, less 1 (the margin the
    pre-flight check needs to cover every run)."""
    def rel(p, m):
        return abs(p - m) / m if m else math.nan
    time = [rel(r["projected_epoch_s"], r["measured_epoch_s"]) for r in rows if r["measured_epoch_s"]]
    mem = [rel(r["projected_train_mem_bytes"], r["measured_train_mem_bytes"]) for r in rows
           if r["measured_train_mem_bytes"]]
    peaks = [(r["projected_process_peak_bytes"], r["measured_process_peak_bytes"]) for r in rows
             if r.get("measured_process_peak_bytes")]
    return {"epoch_time": _median_max(time), "train_mem": _median_max(mem),
            "process_peak": {**_median_max([rel(p, m) for p, m in peaks]),
                             "under": max((m / p - 1 for p, m in peaks), default=math.nan)}}


def by_family(rows: list[dict]) -> list[dict]:
    """`errors` per family (the runtime base a plugin stands on: `benchmarks.run.methods_table.family`),
    with how many rows' counted bytes the model states to the byte (within 0.1 %) and the median
    |error| of the others'."""
    out = []
    for name in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == name]
        counted = [(r["projected_bytes_per_epoch"], r["measured_bytes_per_epoch"]) for r in mine
                   if r.get("measured_bytes_per_epoch") and r.get("projected_bytes_per_epoch") is not None]
        off = [abs(p - m) / m for p, m in counted if abs(p - m) > 1e-3 * m]
        out.append({"family": name, "methods": sorted({r["variant"] or r["method"] for r in mine}), **errors(mine),
                    "bytes_exact": len(counted) - len(off), "bytes_counted": len(counted),
                    "bytes_other": _median_max(off)})
    return out


def family_table(rows: list[dict]) -> str:
    head = ["family", "methods", "runs", "epoch time: median error", "largest", "working set: median error",
            "largest", "bytes: to the byte", "others: median error"]
    body = [[f["family"], ", ".join(f["methods"]), f["epoch_time"]["n"], f"{f['epoch_time']['median']:.0%}",
             f"{f['epoch_time']['max']:.0%}", f"{f['train_mem']['median']:.0%}", f"{f['train_mem']['max']:.0%}",
             f"{f['bytes_exact']} of {f['bytes_counted']}",
             f"{f['bytes_other']['median']:.0%}" if f["bytes_other"]["n"] else ""] for f in by_family(rows)
            if f["epoch_time"]["n"]]
    return md_table(head, body)


def markdown(rows: list[dict], skipped: list, hardware: str) -> str:
    terms = [*costmodel.COMPUTE, "exchange", "allreduce", "hidden_exchange", "overlap"]
    head = ["dataset", "model", "method", "P", "projected MB/epoch", "measured MB", "projected epoch s", "measured s",
            "error", "projected train GiB",
            "measured GiB", "error", "peak GiB", "fits", "process peak GiB", "measured GiB", "error",
            *[f"{t} s" for t in terms]]
    body = []
    for r in sorted(rows, key=lambda r: (r["dataset"], r["model"], r["method"], r["workers"])):
        me, mm = r["measured_epoch_s"], r["measured_train_mem_bytes"]
        pb, mb = r.get("projected_bytes_per_epoch"), r.get("measured_bytes_per_epoch")
        body.append([r["dataset"], r["model"], r["variant"] or r["method"], r["workers"],
                     fmt(pb / 1e6, 3) if pb is not None else "", fmt(mb / 1e6, 3) if mb is not None else "",
                     fmt(r["projected_epoch_s"], 3),
                     fmt(me, 3) if me else "", f"{(r['projected_epoch_s'] - me) / me:+.0%}" if me else "",
                     fmt(r["projected_train_mem_bytes"] / GiB, 3), fmt(mm / GiB, 3) if mm else "",
                     f"{(r['projected_train_mem_bytes'] - mm) / mm:+.0%}" if mm else "",
                     fmt(r["projected_peak_mem_bytes"] / GiB, 3), "yes" if r["fits"] else "NO",
                     *_peak_cells(r), *[fmt(r["time_terms"].get(t, 0.0), 3) for t in terms]])
    e = errors(rows)
    text = [f"# Projection on `{hardware}` (projected, not measured, unless a measured column says so)", "",
            f"Epoch time: median |error| {e['epoch_time']['median']:.0%}, largest {e['epoch_time']['max']:.0%} "
            f"over {e['epoch_time']['n']} measured configurations; training working set: median "
            f"{e['train_mem']['median']:.0%}, largest {e['train_mem']['max']:.0%}." if e["epoch_time"]["n"] else
            "No measured configuration to compare with.", *_peak_line(e["process_peak"]), ""]
    if e["epoch_time"]["n"]:
        text += ["By family (errors are relative and unsigned; bytes: runs with traffic, to the byte within 0.1 %):",
                 "", family_table(rows), ""]
    text += [md_table(head, body)]
    if skipped:
        text += ["", "Left out:", *sorted({f"- {why}" for _, why in skipped})]
    return "\n".join(text) + "\n"


def _peak_cells(r: dict) -> list[str]:
    projected, measured = r.get("projected_process_peak_bytes"), r.get("measured_process_peak_bytes")
    if projected is None:
        return ["", "", ""]
    return [fmt(projected / GiB, 3), fmt(measured / GiB, 3) if measured else "",
            f"{(projected - measured) / measured:+.0%}" if measured else ""]


def _peak_line(e: dict) -> list[str]:
    """The process peak's validation (the pre-flight memory check's quantity), where records have it."""
    if not e["n"]:
        return []
    return ["", f"Process peak (what the pre-flight memory check compares, before its margin): median |error| "
                f"{e['median']:.0%}, largest {e['max']:.0%} over {e['n']} runs; the largest measured peak is "
                f"{e['under']:+.0%} over its projection (the margin that covers every run)."]


def write(rows: list[dict], skipped: list, hardware: str, out_dir) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps({"hardware": hardware, "errors": errors(rows),
                                                     "by_family": by_family(rows), "rows": rows,
                                                     "skipped": skipped}, indent=1))
    (out / "projection.md").write_text(markdown(rows, skipped, hardware))
    from analysis.figures import projection_vs_workers
    return [out / "projection.md", out / "projection.json", *projection_vs_workers(rows, out / "figures")]


# ---------------------------------------------------------------- published rows

#: How a published metric is read off a projection.
PUBLISHED_METRICS = {
    "epoch_time": lambda r: r["projected_epoch_s"],
    "comm_time_per_epoch": lambda r: sum(r["time_terms"][t] for t in ("exchange", "hidden_exchange", "allreduce")),
    "peak_memory_per_machine": lambda r: r["projected_peak_mem_bytes"],
    "peak_gpu_memory_allocated": lambda r: r["projected_peak_mem_bytes"],
    "gpu_memory_required": lambda r: r["projected_peak_mem_bytes"],
    # a feature cache's share of the sampled input rows (GNNLab, PaGraph: a cache of every node's
    # features on one device, so every row counts as `remote`)
    "cache_hit_rate": lambda r: r["cache_hit_rate"],
}
UNITS = {"s": 1.0, "GB": 1e9, "fraction": 1.0}
MODEL_NAMES = {"GraphSAGE": "sage", "GAT": "gat", "GCN": "gcn"}


def proxy_stats(proxies: list[dict], name: str, nodes: int, edges: int, features: int, classes: int,
                workers: list[int], train: int | None = None) -> dict:
    """Partition statistics for a graph that cannot be loaded here: the halo, peer and cut shares of
    the measured graph whose average degree is nearest (`benchmarks.tools.partition_stats.extrapolate`,
    fitted on its largest P), applied to this graph's totals. Marked `proxy` in every row."""
    from benchmarks.tools.partition_stats import extrapolate
    degree = edges / nodes

    def distance(s):  # degree first (to 10 %), then a graph that measured these P, then the larger graph
        measured = all(str(p) in s["by_workers"] for p in workers)
        return (round(abs(math.log(s["graph"]["edges"] / s["graph"]["nodes"] / degree)), 1), not measured,
                -s["graph"]["nodes"])
    nearest = min(proxies, key=distance)
    out = extrapolate(nearest, workers, nodes=nodes, edges=edges, name=name)
    proxy_degree = nearest["graph"]["edges"] / nearest["graph"]["nodes"]
    out["proxy"] += f" (average degree {proxy_degree:.0f} against {degree:.0f})"
    out["graph"].update(features=features, classes=classes)
    g0 = nearest["graph"]
    if g0.get("degree_histogram"):  # the proxy's degree shape, stretched to this graph's average degree
        stretch = (edges / nodes - 1) / max(g0["edges"] / g0["nodes"] - 1, 1e-12)
        out["graph"]["degree_histogram"] = [[1 + (d - 1) * stretch, n * nodes / g0["nodes"]]
                                            for d, n in g0["degree_histogram"]]
    if train:
        out["graph"]["train_nodes"] = train
        for p, entry in out["by_workers"].items():
            s = entry["summary"]
            s["train_mean"] = train / int(p)
            s["train_max"] = train / int(p) * entry["fractions"]["node_imbalance"]
    return out


def published_options(cls, text: str) -> dict:
    """The `key=value` settings of a reference row's `method_options` (`mode=sar; pipeline=true; ...`)
    that name options `cls` declares, as YAML values (a list in brackets: `fanouts=[15,10,5]`); the rest
    of the text is prose."""
    import dataclasses

    import yaml
    declared = {f.name for f in dataclasses.fields(cls.Options)}
    pairs = re.findall(r"(?:^|;)\s*([a-z_][a-z0-9_]*)=(\[[^\]]*\]|[^;\s:,()]+)", text or "")
    return {k: yaml.safe_load(v) for k, v in pairs if k in declared}


def project_published(rows: list[dict], proxies: list[dict], profiles: dict) -> list[dict]:
    """Each projectable row of results/reference/projection.csv projected on its paper's hardware
    profile, beside the published value, with the options its `method_options` sets
    (`published_options`). Rows that cannot be projected keep their reason."""
    from benchmarks.base.errors import UserError
    out = []
    for r in rows:
        base = {k: r[k] for k in ("table", "dataset", "model", "method", "workers", "metric", "value", "unit",
                                  "hardware")}
        why = r["why_not"] if r["projectable"] != "yes" else None
        if not why and not r["value"]:
            why = "no published value (the run ran out of memory)"
        if not why and r["metric"] not in PUBLISHED_METRICS:
            why = f"no projection of {r['metric']}"
        if not why and not r["hardware"]:
            why = "the hardware is not stated"
        if not why and not r["edges"]:
            why = "the graph's edge count is not published (the train-node subgraph)"
        if not why:
            why = costmodel.why_not_modelled(r["method"])
        if not why:
            cls = costmodel.plugin(r["method"])
            try:
                options = costmodel.typed_options(cls, published_options(cls, r["method_options"]))
            except UserError as e:
                why = f"options its plugin refuses ({e})"
            except costmodel.PluginFailed as e:
                why = str(e)
        if why:
            out.append({**base, "projected": None, "why_not": why})
            continue
        workers = int(r["workers"])
        nodes, edges = int(r["nodes"]), int(r["edges"])
        stats = proxy_stats(proxies, r["dataset"], nodes, edges, int(r["features"]), int(r["classes"]), [workers],
                            int(r["train_nodes"]) if r.get("train_nodes") else None)
        model_name = MODEL_NAMES[r["model"].split()[0]]
        model = build_model(model_name, int(r["features"]), int(r["hidden"]), int(r["classes"]), int(r["layers"]),
                            int(r["heads"] or 4), dropout=float(r["dropout"] or 0.5))
        degrees = graph_degrees(stats["graph"], stats)
        try:
            proj = costmodel.project(cls, options, model, ranks_of(stats["by_workers"][str(workers)], workers,
                                                                   graph=degrees), workers, profiles[r["hardware"]])
        except costmodel.PluginFailed as e:
            out.append({**base, "projected": None, "why_not": str(e)})
            continue
        hits = {"cache_hit_rate": cache_hit_rate(degrees, options.feature_cache, 1.0)} \
            if degrees and hasattr(options, "feature_cache") else {}
        projected = PUBLISHED_METRICS[r["metric"]](row({**base, "model": model_name, "variant": None}, proj, workers,
                                                       profiles[r["hardware"]], **hits))
        published = float(r["value"]) * UNITS[r["unit"]]
        out.append({**base, "projected": projected / UNITS[r["unit"]], "ratio": projected / published,
                    "partition": stats.get("proxy", "measured") if workers > 1 else "one rank",
                    "time_terms": proj.time_terms, "memory_terms": proj.memory_terms, "why_not": None})
    return out


def write_published(out_dir, reference=None, stats_dir=None) -> Path:
    """`published.md` and `published.json`: every row of the reference file, projected or with its
    reason, and the errors of the projected ones."""
    import csv

    from benchmarks.tools.hardware import load_profile
    reference = Path(reference or PROJECT_ROOT / "results" / "reference" / "projection.csv")
    rows = list(csv.DictReader(reference.open()))
    proxies = measured_stats(stats_dir)
    profiles = {name: load_profile(name)
                for name in {r["hardware"] for r in rows if r["projectable"] == "yes" and r["hardware"]}}
    result = project_published(rows, proxies, profiles)
    projected = [r for r in result if r["projected"] is not None]
    errs = _median_max([abs(r["ratio"] - 1) for r in projected])
    summary = {"n": len(projected), "within_2x": sum(max(r["ratio"], 1 / r["ratio"]) <= 2 for r in projected),
               "median_rel_error": errs["median"]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "published.json").write_text(json.dumps({"summary": summary, "rows": result}, indent=1))
    head = ["table", "dataset", "model", "method", "P", "metric", "published", "projected", "ratio", "hardware",
            "partition statistics"]
    body = [[r["table"], r["dataset"], r["model"], r["method"], r["workers"], r["metric"], f"{r['value']} {r['unit']}",
             fmt(r["projected"], 3) if r["projected"] is not None else "not projected",
             f"{r['ratio']:.2f}" if r["projected"] is not None else r["why_not"], r["hardware"],
             r.get("partition", "")] for r in result]
    text = ["# Published rows projected on their papers' hardware profiles", "",
            f"{summary['within_2x']} of {summary['n']} projected rows within 2x; median |error| "
            f"{summary['median_rel_error']:.0%}.", "", md_table(head, body)]
    (out / "published.md").write_text("\n".join(text) + "\n")
    return out / "published.md"
