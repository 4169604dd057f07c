"""Published numbers (`results/reference/papers.csv`) beside measured ones.

A reference row is compared with a configuration of the records when its method and model map to
the configuration's (the small explicit maps below) and either the dataset is the same or the runs
came from a preset that reproduces the row's table (`reproduces: <table>` in the config) on a
dataset that table does not have (a synthetic graph standing in for ogbn-papers100M). Worker
counts are paired by rank when they differ: a scaled-down sweep over 1, 2, 4 workers stands for a
paper's 32, 64, 128. Each comparison says whether it is a full reproduction (dataset, model shape
and workers as published) or a scaled-down one, and which of those differ.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

# The published numbers are files of this checkout (analysis reads files, never the runtime).
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "results" / "reference"
REFERENCE = REFERENCE_DIR / "papers.csv"

# Paper method names -> this suite's variants (the `variant` of a record). Methods not written yet
# simply match nothing until their records exist.
METHODS = {
    "SAR": "sar",
    "vanilla domain-parallel (no SR)": "full_halo",  # SAR's "vanilla" = one halo exchange per layer
    "PSGD-PA": "psgd_pa",
    "LLCG": "llcg",
    "DIGEST": "digest",
    "full-batch single machine": "single",
    "full-batch single machine (DGL)": "single",
    "full-graph single machine": "single",
    "full-batch": "single",
    "neighbour sampling": "neighbor_sampling",
    "GGS": "ggs",
    "Cluster-GCN": "cluster_gcn",
    "GraphSAINT": "graphsaint",
}
# Paper "A vs B" ratios -> (numerator variant, denominator variant).
RATIOS = {"SAR vs vanilla": ("full_halo", "sar")}
# The first word of a paper's model name -> ours ("GraphSAGE 3x256 +BN" -> sage).
MODELS = {"GraphSAGE": "sage", "GAT": "gat", "GCN": "gcn", "MLP": "mlp"}

# metric -> (aggregate column, factor to the paper's unit, what is measured)
DIRECT = {
    "peak_memory_per_machine": ("peak_rss_bytes", 1e-9, "peak RSS, largest rank"),
    "epoch_time": ("epoch_time_s", 1.0, "median epoch time"),
    "test_accuracy": ("test_acc", 100.0, "test accuracy at best validation"),
    "test_micro_f1": ("test_acc", 100.0, "test accuracy at best validation (= micro-F1, one label per node)"),
    "val_accuracy": ("best_val_acc", 100.0, "best validation accuracy"),
    "comm_per_round": ("comm_bytes_per_epoch", 1e-6, "training MB per epoch, all ranks"),
}
# Ratios over worker counts ("32->128") or variants; on the training working set, because a small
# graph's RSS is mostly the interpreter and torch, which a paper's 100 GB machines do not notice.
SCALING = {"memory_scaling_factor": ("train_mem_bytes", "training working set, fewest/most workers"),
           "runtime_scaling": ("epoch_time_s", "median epoch time, fewest/most workers")}
VARIANT_RATIOS = {"memory_ratio_vanilla_over_sar": ("train_mem_bytes", "training working set ratio")}


def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def model_of(paper_model: str) -> str | None:
    return MODELS.get(paper_model.split(" ")[0]) if paper_model else None


def shape_of(paper_model: str) -> dict:
    """Layers, hidden size and batch norm where the paper's model name states them ("3x256 +BN")."""
    out = {}
    m = re.search(r"(\d+)x(\d+)", paper_model)
    if m:
        out["layers"], out["hidden"] = int(m.group(1)), int(m.group(2))
    if "+BN" in paper_model:
        out["batch_norm"] = True
    return out


def _workers(text: str) -> list[int]:
    return [int(w) for w in re.findall(r"\d+", text)] if re.fullmatch(r"\d+(->\d+)?", text or "") else []


def _pair(paper_ws: list[int], measured_ws: list[int], w: int) -> int | None:
    """The measured worker count standing for the paper's `w`: the same one, else the same rank."""
    if w in measured_ws:
        return w
    i = paper_ws.index(w) if w in paper_ws else None
    return measured_ws[i] if i is not None and i < len(measured_ws) else None


def compare(agg: pd.DataFrame, runs_df: pd.DataFrame, ref: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (reference row, measured configuration) pair: paper value, measured value and
    whether the reproduction is full or scaled-down."""
    ref = load_reference() if ref is None else ref
    reproduces = runs_df.groupby("setting")["reproduces"].first().to_dict()
    configs = runs_df.groupby("setting")["config"].first().to_dict()
    rows = []
    for (dataset, model, setting), g in agg.groupby(["dataset", "model", "setting"]):
        table = reproduces.get(setting)
        # A run stands in for another dataset of its table only when the table has none of its own
        # (synthetic for ogbn-papers100M); CiteSeer runs are compared with CiteSeer rows only.
        in_table = {d.lower() for d in ref.loc[ref["table"] == table, "dataset"]} if table else set()
        stand_in = bool(table) and dataset.lower() not in in_table
        cands = ref[[model_of(r["model"]) == model and (r["dataset"].lower() == dataset.lower()
                                                        or (stand_in and r["table"] == table))
                     for _, r in ref.iterrows()]]
        for _, r in cands.iterrows():
            row = _measure(r, g, cands, configs[setting])
            if row is not None:
                rows.append({"table": r["table"], "source": r["source"], "paper_dataset": r["dataset"],
                             "paper_model": r["model"], "paper_method": r["method"], "paper_workers": r["workers"],
                             "metric": r["metric"], "paper": _float(r["value"]), "unit": r["unit"],
                             "certainty": r["certainty"], "dataset": dataset, "model": model, **row})
    return pd.DataFrame(rows)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _measure(r, g: pd.DataFrame, cands: pd.DataFrame, cfg: dict) -> dict | None:
    metric, paper_ws = r["metric"], _workers(r["workers"])
    same = cands[(cands["source"] == r["source"]) & (cands["model"] == r["model"])]
    all_paper_ws = sorted({w for text in same["workers"] for w in _workers(text)})

    def at(variant: str, w: int | None, column: str) -> tuple[float, int | None, str | None]:
        mine = g[g["variant"] == variant]
        if w is not None:
            w = _pair(all_paper_ws, sorted(mine["workers"]), w)
            mine = mine[mine["workers"] == w]
        if not len(mine):
            return math.nan, w, None
        hit = mine.iloc[0]
        return (hit[column] if hit["status"] == "ok" else math.nan), int(hit["workers"]), hit["status"]

    if metric in DIRECT and METHODS.get(r["method"]):
        column, factor, what = DIRECT[metric]
        value, w, status = at(METHODS[r["method"]], paper_ws[0] if paper_ws else None, column)
        if status is None:
            return None
        return _row(value * factor, what, METHODS[r["method"]], w, status, r, cfg, paper_ws[:1])
    if metric in SCALING and METHODS.get(r["method"]) and len(paper_ws) == 2:
        column, what = SCALING[metric]
        a, wa, sa = at(METHODS[r["method"]], paper_ws[0], column)
        b, wb, sb = at(METHODS[r["method"]], paper_ws[1], column)
        if sa is None or sb is None or wa == wb:
            return None
        return _row(a / b, what, METHODS[r["method"]], f"{wa}->{wb}", _worst(sa, sb), r, cfg, paper_ws, (wa, wb))
    if metric in VARIANT_RATIOS and r["method"] in RATIOS and paper_ws:
        column, what = VARIANT_RATIOS[metric]
        num, den = RATIOS[r["method"]]
        a, wa, sa = at(num, paper_ws[0], column)
        b, wb, sb = at(den, paper_ws[0], column)
        if sa is None or sb is None or wa != wb:
            return None
        return _row(a / b, what, f"{num} / {den}", wa, _worst(sa, sb), r, cfg, paper_ws)
    return None


def _worst(*statuses: str) -> str:
    return "failed" if "failed" in statuses else "ok"


def _row(value, what, variant, workers, status, r, cfg, paper_ws, measured_ws=None) -> dict:
    measured_ws = measured_ws or ([workers] if workers is not None else [])
    diffs = []
    if r["dataset"].lower() != cfg["dataset"]["name"].lower():
        diffs.append(f"dataset {cfg['dataset']['name']} (paper {r['dataset']})")
    if paper_ws and list(measured_ws) != list(paper_ws):
        diffs.append(f"workers {'->'.join(map(str, measured_ws))} (paper {'->'.join(map(str, paper_ws))})")
    for key, want in shape_of(r["model"]).items():
        if cfg.get(key) != want:
            diffs.append(f"{key} {cfg.get(key)} (paper {want})")
    return {"variant": variant, "workers": workers, "measured": value if status == "ok" else math.nan,
            "measured_as": what, "status": status,
            "reproduction": "full" if not diffs else "scaled-down: " + "; ".join(diffs)}
