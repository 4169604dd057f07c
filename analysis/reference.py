"""Published numbers (`results/reference/papers.csv`) beside measured ones, without over-claiming.

Each published row carries the configuration it came from (`family`, `per`, `config`; see
results/reference/README.md). A configuration of the records meets a row in one of two ways:

- **absolute**: the record's dataset is the row's dataset and its model is the row's `family`. The
  paper's value is set beside the measured one when the metric's unit matches (`per`: a per-round
  figure is never set beside bytes per epoch; that pair says `not comparable`). It is **full** only
  when every key the row records (`config`, workers) equals the record's and the row records the
  core keys (layers, hidden, dropout, lr, epochs, rounds or early stopping; heads for GAT); **scaled-down** when a
  recorded key differs, with the differing keys listed (`lr 0.001≠0.01`: measured≠paper);
  **unconfirmed** when nothing recorded differs but the source leaves core keys unknown (listed,
  never assumed).
- **shape**: the runs came from a preset that reproduces the row's table (`reproduces: <table>`)
  on a dataset the table does not have (a stand-in: a synthetic graph for ogbn-papers100M, CiteSeer
  for LLCG's Flickr). Absolute values are never compared then: each method is set relative to the
  table's reference method (`results/reference/tables.csv`), accuracy as a difference in points,
  time, memory and bytes as a ratio, the paper's shape beside the measured one. Rows that are
  ratios already (`memory_ratio_vanilla_over_sar`, scaling factors) are shapes as they stand.

Worker counts are paired by rank when they differ: a sweep over 1, 2, 4 workers stands for a
paper's 32, 64, 128 (and the workers are then listed among the differing keys).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from analysis import PROJECT_ROOT
from analysis.paired import NOISE_POINTS
from analysis.records import time_sliced
import yaml

# The published numbers are files of this checkout (analysis reads files, never the runtime).
REFERENCE_DIR = PROJECT_ROOT / "results" / "reference"
REFERENCE = REFERENCE_DIR / "papers.csv"
TABLES = REFERENCE_DIR / "tables.csv"

# Paper method names -> this suite's variants (the `variant` of a record). Methods not written yet
# simply match nothing until their records exist.
METHODS = {
    "SAR": "sar",
    # SAR's "vanilla": one halo exchange per layer, then DGL's builtins, which DGL fuses into a g-SpMM
    # for SAGE and GCN (copy_u + mean/sum) and for GAT's aggregation (u_mul_e + sum; the E x H logits
    # are materialised, as the suite's attention does): the default `kernel=spmm`, i.e. the variant
    # `full_halo`, not `full_halo kernel=messages` (dmlc/dgl python/dgl/core.py `message_passing`,
    # nn/pytorch/conv/{sageconv,gatconv}.py; docs/sar.md "Which baseline").
    "vanilla domain-parallel (no SR)": "full_halo",
    "PSGD-PA": "psgd_pa",
    "LLCG": "llcg",
    "DIGEST": "digest",
    "full-batch single machine": "single",
    "full-batch single machine (DGL)": "single",
    "full-graph single machine": "single",
    "full-batch": "single",
    "neighbour sampling": "neighbor_sampling",
    # the mini-batch systems of the published sampling rows (their system named in `config_source`):
    # neighbour sampling with or without a feature cache, a replicated or partitioned store
    **{name: "neighbor_sampling" for name in (
        "SALIENT", "SALIENT (features replicated)", "SALIENT++ (VIP cache)", "SALIENT++ partitioned, no cache",
        "PyG NeighborSampler", "DGL", "DistDGL", "GNNLab", "GNNLab degree cache", "SGNN")},
    "GGS": "ggs",
    "Cluster-GCN": "cluster_gcn",
    "GraphSAINT": "graphsaint",
    # partition-parallel full-graph methods; a paper's variant (PipeGCN-GF, BNS-GCN p=0.1) is the
    # suite's method with options, which the row's `config` states (`method.boundary_fraction=0.1`)
    "vanilla partition-parallel": "full_halo",
    "Vanilla": "full_halo",  # AdaQP's full-precision baseline
    "PipeGCN": "pipegcn",
    "PipeGCN-G": "pipegcn",
    "PipeGCN-F": "pipegcn",
    "PipeGCN-GF": "pipegcn",
    "BNS-GCN": "bns_gcn",
    "BNS-GCN p=0.1": "bns_gcn",
    "Sancus": "sancus",
    "AdaQP": "adaqp",
}
# Paper "A vs B" ratios -> (numerator variant, denominator variant).
RATIOS = {"SAR vs vanilla": ("full_halo", "sar")}
# The first word of a paper's model name -> ours ("GraphSAGE 3x256 +BN" -> sage). Matching reads
# the row's `family` column; this map only helps fill it.
MODELS = {"GraphSAGE": "sage", "GAT": "gat", "GCN": "gcn", "MLP": "mlp"}

# metric -> (run column, factor to the paper's unit, what is measured, per, how a shape is formed)
DIRECT = {
    "peak_memory_per_machine": ("peak_rss_bytes", 1e-9, "peak RSS, largest rank", "run", "ratio"),
    "epoch_time": ("epoch_time_s", 1.0, "median epoch time", "epoch", "ratio"),
    "test_accuracy": ("test_acc", 100.0, "test accuracy of the reported model (best validation, or its stopping "
                                         "rule's)", "run", "points"),
    "test_micro_f1": ("test_acc", 100.0, "test accuracy of the reported model (= micro-F1, one label per node)",
                      "run", "points"),
    "val_accuracy": ("best_val_acc", 100.0, "best validation accuracy", "run", "points"),
    # bytes per round only where a record states them (`summary.comm_bytes_per_round`); bytes per
    # epoch are another unit: an epoch of `ggs` is many rounds, `llcg` adds correction traffic.
    "comm_per_round": ("comm_bytes_per_round", 1e-6, "training MB per round, all ranks", "round", "ratio"),
}
# Ratios over worker counts ("32->128") or variants; on the training working set, because a small
# graph's RSS is mostly the interpreter and torch, which a paper's 100 GB machines do not notice.
SCALING = {"memory_scaling_factor": ("train_mem_bytes", "training working set, fewest/most workers"),
           "runtime_scaling": ("epoch_time_s", "median epoch time, fewest/most workers")}
VARIANT_RATIOS = {"memory_ratio_vanilla_over_sar": ("train_mem_bytes", "training working set ratio")}

# The keys a row should state for a `full` claim to mean much; the ones it leaves blank are listed.
CORE_KEYS = ("layers", "hidden", "dropout", "lr", "epochs|rounds|stopping")
CERTAINTY = {"verified": "verified against the source", "readme": "stated in the source's README or docs",
             "abstract": "from the abstract", "figure-estimate": "read from a figure",
             "recalled": "recalled, unverified"}


def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def load_tables(path: Path = TABLES) -> dict[str, str]:
    """table -> its reference method (the one shapes are relative to; empty: none)."""
    if not Path(path).exists():
        return {}
    t = pd.read_csv(path, dtype=str, keep_default_na=False)
    return dict(zip(t["table"], t["reference_method"]))


def why_unmatched(table: str, datasets: list[str], ref: pd.DataFrame | None = None,
                  tables: dict | None = None) -> str:
    """One line saying why runs that name `table` (`reproduces`) on `datasets` got no comparison."""
    ref = load_reference() if ref is None else ref
    tables = load_tables() if tables is None else tables
    rows = ref[ref["table"] == table]
    if not len(rows):
        return f"- `{table}`: no published row of this table is in papers.csv yet."
    own = ", ".join(sorted(set(rows["dataset"])))
    reference = tables.get(table, "")
    methods = set(rows["method"])
    why = (f"its reference method ({reference}) has no row, so no shape can be formed either"
           if reference and reference not in methods else "no row of it is of these runs' model family and metric")
    return (f"- `{table}` (rows on {own}; methods {', '.join(sorted(methods))}): these runs are on "
            f"{', '.join(datasets)}, which stands in for the table's datasets, and {why}. Nothing measured is set "
            "beside its numbers.")


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


def parse_config(text: str) -> dict:
    """A row's `config` cell, `key=value; key=value` (values in YAML: 0.01, true, [15, 10, 5])."""
    out = {}
    for part in (text or "").split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            try:
                out[key.strip()] = yaml.safe_load(value.strip())
            except yaml.YAMLError:
                out[key.strip()] = value.strip()
    return out


_MISSING = object()


def config_value(cfg: dict, key: str):
    """The record's value of a row key: a dotted path into its config, or a derived key
    (`rounds` = epochs / method.avg_every for the averaging methods, whose epoch is one round of
    local steps; for `ggs` only when it runs in rounds, `method.local_steps` set)."""
    if key == "rounds":
        method = (cfg.get("method") or {})
        in_rounds = method.get("name") in ("psgd_pa", "llcg") or (method.get("name") == "ggs"
                                                                   and method.get("local_steps") is not None)
        if in_rounds and cfg.get("epochs") is not None:
            every = method.get("avg_every") or 1
            return cfg["epochs"] / every
        return _MISSING
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def _text(v) -> str:
    if v is _MISSING:
        return "?"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_text(x) for x in v) + "]"
    return str(v)


def differences(row_config: dict, cfg: dict) -> list[str]:
    """`key measured≠paper` for every key the row records that the record's config does not equal
    (`?` where the run does not record that key at all)."""
    out = []
    for key, want in row_config.items():
        have = config_value(cfg, key)
        if have is _MISSING or not _same(have, want):
            out.append(f"{key} {_text(have)}≠{_text(want)}")
    return out


def unknown_keys(row_config: dict, family: str) -> list[str]:
    core = [*CORE_KEYS, *(["model.heads"] if family == "gat" else [])]
    return [k for k in core if not any(part in row_config for part in k.split("|"))]


def _workers(text: str) -> list[int]:
    return [int(w) for w in re.findall(r"\d+", text)] if re.fullmatch(r"\d+(->\d+)?", text or "") else []


def _pair(paper_ws: list[int], measured_ws: list[int], w: int) -> int | None:
    """The measured worker count standing for the paper's `w`: the same one, else the same rank."""
    if w in measured_ws:
        return w
    i = paper_ws.index(w) if w in paper_ws else None
    return measured_ws[i] if i is not None and i < len(measured_ws) else None


def compare(agg: pd.DataFrame, runs_df: pd.DataFrame, ref: pd.DataFrame | None = None,
            tables: dict | None = None) -> pd.DataFrame:
    """One row per (reference row, measured configuration) pair: the paper's value (or shape) and
    the measured one, and what kind of comparison it is (`reproduction`: full, scaled-down, shape,
    not comparable) with the differing keys (`differs`) and the keys the source leaves unknown."""
    ref = load_reference() if ref is None else ref
    tables = load_tables() if tables is None else tables
    reproduces = runs_df.groupby("setting")["reproduces"].first().to_dict()
    configs = {}
    for s, v, w, c in zip(runs_df["setting"], runs_df["variant"], runs_df["workers"], runs_df["config"]):
        configs.setdefault((s, v, int(w)), c)
    rows = []
    for (dataset, model, setting), g in agg.groupby(["dataset", "model", "setting"]):
        table = reproduces.get(setting)
        table = table if isinstance(table, str) and table else None  # NaN where no run of the setting names one
        # A run stands in for the datasets of its table only when the table has none of its own
        # (synthetic for ogbn-papers100M, CiteSeer for LLCG's Flickr): then shapes, never values.
        in_table = {d.lower() for d in ref.loc[ref["table"] == table, "dataset"]} if table else set()
        stand_in = bool(table) and dataset.lower() not in in_table
        family = ref["family"] == model
        if stand_in:
            cands = ref[family & (ref["table"] == table)]
        else:
            cands = ref[family & (ref["dataset"].str.lower() == dataset.lower())]
        cores = g["cores"].min() if "cores" in g else math.nan
        ctx = {"g": g, "cands": cands, "configs": configs, "setting": setting, "dataset": dataset,
               "stand_in": stand_in, "reference": tables.get(table or "", ""), "cores": cores}
        for _, r in cands.iterrows():
            row = _measure(r, ctx)
            if row is not None:
                rows.append({"table": r["table"], "source": r["source"], "paper_dataset": r["dataset"],
                             "paper_model": r["model"], "paper_method": r["method"], "paper_workers": r["workers"],
                             "metric": r["metric"], "per": r["per"], "certainty": r["certainty"],
                             "certainty_text": CERTAINTY.get(r["certainty"], r["certainty"]),
                             "config_source": r["config_source"], "dataset": dataset, "model": model,
                             "unit": r["unit"], **row})
    for row in rows:
        row["time_sliced"] = row["metric"] in TIME_METRICS and time_sliced(row["ranks"], row["cores"])
        row["verdict"], row["why"] = verdict(row)
    columns = ["table", "source", "paper_dataset", "paper_model", "paper_method", "paper_workers", "metric", "per",
               "paper", "unit", "certainty", "certainty_text", "config_source", "dataset", "model", "variant",
               "workers", "measured", "measured_as", "status", "reproduction", "differs", "unknown", "relative_to",
               "ranks", "cores", "time_sliced", "verdict", "why"]
    return pd.DataFrame(rows, columns=columns)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _measure(r, ctx: dict) -> dict | None:
    g, cands, stand_in = ctx["g"], ctx["cands"], ctx["stand_in"]
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
        value = hit[column] if column in hit.index and hit["status"] == "ok" else math.nan
        return value, int(hit["workers"]), hit["status"]

    def cfg_of(variant: str, w) -> dict:
        return ctx["configs"].get((ctx["setting"], variant, w), {})

    def present(name: str | None) -> str | None:
        """The variant standing for method `name` here: the plain method, else its one variant (a
        preset that sets the paper's options runs `psgd_pa batch_size=64`; the options it differs
        in are then listed like any other key). Several variants and no plain one: none is chosen."""
        if name is None or (g["variant"] == name).any():
            return name
        mine = sorted(set(g.loc[g["method"] == name, "variant"]))
        return mine[0] if len(mine) == 1 else name

    variant = present(METHODS.get(r["method"]))
    if metric in DIRECT and variant:
        column, factor, what, per, kind = DIRECT[metric]
        w0 = paper_ws[0] if paper_ws else None
        value, w, status = at(variant, w0, column)
        if status is None:
            return None
        cfg = cfg_of(variant, w)
        # a per-round row needs a per-round field in the record; bytes per epoch never stand in for it
        unit_ok = (r["per"] or per) == per and not (per == "round" and status == "ok" and value != value)
        if stand_in:
            reference = ctx["reference"]
            if not reference or r["method"] == reference:
                return None  # the reference method is the origin of every shape
            base = cands[(cands["source"] == r["source"]) & (cands["dataset"] == r["dataset"])
                         & (cands["family"] == r["family"]) & (cands["metric"] == metric)
                         & (cands["workers"] == r["workers"]) & (cands["method"] == reference)]
            ref_variant = present(METHODS.get(reference))
            if not len(base) or not ref_variant:
                return None
            b, wb, sb = at(ref_variant, w0, column)
            if sb is None:
                return None
            unit_ok = unit_ok and not (per == "round" and sb == "ok" and b != b)
            paper_v, paper_b = _float(r["value"]), _float(base["value"].iloc[0])
            if kind == "points":
                paper, measured, unit = paper_v - paper_b, (value - b) * factor, "pp"
            else:
                paper, measured, unit = paper_v / paper_b, value / b, "x"
            out = _row(measured, f"{what}: {variant} relative to {ref_variant}", variant, w, _worst(status, sb), r,
                       cfg, paper_ws[:1], ctx, paper=paper, relative_to=reference)
            out["unit"] = unit
            if not unit_ok:
                return _not_comparable(out, r, per)
            return out
        out = _row(value * factor, what, variant, w, status, r, cfg, paper_ws[:1], ctx)
        if not unit_ok:
            return _not_comparable(out, r, per)
        return out
    if metric in SCALING and variant and len(paper_ws) == 2:
        column, what = SCALING[metric]
        a, wa, sa = at(variant, paper_ws[0], column)
        b, wb, sb = at(variant, paper_ws[1], column)
        if sa is None or sb is None or wa == wb:
            return None
        return _row(a / b, what, variant, f"{wa}->{wb}", _worst(sa, sb), r, cfg_of(variant, wb), paper_ws, ctx,
                    (wa, wb))
    if metric in VARIANT_RATIOS and r["method"] in RATIOS and paper_ws:
        column, what = VARIANT_RATIOS[metric]
        num, den = (present(v) for v in RATIOS[r["method"]])
        a, wa, sa = at(num, paper_ws[0], column)
        b, wb, sb = at(den, paper_ws[0], column)
        if sa is None or sb is None or wa != wb:
            return None
        return _row(a / b, what, f"{num} / {den}", wa, _worst(sa, sb), r, cfg_of(den, wb), paper_ws, ctx)
    return None


def _not_comparable(out: dict, r, per: str) -> dict:
    out.update(measured=math.nan, reproduction="not comparable",
               differs=f"unit: paper per {r['per'] or per}, the record has no per-{r['per'] or per} field "
                       "(bytes per epoch are another unit)")
    return out


def _worst(*statuses: str) -> str:
    return "failed" if "failed" in statuses else "ok"


def _row(value, what, variant, workers, status, r, cfg, paper_ws, ctx, measured_ws=None, paper=None,
         relative_to="") -> dict:
    measured_ws = measured_ws or ([workers] if workers is not None else [])
    row_config = parse_config(r["config"])
    diffs = []
    if r["dataset"].lower() != ctx["dataset"].lower():
        diffs.append(f"dataset {ctx['dataset']}≠{r['dataset']} (stand-in)")
    if paper_ws and list(measured_ws) != list(paper_ws):
        diffs.append(f"workers {'->'.join(map(str, measured_ws))}≠{'->'.join(map(str, paper_ws))}")
    diffs += differences(row_config, cfg or {})
    unknown = unknown_keys(row_config, r["family"])
    # full: every key the row records matches, and the row records the core keys; a row that
    # leaves some unknown can only be `unconfirmed` (nothing differs that anyone can see)
    reproduction = ("shape" if ctx["stand_in"] else "scaled-down" if diffs else "unconfirmed" if unknown
                    else "full")
    return {"variant": variant, "workers": workers, "measured": value if status == "ok" else math.nan,
            "paper": _float(r["value"]) if paper is None else paper,
            "measured_as": what, "status": status, "reproduction": reproduction, "differs": ", ".join(diffs),
            "unknown": ", ".join(unknown), "relative_to": relative_to,
            "ranks": max((w for w in measured_ws if isinstance(w, int)), default=math.nan), "cores": ctx["cores"]}


#: The verdicts of a published row against its measured one (`verdict`).
AGREES, SMALLER, DISAGREES, NOT_A_FINDING = "agrees", "same direction, smaller", "disagrees", "not a finding here"
#: Metrics that are epoch times or their ratios: with more ranks than cores they measure time-slicing.
TIME_METRICS = {"epoch_time", "runtime_scaling"}
#: A ratio within 1 % of 1 shows no effect (memory is counted, not timed: its noise is small).
NO_RATIO_EFFECT = 0.01


def verdict(row: dict) -> tuple[str, str]:
    """Whether the measured value bears the published one out, with the reason in a few words:
    - `not a finding here`: nothing measured, units that differ, a time measured with more ranks than
      cores (`records.time_sliced`), or an absolute time or memory off the paper's configuration (the
      machine and graph size decide it);
    - a ratio or a difference (a shape, a scaling factor, `A vs B`: no effect at 1 x or 0 pp): `agrees`
      where the measured effect has the paper's sign and at least half its size (in log for a ratio),
      `same direction, smaller` below half, `disagrees` where the sign differs or no effect shows
      (within 1 % for a ratio, `NOISE_POINTS` for points) where the paper has one;
    - an absolute accuracy: `agrees` within `NOISE_POINTS`, else `disagrees`."""
    paper, measured, unit = row["paper"], row["measured"], row["unit"]
    if row["reproduction"] == "not comparable":
        return NOT_A_FINDING, "units differ"
    if measured != measured or paper != paper:
        return NOT_A_FINDING, "no measured value" if measured != measured else "no published value"
    if row["time_sliced"]:
        return NOT_A_FINDING, (f"{row['ranks']} ranks on {row['cores']:g} cores: the epoch time is the cores' "
                               "time-slicing, not a speed")
    points = unit == "pp" or DIRECT.get(row["metric"], ("", 1, "", "", ""))[4] == "points"
    ratio = unit == "x" or row["metric"] in SCALING or row["metric"] in VARIANT_RATIOS
    if ratio and paper > 0 and measured > 0:
        have, want, band, shown = math.log(measured), math.log(paper), math.log1p(NO_RATIO_EFFECT), "x"
    elif points and unit == "pp":
        have, want, band, shown = measured, paper, NOISE_POINTS, "pp"
    elif points:
        gap = measured - paper
        return (AGREES if abs(gap) <= NOISE_POINTS else DISAGREES,
                f"{gap:+.1f} pt from the paper's" + (f" (within {NOISE_POINTS:g} pt)" if abs(gap) <= NOISE_POINTS
                                                     else ""))
    else:
        return NOT_A_FINDING, "an absolute time or memory: the machine and graph size decide it"
    size = f"measured {measured:.3g} {shown} against {paper:.3g} {shown}"
    if abs(have) <= band and abs(want) > band:
        return DISAGREES, f"no effect here ({size})"
    if abs(have) <= band and abs(want) <= band:
        return AGREES, f"no effect in either ({size})"
    if (have > 0) != (want > 0):
        return DISAGREES, f"opposite direction ({size})"
    share = abs(have) / abs(want) if want else math.inf
    return (AGREES if share >= 0.5 else SMALLER,
            f"{size}: {share:.0%} of the paper's effect" + (" in log" if shown == "x" else ""))
