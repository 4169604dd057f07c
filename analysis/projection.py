"""`python -m analysis project <records dir> --hardware <profile> --workers 8,16,... [--graph STATS]`:
the cost model (`analysis.costmodel`) applied to every modelled configuration of a folder of records.

- At each record's own worker count the model is given the record's partition (`partition.*_per_rank`)
  and projects beside what the run measured (`measured_epoch_s`, `measured_train_mem_bytes`): the
  validation, when the profile is this machine's calibration.
- At each `--workers` P it is given the partition statistics of `--graph` (a
  `benchmarks.partition_stats` JSON: measured or extrapolated, per P) and the graph's own features and
  classes, with the record's model, method and options: the projection to a cluster.

Writes `projection.json` (one row per method, model, workers and hardware, with every term),
`projection.md` and `figures/projection_*.png` (projected, so marked).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from analysis import costmodel
from analysis.costmodel import Rank
from analysis.markdown import fmt, md_table

GiB = 2 ** 30


def build_model(model: str, features: int, hidden: int, classes: int, layers: int, heads: int = 4,
                batch_norm: bool = False):
    """The suite's own model, for its counts (work per layer, exchange widths, parameters)."""
    from benchmarks.models import build_model as build
    return build(model, features, hidden, classes, layers, 0.0, 0, heads=heads, batch_norm=batch_norm)


def _model_of(cfg: dict, features: int, classes: int):
    return build_model(cfg["model"]["name"], features, cfg["hidden"], classes, cfg["layers"],
                       cfg["model"].get("heads", 4), cfg.get("batch_norm", False))


def skip_reason(record: dict) -> str | None:
    """Why a record is outside the model, or None."""
    cfg = record["config"]
    if record["status"] != "ok":
        return "failed run"
    if record["method"] not in costmodel.MODELLED:
        return f"no traffic pattern for {record['method']} (mini-batch methods move what their samplers draw)"
    if cfg.get("precision", "fp32") != "fp32" or (cfg.get("comm") or {}).get("quantize", "none") != "none":
        return "the model covers fp32 rows (no bf16/fp16, no quantised messages but AdaQP's)"
    if (cfg.get("memory") or {}).get("checkpoint", "none") != "none":
        return "the model has no activation checkpointing"
    return None


def ranks_of(partition: dict, workers: int) -> list[Rank]:
    """Per-rank shapes from a record's `partition` section or a partition-statistics entry (without
    `peers_per_rank`, every rank is taken to receive from every other)."""
    peers = partition.get("peers_per_rank") or [workers - 1] * workers
    return [Rank(int(n), int(e), int(h), int(k)) for n, e, h, k in
            zip(partition["nodes_per_rank"], partition["edges_per_rank"], partition["halo_nodes_per_rank"], peers)]


def row(record_or_setting: dict, proj: costmodel.Projection, workers: int, hardware: str, **extra) -> dict:
    return {"method": record_or_setting["method"], "variant": record_or_setting.get("variant"),
            "model": record_or_setting["model"], "dataset": record_or_setting["dataset"], "workers": workers,
            "hardware": hardware, "projected_epoch_s": proj.epoch_s,
            "projected_train_mem_bytes": proj.train_mem_bytes,
            "projected_peak_mem_bytes": proj.train_mem_bytes + proj.memory_terms["static"],
            "time_terms": proj.time_terms, "memory_terms": proj.memory_terms,
            "measured_epoch_s": None, "measured_train_mem_bytes": None, **extra}


def project_records(records: list[dict], profile, workers: list[int], graph_stats: dict | None) -> tuple[list, list]:
    """Rows for every modelled record (measured beside projected) and, with `graph_stats`, for each
    distinct (method, variant, model) at each P of `workers`. Returns (rows, skipped)."""
    rows, skipped, targets = [], [], {}
    for r in records:
        why = skip_reason(r)
        if why:
            skipped.append((Path(r.get("_path", "?")).name, why))
            continue
        cfg, graph = r["config"], r["graph"]
        model = _model_of(cfg, graph["features"], graph["classes"])
        ranks = ranks_of(r["partition"], r["workers"])
        proj = costmodel.project(r["method"], cfg["method"], model, ranks, r["workers"], profile)
        s = r["summary"]
        rows.append(row(r, proj, r["workers"], profile.name, seed=r["seed"],
                        measured_epoch_s=s["epoch_time_s_median"],
                        measured_train_mem_bytes=s.get("train_mem_delta_bytes_max")))
        targets.setdefault((r["method"], r["variant"], r["model"]), r)
    if graph_stats:
        g = graph_stats["graph"]
        for (method, variant, model_name), r in sorted(targets.items()):
            model = _model_of(r["config"], g["features"], g["classes"])
            for p in workers:
                stats = graph_stats["by_workers"].get(str(p))
                if stats is None:
                    skipped.append((f"{method} at P={p}", f"no partition statistics for P={p} in the graph file"))
                    continue
                proj = costmodel.project(method, r["config"]["method"], model, ranks_of(stats, p), p, profile)
                rows.append(row({**r, "dataset": g["name"]}, proj, p, profile.name,
                                partition_source=graph_stats.get("source", "measured")))
    return rows, skipped


def load_stats(path) -> dict:
    """A partition-statistics file (`benchmarks.partition_stats`); a missing one is a one-line error."""
    from benchmarks.errors import UserError
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read partition statistics {path}: {e}") from None


def errors(rows: list[dict]) -> dict:
    """Relative errors of projected against measured, over the rows that have both."""
    def rel(p, m):
        return abs(p - m) / m if m else math.nan
    time = [rel(r["projected_epoch_s"], r["measured_epoch_s"]) for r in rows if r["measured_epoch_s"]]
    mem = [rel(r["projected_train_mem_bytes"], r["measured_train_mem_bytes"]) for r in rows
           if r["measured_train_mem_bytes"]]
    import statistics
    summary = lambda xs: {"n": len(xs), "median": statistics.median(xs) if xs else math.nan,
                          "max": max(xs) if xs else math.nan}
    return {"epoch_time": summary(time), "train_mem": summary(mem)}


def markdown(rows: list[dict], skipped: list, hardware: str) -> str:
    terms = ["dense", "aggregate", "elementwise", "exchange", "allreduce", "hidden_exchange", "overlap"]
    head = ["dataset", "model", "method", "P", "projected epoch s", "measured s", "error", "projected train GiB",
            "measured GiB", "error", *[f"{t} s" for t in terms]]
    body = []
    for r in sorted(rows, key=lambda r: (r["dataset"], r["model"], r["method"], r["workers"])):
        me, mm = r["measured_epoch_s"], r["measured_train_mem_bytes"]
        body.append([r["dataset"], r["model"], r["variant"] or r["method"], r["workers"], fmt(r["projected_epoch_s"], 3),
                     fmt(me, 3) if me else "", f"{(r['projected_epoch_s'] - me) / me:+.0%}" if me else "",
                     fmt(r["projected_train_mem_bytes"] / GiB, 3), fmt(mm / GiB, 3) if mm else "",
                     f"{(r['projected_train_mem_bytes'] - mm) / mm:+.0%}" if mm else "",
                     *[fmt(r["time_terms"].get(t, 0.0), 3) for t in terms]])
    e = errors(rows)
    text = [f"# Projection on `{hardware}` (projected, not measured, unless a measured column says so)", "",
            f"Epoch time: median |error| {e['epoch_time']['median']:.0%}, largest {e['epoch_time']['max']:.0%} "
            f"over {e['epoch_time']['n']} measured configurations; training working set: median "
            f"{e['train_mem']['median']:.0%}, largest {e['train_mem']['max']:.0%}." if e["epoch_time"]["n"] else
            "No measured configuration to compare with.", "", md_table(head, body)]
    if skipped:
        text += ["", "Left out:", *sorted({f"- {why}" for _, why in skipped})]
    return "\n".join(text) + "\n"


def write(rows: list[dict], skipped: list, hardware: str, out_dir) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps({"hardware": hardware, "errors": errors(rows), "rows": rows,
                                                     "skipped": skipped}, indent=1))
    (out / "projection.md").write_text(markdown(rows, skipped, hardware))
    from analysis.figures import projection_vs_workers
    return [out / "projection.md", out / "projection.json", *projection_vs_workers(rows, out / "figures")]
