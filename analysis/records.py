"""A folder of run records as pandas tables, and the arithmetic the report and figures share.

- `load(folder)`: the records (JSON, one per run; one it cannot use, unreadable or with a field
  missing or of the wrong kind (`check`), is skipped with a warning line naming the file);
  `runs(records)`: one row per run; `history(records)`: one row per run and epoch (the long table).
- Peak memory per rank is PSS where records have it (shared pages counted once, split between the
  ranks that map them) and RSS in records from before it: `peak_mem_bytes`, labelled by
  `peak_mem_kind`; `peak_pss_sum_bytes` is the sum over ranks (one machine's total).
- `aggregate(runs)`: mean and standard deviation over seeds for each configuration.
- `speedup`, `memory_scaling`, `time_to_accuracy`, `comm_by_category`: the answers.

Failed runs stay in every table with `status == "failed"` and their error; their metrics are NaN
and never enter a mean, so a configuration whose every seed failed shows as failed, not missing.
Only records are read: nothing here imports the runtime or a method. What a record states about
itself (its `variant`, `setting`, training time, bytes per epoch by category) was written by the
runtime when it ran and is read as is, so an old record keeps its name when a default changes.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

# pandas is imported by the functions that build tables: the checks and `load` are read without it
# (the projection's record checks run in the launching process of a run, the pre-flight memory
# check, and that process's memory may be a rank's).

# One configuration = these columns; seeds are averaged within one.
# `lr` is not in the setting (a method and its control may train at their families' rates: record.AXES).
KEYS = ["dataset", "model", "variant", "workers", "setting", "lr"]
METRICS = ["epoch_time_s", "peak_rss_bytes", "peak_pss_bytes", "peak_pss_sum_bytes", "peak_mem_bytes",
           "train_mem_bytes", "comm_bytes_per_epoch", "comm_bytes_per_round", "best_val_acc", "test_acc",
           "train_time_s", "cores", "late_val_gain", "epochs_run"]


class NoRecords(ValueError):
    pass


class MixedRates(ValueError):
    """A folder a pairing study cannot read as one comparison: one method of one setting at several learning
    rates (`one_rate_each`); the command says so in one line."""


class BadRecord(ValueError):
    """A record hand-edited into a missing or wrong-kind field: `load` skips it with one line."""


#: What every consumer of a record reads, and the kind it must be (`check`): text where text,
#: whole numbers where whole numbers, mappings where mappings. Optional keys may be absent or null.
TEXT = ("status", "method", "variant", "dataset", "model", "setting")
WHOLE = ("workers", "seed")
MAPPINGS = ("config", "setting_config")
OPTIONAL = {"error": str, "control": str, "env": dict, "history": list, "summary": dict, "comm": dict}


def is_whole(x, least: int = 0) -> bool:
    """An integer (not a bool) of at least `least`: a count in a record or a statistics file."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def check(record: dict) -> None:
    """Raise BadRecord naming the first field of `record` that is missing or of the wrong kind; a
    record that passes (and whose rows `load` could build) can be trusted by every table, figure,
    study section and the projection."""
    for key in (*TEXT, *WHOLE, *MAPPINGS):
        if key not in record:
            raise BadRecord(f"missing field '{key}'")
    for key in TEXT:
        if not (isinstance(record[key], str) and record[key]):
            raise BadRecord(f"field '{key}' is {record[key]!r}, not a name")
    for key in WHOLE:
        if not is_whole(record[key], 1 if key == "workers" else 0):
            raise BadRecord(f"field '{key}' is {record[key]!r}, not a whole number"
                            + (" of at least 1" if key == "workers" else ""))
    for key in MAPPINGS:
        if not isinstance(record[key], dict):
            raise BadRecord(f"field '{key}' is {record[key]!r}, not a mapping")
    for key, kind in OPTIONAL.items():
        if record.get(key) is not None and not isinstance(record[key], kind):
            raise BadRecord(f"field '{key}' is {record[key]!r}, not {'text' if kind is str else 'a ' + kind.__name__}")
    if not all(isinstance(h, dict) for h in record.get("history") or []):
        raise BadRecord("field 'history' holds an entry that is not a mapping")


def load(folder, check_also=None) -> list[dict]:
    """Every run record in `folder` (not its subfolders); other JSON files there are ignored. A
    record the tables cannot use (unreadable, a field missing or of the wrong kind: a hand edit,
    `check`) is skipped with one line on stderr naming the file and the problem. `check_also(record)`:
    what one consumer needs beyond that (the projection's `projection.check_record`), which raises
    BadRecord (or KeyError, TypeError, ValueError) for a record that consumer cannot use; such a record is
    skipped the same way."""
    folder = Path(folder)
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"skipping unreadable record {path}: {e}", file=sys.stderr)
            continue
        if not (isinstance(record, dict) and {"status", "method", "config"} <= record.keys()):
            continue
        record = {**record, "_path": str(path)}
        try:  # the kinds, then the rows every table is made of, from this record alone
            check(record)
            _run_row(record), _history_rows(record)
            if check_also:
                check_also(record)
        except BadRecord as e:
            print(f"skipping record {path}: {e}", file=sys.stderr)
        except KeyError as e:
            print(f"skipping record {path}: missing field {e}", file=sys.stderr)
        except (TypeError, ValueError, AttributeError) as e:
            print(f"skipping record {path}: {type(e).__name__}: {e}", file=sys.stderr)
        else:
            records.append(record)
    if not records:
        raise NoRecords(f"no records in {folder}; run `python -m benchmarks.commands.sweep experiment=quickstart "
                        f"results_dir={folder}` (or any `python -m benchmarks results_dir={folder}`) first")
    return records


def runs(records: list[dict]) -> pd.DataFrame:
    """One row per record. `attrs["groups"]` maps each method to its group (`group`), for figures."""
    import pandas as pd

    df = pd.DataFrame([_run_row(r) for r in records])
    df.attrs["groups"] = {m: group(a) for m, a in abouts(records).items()}
    return df


def abouts(records: list[dict]) -> dict[str, dict]:
    """What the records state of each method (`about`: family, kind, what it approximates, its
    paper's claim), from the first record of it that states it (records from before it: none)."""
    out: dict[str, dict] = {}
    for r in records:
        if r.get("about") and r["method"] not in out:
            out[r["method"]] = r["about"]
    return out


#: Figure hue groups: a method's kind and the runtime family it stands on, as its records state them.
GROUPS = ("exact full-graph", "approximate full-graph", "partition-parallel", "mini-batch", "subgraph", "other")


def group(about: dict | None) -> str:
    family, kind = (about or {}).get("family"), (about or {}).get("kind")
    if family in ("FullGraphMethod", "Method"):
        return "exact full-graph" if kind == "exact" else "approximate full-graph"
    return {"PartitionParallelMethod": "partition-parallel", "LocalRounds": "partition-parallel",
            "MiniBatchMethod": "mini-batch", "SubgraphMethod": "subgraph"}.get(family, "other")


def _run_row(r: dict) -> dict:
    s = r.get("summary") if r["status"] == "ok" else None
    value = (lambda key: float(s[key])) if s else (lambda key: math.nan)
    pss = _num(s and s.get("peak_pss_bytes_max"))  # absent in records from before PSS, None without smaps_rollup
    return {
        "run": Path(r["_path"]).stem if "_path" in r else None,
        "status": r["status"], "error": r.get("error"),
        "method": r["method"], "variant": r["variant"], "dataset": r["dataset"], "model": r["model"],
        "workers": int(r["workers"]), "seed": r["seed"], "setting": r["setting"], "lr": _num(r["config"].get("lr")),
        "control": r.get("control"),  # the variant of its exact control (None: exact, or a record from before controls)
        "cores": _num((r.get("env") or {}).get("cores")),  # the machine's: time with more ranks than cores is slicing
        "reproduces": r["config"].get("reproduces"), "epochs_run": len(r.get("history") or []),
        "epoch_time_s": value("epoch_time_s_median"),
        "peak_rss_bytes": value("peak_rss_bytes_max"),
        "peak_pss_bytes": pss,
        "peak_pss_sum_bytes": _num(s and s.get("peak_pss_bytes_sum")),
        "peak_mem_bytes": pss if pss == pss else value("peak_rss_bytes_max"),
        "peak_mem_kind": "PSS" if pss == pss else "RSS",
        "train_mem_bytes": value("train_mem_delta_bytes_max"),
        "comm_bytes_per_epoch": value("comm_bytes_per_epoch"),
        # only where a method states its rounds (an averaging round is not an epoch); NaN otherwise
        "comm_bytes_per_round": _num(s and s.get("comm_bytes_per_round")),
        "best_val_acc": _num(s and s.get("best_val_acc")),
        "late_val_gain": _late_val_gain(r.get("history") or []),
        # the model the run's stopping rule reports (records older than the rule: the best validation's)
        "test_acc": _num(s and s.get("test_acc_selected", s.get("test_acc_at_best_val"))),
        "val_acc": _num(s and s.get("val_acc_selected", s.get("best_val_acc"))),  # the same model's validation
        # optimiser steps the run took (the most of any rank, as `summary.per_rank[].steps` states them: the
        # local-round, mini-batch and DIGEST families); NaN for a method that states none (one step an epoch)
        "steps": max((_num(p.get("steps")) for p in s.get("per_rank") or [] if p.get("steps") is not None),
                     default=math.nan) if s else math.nan,
        "train_time_s": value("train_time_s"),
        "comm_by_category": {c: float(b) for c, b in r["comm"]["bytes_per_epoch_by_category"].items()} if s else {},
        "config": dict(r["config"]), "setting_config": dict(r["setting_config"]),
    }


def _late_val_gain(history: list[dict]) -> float:
    """How much the best validation accuracy rose in the last third of the run (the best there less
    the best before it): a run still rising when it stopped has a clear gain. NaN without an
    evaluation in both parts."""
    evaluated = [(int(h["epoch"]), float(h["val_acc"])) for h in history if h.get("val_acc") is not None]
    cut = 2 * len(history) / 3
    early = [v for e, v in evaluated if e < cut]
    late = [v for e, v in evaluated if e >= cut]
    return max(late) - max(early) if early and late else math.nan


def _num(x) -> float:
    return math.nan if x is None or x is False else float(x)


def history(records: list[dict]) -> pd.DataFrame:
    """One row per run and epoch; `wall_time_s` is the training time up to the end of that epoch
    (evaluation excluded, as in every time the suite reports). Failed runs keep the epochs reached."""
    import pandas as pd

    rows = [row for r in records for row in _history_rows(r)]
    columns = ["run", "status", "method", "variant", "dataset", "model", "workers", "seed", "setting", "epoch",
               "train_loss", "train_acc", "val_acc", "test_acc", "epoch_time_s", "wall_time_s", "comm_bytes"]
    return pd.DataFrame(rows, columns=columns)


def _history_rows(r: dict) -> list[dict]:
    rows, wall = [], 0.0
    head = {"run": Path(r["_path"]).stem if "_path" in r else None, "status": r["status"],
            "method": r["method"], "variant": r["variant"], "dataset": r["dataset"], "model": r["model"],
            "workers": int(r["workers"]), "seed": r["seed"], "setting": r["setting"]}
    for h in r.get("history") or []:
        wall += float(h["epoch_time_s"])
        rows.append({**head, "epoch": int(h["epoch"]), "train_loss": h.get("train_loss"),
                     "train_acc": _num(h.get("train_acc")), "val_acc": _num(h.get("val_acc")),
                     "test_acc": _num(h.get("test_acc")), "epoch_time_s": float(h["epoch_time_s"]),
                     "wall_time_s": wall, "comm_bytes": h.get("comm_bytes")})
    return rows


def aggregate(runs_df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: each metric's mean and `<metric>_std` over its ok seeds (std is
    NaN with one seed), `n_ok`, `n_failed`, `status` (`failed` when no seed succeeded), the
    first failure's error and `peak_mem_kind` (what its seeds' `peak_mem_bytes` are)."""
    import pandas as pd

    rows = []
    for key, g in runs_df.groupby(KEYS, sort=True, dropna=False):  # a record without `lr`: NaN
        ok = g[g["status"] == "ok"]
        failed = g[g["status"] != "ok"]
        row = {**dict(zip(KEYS, key)), "method": g["method"].iloc[0], "n_ok": len(ok), "n_failed": len(failed),
               "status": "ok" if len(ok) else "failed",
               "error": failed["error"].iloc[0] if len(failed) else None}
        for m in METRICS:
            row[m] = ok[m].mean() if len(ok) else math.nan
            row[f"{m}_std"] = ok[m].std(ddof=1) if len(ok) > 1 else math.nan
        row["peak_mem_kind"] = "/".join(sorted(set(ok["peak_mem_kind"])))  # "PSS/RSS": seeds of both kinds
        rows.append(row)
    return pd.DataFrame(rows)


def one_rate_each(runs_df: pd.DataFrame, study: str) -> None:
    """Refuse, in one line, a folder where one method of one setting ran at several learning rates: `lr` is an
    axis of a record (a method and its control may train at their families' rates and still pair), so a
    study that pairs by setting would pool the rates. One rate per method: `sweep.lr_by_family`."""
    ok = runs_df[runs_df["status"] == "ok"]
    rates = ok.groupby(["dataset", "model", "setting", "workers", "variant"], dropna=False)["lr"].unique()
    mixed = rates[rates.map(len) > 1]
    if len(mixed):
        (dataset, _, _, workers, variant), lrs = next(iter(mixed.items()))
        raise MixedRates(f"the {study} study pairs one rate per method, and its records hold `{variant}` on {dataset} "
                        f"at P={workers} at lr {', '.join(f'{x:g}' for x in sorted(lrs))}: report each rate's "
                        "records from a folder of their own (results_dir=...)")


def _lookup(agg: pd.DataFrame, where, column: str) -> float:
    hit = agg[where & (agg["status"] == "ok")]
    return float(hit[column].iloc[0]) if len(hit) else math.nan


def time_sliced(workers, cores) -> bool:
    """Whether a run had more ranks than its machine's cores (unknown cores: no): its epoch time is
    then the cores' time-slicing between ranks, not a speed (`speedup`, `reference.verdict`)."""
    return cores == cores and cores is not None and workers > cores


def oversubscribed(table: pd.DataFrame) -> pd.Series:
    """Per row of `table`: `time_sliced` (more ranks than its machine's known cores)."""
    import pandas as pd
    cores = table["cores"] if "cores" in table else pd.Series(math.nan, index=table.index)
    return pd.Series([time_sliced(w, c) for w, c in zip(table["workers"], cores)], index=table.index, dtype=bool)


def speedup(agg: pd.DataFrame) -> pd.DataFrame:
    """Adds `speedup_vs_1` (epoch time of the same variant with 1 worker over this one's) and
    `speedup_vs_single` (epoch time of `single` on the same dataset, model and setting over this
    one's); NaN where the baseline is missing or failed, and where the run had more ranks than its
    machine's cores: its epoch time is the cores' time-slicing between ranks, not a speed. Means over
    seeds are divided."""
    out = agg.copy()
    vs1, vss = [], []
    for over, (_, row) in zip(oversubscribed(agg), agg.iterrows()):
        if over:
            vs1.append(math.nan)
            vss.append(math.nan)
            continue
        same = (agg["dataset"] == row["dataset"]) & (agg["model"] == row["model"]) & (agg["setting"] == row["setting"])
        t1 = _lookup(agg, same & (agg["variant"] == row["variant"]) & (agg["workers"] == 1), "epoch_time_s")
        ts = _lookup(agg, same & (agg["method"] == "single"), "epoch_time_s")
        vs1.append(t1 / row["epoch_time_s"])
        vss.append(ts / row["epoch_time_s"])
    out["speedup_vs_1"], out["speedup_vs_single"] = vs1, vss
    return out


def memory_scaling(agg: pd.DataFrame, metric: str = "peak_rss_bytes") -> pd.DataFrame:
    """Per-rank memory against the ideal 1/P line. The line starts at the same variant with 1
    worker, else at `single`, else at the variant's fewest workers: `ideal = ref * ref_workers / P`;
    `vs_ideal` = measured / ideal (1 is perfect scaling)."""
    out = agg.copy()
    refs, ref_w = [], []
    for _, row in agg.iterrows():
        same = (agg["dataset"] == row["dataset"]) & (agg["model"] == row["model"]) & (agg["setting"] == row["setting"])
        mine = agg[same & (agg["variant"] == row["variant"]) & (agg["status"] == "ok")].sort_values("workers")
        single = agg[same & (agg["method"] == "single") & (agg["status"] == "ok")]
        ref = mine[mine["workers"] == 1]
        ref = ref if len(ref) else single if len(single) else mine.head(1)
        refs.append(float(ref[metric].iloc[0]) if len(ref) else math.nan)
        ref_w.append(int(ref["workers"].iloc[0]) if len(ref) else 1)
    out["memory"] = agg[metric]
    out["ref_workers"] = ref_w
    out["ideal"] = [r * w / p for r, w, p in zip(refs, ref_w, agg["workers"])]
    out["vs_ideal"] = out["memory"] / out["ideal"]
    return out


def targets(runs_df: pd.DataFrame, target: float | None = None, metric: str = "best_val_acc") -> dict:
    """The accuracy each (dataset, model, setting) is timed to: `target` if given, else 95 % of the
    best accuracy any run reached there (a bar every method can be held to)."""
    out = {}
    for key, g in runs_df.groupby(["dataset", "model", "setting"]):
        best = g[metric].max()
        out[key] = target if target is not None else (0.95 * best if best == best else math.nan)
    return out


#: The former pages' fixed budgets checked validation every 5th epoch (the findings page 100 epochs, the scaling
#: page 50: each study states its own).
BUDGET_CHECK_EVERY = 5


def test_at_budget(hist: pd.DataFrame, runs_df: pd.DataFrame, epochs: int,
                   every: int = BUDGET_CHECK_EVERY) -> pd.Series:
    """Per run of `runs_df` (aligned with it): the test accuracy at the best validation check (the first best)
    among epochs every-1, 2*every-1, ... below `epochs`, read from the run's own history: what a run capped
    there would have reported, since a run's first epochs do not depend on its cap. NaN without a check in the
    budget, and for a run whose schedule reads the cap (the local rounds' K grows toward it when
    `local_steps_rho` is not 1)."""
    import pandas as pd

    checked = hist[(hist["epoch"] < epochs) & ((hist["epoch"] + 1) % every == 0) & hist["val_acc"].notna()]
    checked = checked.sort_values(["run", "epoch"])
    best = checked.loc[checked.groupby("run")["val_acc"].idxmax()] if len(checked) else checked
    at = runs_df["run"].map(dict(zip(best["run"], best["test_acc"])))
    capped = runs_df["config"].map(lambda c: float((c.get("method") or {}).get("local_steps_rho") or 1) != 1.0)
    return pd.Series([math.nan if c else v for v, c in zip(at, capped)], index=runs_df.index, dtype=float)

def time_to_accuracy(hist: pd.DataFrame, runs_df: pd.DataFrame, target: float | None = None,
                     metric: str = "val_acc") -> pd.DataFrame:
    """Per run: the training time (s) and epoch at which `metric` first reached the target (NaN if
    it never did), with the target used."""
    import pandas as pd

    goal = targets(runs_df, target)
    rows = []
    for _, run in runs_df.iterrows():
        t = goal[(run["dataset"], run["model"], run["setting"])]
        h = hist[(hist["run"] == run["run"])]
        hit = h[h[metric] >= t] if t == t else h.iloc[0:0]
        rows.append({**{k: run[k] for k in ("run", "status", "method", *KEYS, "seed")}, "target": t,
                     "time_to_target_s": float(hit["wall_time_s"].iloc[0]) if len(hit) else math.nan,
                     "epoch_to_target": int(hit["epoch"].iloc[0]) + 1 if len(hit) else math.nan})
    return pd.DataFrame(rows)


def comm_by_category(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Training bytes per epoch (all ranks) by category, mean over a configuration's ok seeds: one
    row per configuration and category."""
    import pandas as pd

    rows = [{**{k: r[k] for k in KEYS}, "method": r["method"], "seed": r["seed"], "category": c, "bytes_per_epoch": b}
            for _, r in runs_df[runs_df["status"] == "ok"].iterrows() for c, b in r["comm_by_category"].items()]
    if not rows:
        return pd.DataFrame(columns=[*KEYS, "method", "category", "bytes_per_epoch"])
    df = pd.DataFrame(rows)
    return df.groupby([*KEYS, "method", "category"], as_index=False, dropna=False)["bytes_per_epoch"].mean()


def settings_described(runs_df: pd.DataFrame) -> dict[str, str]:
    """A short name for each setting: the configuration keys whose values differ between the
    settings of the folder (empty when there is one setting)."""
    import pandas as pd

    flat = {}
    for _, r in runs_df.drop_duplicates("setting").iterrows():
        flat[r["setting"]] = pd.json_normalize(r["setting_config"], sep=".").iloc[0].to_dict()
    # Compared within a dataset: another dataset's own keys (Planetoid has no `dataset.nodes`) and
    # the names shown beside the setting anyway say nothing.
    out = {}
    for name in {f.get("dataset.name") for f in flat.values()}:
        group = {s: f for s, f in flat.items() if f.get("dataset.name") == name}
        keys = sorted({k for f in group.values() for k in f} - {"dataset.name", "model.name"})
        varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in group.values()}) > 1]
        out.update({s: " ".join(f"{k}={f.get(k)}" for k in varying) for s, f in group.items()})
    return out
