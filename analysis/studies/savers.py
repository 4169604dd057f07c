"""Study `savers` (docs/savers.md): two presets that write to one folder (results/savers).

- Memory and time (experiment=savers): `full_halo` and `sar`, each in fp32 and bf16
  (`precision`), with and without activation checkpointing (`memory.checkpoint=layer`), on one
  large graph: the largest rank's training working set and the median epoch time, as ratios to plain
  `full_halo` in fp32 of the same model. Goals: checkpointing brings full_halo's working set to
  <= 0.5x at <= 1.5x its epoch time; and a sentence per model on whether SAR beats checkpointed
  full_halo in memory and in time.
- Quantised messages (experiment=savers_quantize): `comm.quantize` (bf16, int8, int4, int2; int8 also
  with `comm.quantize_grads`) and AdaQP against exact `full_halo` in fp32: test accuracy over seeds
  and halo bytes per epoch. Goals: bf16 and int8 cost <= 0.5 point; int8 moves <= 0.3x full_halo's
  halo bytes; AdaQP within 0.5 point at <= 0.35x.

Which table a run belongs to: runs are grouped by dataset, model, workers and setting (the savers
are axes, so every variant of one preset's graph shares a setting). A group holding a run of SAR,
checkpointing or bf16 is a memory group; a group holding a quantised or AdaQP run, or no memory
variant at all, is a quantisation group (a group may be both; its plain full_halo is then the
baseline of both tables). Nothing here is compared with a published number: none was measured in
these settings.

Halo bytes: every training category whose name starts with `halo` (`halo_fwd`, `halo_bwd`, the
recompute's `halo_fwd_recompute`, and whatever halo categories AdaQP counts), per epoch, all ranks."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import figures, paired, records
from analysis.markdown import fmt, image, md_table

GIB = 2 ** 30
KEYS = ["dataset", "model", "workers", "setting"]
EXACT = "full_halo"  # plain full_halo in fp32: what every ratio is taken against
# The variants each preset runs, spelt as the runtime names them (`benchmarks.run.record.run_variant`).
MEMORY_VARIANTS = [f"{m}{c}{p}" for m in ("full_halo", "sar") for p in ("", " precision=bf16")
                   for c in ("", " memory.checkpoint=layer")]
QUANTIZE_VARIANTS = ["full_halo", *(f"full_halo comm.quantize={q}" for q in ("bf16", "int8", "int4", "int2")),
                     "full_halo comm.quantize=int8 comm.quantize_grads=True", "adaqp"]
CHECKPOINTED = "full_halo memory.checkpoint=layer"
# (variant, goal on the test accuracy cost in points, goal on the halo bytes ratio)
QUANTIZE_GOALS = {"full_halo comm.quantize=bf16": (0.5, None), "full_halo comm.quantize=int8": (0.5, 0.3),
                  "adaqp": (0.5, 0.35)}


def _savers(config: dict) -> tuple[str, str, str]:
    """(checkpoint, precision, quantize) of a run; records from before a saver existed ran without it."""
    return ((config.get("memory") or {}).get("checkpoint", "none"), config.get("precision", "fp32"),
            (config.get("comm") or {}).get("quantize", "none"))


def _memory_run(row) -> bool:
    """A run the memory table shows: full_halo or SAR with unquantised messages."""
    return row["method"] in ("full_halo", "sar") and _savers(row["config"])[2] == "none"


def _memory_variant(row) -> bool:
    """A run only the memory preset makes: SAR, checkpointing or bf16."""
    checkpoint, precision, _ = _savers(row["config"])
    return _memory_run(row) and (row["method"] == "sar" or checkpoint != "none" or precision != "fp32")


def _halo(by_category: dict, recompute: bool) -> float:
    return sum(b for c, b in by_category.items() if c.startswith("halo") and c.endswith("_recompute") == recompute)


def split(recs: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs of the memory table and those of the quantisation table (module docstring)."""
    runs_df = records.runs(recs)
    runs_df["halo_bytes_per_epoch"] = runs_df["comm_by_category"].map(lambda c: _halo(c, recompute=False))
    runs_df["recompute_bytes_per_epoch"] = runs_df["comm_by_category"].map(lambda c: _halo(c, recompute=True))
    runs_df["grad_bytes_per_epoch"] = runs_df["comm_by_category"].map(lambda c: c.get("grad_allreduce", 0.0))
    runs_df["memory_variant"] = runs_df.apply(_memory_variant, axis=1)
    runs_df["memory_run"] = runs_df.apply(_memory_run, axis=1)
    memory, quantize = [], []
    for _, g in runs_df.groupby(KEYS, sort=True):
        if g["memory_variant"].any():
            memory.append(g[g["memory_run"]])
        if not g["memory_variant"].any() or (~g["memory_run"]).any():
            quantize.append(g[~g["memory_variant"]])
    empty = runs_df.iloc[0:0]
    return pd.concat(memory or [empty]), pd.concat(quantize or [empty])


def _per_variant(runs_df: pd.DataFrame, expected: list[str], columns: list[str]) -> pd.DataFrame:
    """One row per group and variant, the expected variants first (`status` "not run" where a group
    has none), then any other variant the group ran: means over ok seeds, standard deviations, the
    count of ok and failed runs and the first failure's error."""
    rows = []
    for key, g in runs_df.groupby(KEYS, sort=True):
        variants = expected + sorted(set(g["variant"]) - set(expected))
        for variant in variants:
            v = g[g["variant"] == variant]
            ok = v[v["status"] == "ok"]
            row = {**dict(zip(KEYS, key)), "variant": variant, "seeds": len(ok), "failed": len(v) - len(ok),
                   "cores": v["cores"].max() if len(v) else math.nan,
                   "status": "ok" if len(ok) else "failed" if len(v) else "not run",
                   "error": (v.loc[v["status"] != "ok", "error"].dropna().tolist() or [None])[0]}
            for c in columns:
                row[c] = ok[c].mean() if len(ok) else math.nan
                row[f"{c}_std"] = ok[c].std(ddof=1) if len(ok) > 1 else math.nan
            rows.append(row)
    t = pd.DataFrame(rows)
    t.attrs["groups"] = runs_df.attrs.get("groups", {})  # the figures' colours
    return t


def _vs_exact(t: pd.DataFrame, column: str) -> list[float]:
    """Each row's `column` over plain full_halo's in the same group (NaN where that is missing)."""
    exact = {tuple(r[k] for k in KEYS): r[column] for r in t.to_dict("records") if r["variant"] == EXACT}
    out = []
    for r in t.to_dict("records"):
        e = exact.get(tuple(r[k] for k in KEYS), math.nan)
        out.append(r[column] / e if e == e and e and r[column] == r[column] else math.nan)
    return out


def memory_table(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Per group, one row per variant: the largest rank's training working set (`train_mem_bytes`,
    the sar study's metric) and the median epoch time, each with its ratio to plain full_halo;
    halo bytes per epoch, the recompute's apart."""
    t = _per_variant(runs_df, MEMORY_VARIANTS, ["train_mem_bytes", "epoch_time_s", "halo_bytes_per_epoch",
                                                "recompute_bytes_per_epoch"])
    if len(t):
        t["mem_ratio"] = _vs_exact(t, "train_mem_bytes")
        t["time_ratio"] = _vs_exact(t, "epoch_time_s")
    return t


def quantize_table(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Per group, one row per variant: test accuracy over seeds, its cost against plain full_halo in
    points (positive: below it), the paired effect against full_halo seed by seed (`effect`, a
    `paired.Effect`: every codec's exact control is plain full_halo, and AdaQP's, `bits=32`, is
    full_halo up to float order), halo and gradient bytes per epoch, and the halo bytes' ratio."""
    t = _per_variant(runs_df, QUANTIZE_VARIANTS, ["test_acc", "halo_bytes_per_epoch", "grad_bytes_per_epoch"])
    if len(t):
        exact = {tuple(r[k] for k in KEYS): r["test_acc"] for r in t.to_dict("records") if r["variant"] == EXACT}
        t["acc_gap_pt"] = [100 * (exact.get(tuple(r[k] for k in KEYS), math.nan) - r["test_acc"])
                           for r in t.to_dict("records")]
        t["effect"] = [None if r["variant"] == EXACT else paired.effect(paired.differences(
            runs_df, r["variant"], EXACT, "test_acc", {k: r[k] for k in KEYS})) for r in t.to_dict("records")]
        t["bytes_ratio"] = _vs_exact(t, "halo_bytes_per_epoch")
    return t


def _verdict(value: float, goal: float, what: str) -> str:
    return f"{what} (goal <= {goal:g}: {'met' if value <= goal else 'NOT met'})"


def _status(r: dict) -> str:
    if r["status"] == "failed":
        return "**failed**" + (f": {r['error'].splitlines()[0][:80]}" if r["error"] else "")
    return r["status"] + (f", {r['failed']} failed" if r["failed"] and r["status"] == "ok" else "")


def memory_goals(t: pd.DataFrame) -> list[str]:
    """Checkpointing's goal and the SAR-against-checkpointing sentence, per group."""
    lines = []
    for key, g in t.groupby(KEYS, sort=True):
        by = {r["variant"]: r for r in g.to_dict("records")}
        name = f"{key[0]} {key[1]} P={key[2]}"
        exact, ckpt, sar = by.get(EXACT), by.get(CHECKPOINTED), by.get("sar")
        # More ranks than cores: epoch times are time-slicing as much as the method, so a time goal is
        # not judged (the ratio is still shown).
        oversubscribed = g["cores"].min() < key[2]
        untimed = f" (not judged: {key[2]} ranks on {int(g['cores'].min())} cores)" if oversubscribed else ""
        if exact is None or exact["status"] != "ok":
            lines.append(f"- {name}: plain full_halo (fp32) {exact['status'] if exact else 'not run'}: no ratios")
            continue
        if ckpt["status"] != "ok":
            lines.append(f"- {name}: checkpointed full_halo {ckpt['status']}: goal not judged")
        else:
            lines.append(f"- {name}: checkpointed full_halo: "
                         + _verdict(ckpt["mem_ratio"], 0.5, f"working set {ckpt['mem_ratio']:.2f}x") + "; "
                         + (f"epoch time {ckpt['time_ratio']:.2f}x{untimed}" if untimed
                            else _verdict(ckpt["time_ratio"], 1.5, f"epoch time {ckpt['time_ratio']:.2f}x")))
        if ckpt["status"] == "ok" and sar["status"] == "ok":
            mem = sar["train_mem_bytes"] / ckpt["train_mem_bytes"]
            time = sar["epoch_time_s"] / ckpt["epoch_time_s"]
            in_time = (f"its epoch time {time:.2f}x{untimed}" if untimed else
                       f"{'beats' if time < 1 else 'does not beat'} it in time ({time:.2f}x its epoch time)")
            lines.append(f"- {name}: SAR {'beats' if mem < 1 else 'does not beat'} checkpointed full_halo in memory "
                         f"({mem:.2f}x its working set); {in_time}.")
        else:
            lines.append(f"- {name}: SAR against checkpointed full_halo not judged (sar {sar['status']}, "
                         f"checkpointed full_halo {ckpt['status']}).")
    return lines


def quantize_goals(t: pd.DataFrame) -> list[str]:
    lines = []
    for key, g in t.groupby(KEYS, sort=True):
        by = {r["variant"]: r for r in g.to_dict("records")}
        name = f"{key[0]} {key[1]} P={key[2]}"
        exact = by[EXACT]
        if exact["status"] != "ok":
            lines.append(f"- {name}: plain full_halo (fp32) {exact['status']}: goals not judged")
            continue
        for variant, (gap_goal, bytes_goal) in QUANTIZE_GOALS.items():
            r = by[variant]
            if r["status"] != "ok":
                lines.append(f"- {name} {variant}: {r['status']}")
                continue
            parts = [f"effect {r['effect'].text(digits=2)} pt (goal >= -{gap_goal:g} on the interval: "
                     f"{paired.within(r['effect'], gap_goal)})"]
            if bytes_goal is not None:
                parts.append(_verdict(r["bytes_ratio"], bytes_goal, f"halo bytes {r['bytes_ratio']:.3f}x"))
            if r["seeds"] != exact["seeds"]:  # a sweep under way: the means are over different seeds
                parts.append(f"over {r['seeds']} seed(s) against full_halo's {exact['seeds']}")
            lines.append(f"- {name} {variant}: " + "; ".join(parts))
    return lines


def memory_markdown(t: pd.DataFrame) -> str:
    return md_table(["dataset", "model", "P", "variant", "runs", "status", "train WS GiB", "x full_halo", "epoch s",
                     "x full_halo", "halo MB/epoch", "+ recompute MB/epoch"],
                    [[r["dataset"], r["model"], r["workers"], r["variant"], r["seeds"], _status(r),
                      fmt(r["train_mem_bytes"], 3, scale=GIB), fmt(r["mem_ratio"], 2),
                      fmt(r["epoch_time_s"], 3), fmt(r["time_ratio"], 2),
                      fmt(r["halo_bytes_per_epoch"], 1, scale=1e6), fmt(r["recompute_bytes_per_epoch"], 1, scale=1e6)]
                     for r in t.to_dict("records")])


def quantize_markdown(t: pd.DataFrame) -> str:
    return md_table(["dataset", "model", "P", "variant", "seeds", "status", "test acc %", "cost vs full_halo, pt",
                     "effect vs full_halo, pt [95 % CI] (pairs)", "halo MB/epoch", "x full_halo",
                     "grad all-reduce MB/epoch"],
                    [[r["dataset"], r["model"], r["workers"], r["variant"], r["seeds"], _status(r),
                      fmt(100 * r["test_acc"], 1, std=100 * r["test_acc_std"]), fmt(r["acc_gap_pt"], 2),
                      "–" if r["effect"] is None else r["effect"].text(digits=2),
                      fmt(r["halo_bytes_per_epoch"], 3, scale=1e6), fmt(r["bytes_ratio"], 3),
                      fmt(r["grad_bytes_per_epoch"], 3, scale=1e6)] for r in t.to_dict("records")])


def _cores_note(t: pd.DataFrame) -> str:
    """How the times were measured: ranks against cores, from the records' `env`."""
    ok = t[t["status"] == "ok"]
    ranks, cores = int(t["workers"].max()), ok["cores"].min()
    if cores != cores:
        return f"time measured with {ranks} ranks"
    return f"time measured with {ranks} ranks on {int(cores)} cores" + (": ratios only" if cores < ranks else "")


def section(recs: list[dict], out_dir: Path) -> list[str]:
    memory_runs, quantize_runs = split(recs)
    out_dir = Path(out_dir)
    parts = []
    if len(memory_runs):
        t = memory_table(memory_runs)
        parts += ["## Study: savers — memory and time (checkpointing, bf16, SAR)", "",
                  "`experiment=savers`. One seed; train WS: the largest rank's training working set (peak during "
                  "training minus the resident memory at its start); epoch s: median epoch time after warm-up, "
                  "slowest rank; x full_halo: the ratio to plain full_halo in fp32 of the same model; halo MB/epoch: "
                  "the step's halo rows and gradients, all ranks, and beside it what the recompute of a checkpointed "
                  f"layer fetches again (`halo_fwd_recompute`, ...). {_cores_note(t).capitalize()}. No published "
                  "number is shown: none was measured in this setting.", "",
                  memory_markdown(t), "",
                  "Goals: checkpointing cuts full_halo's largest training working set to <= 0.5x at <= 1.5x its "
                  f"epoch time; does SAR beat checkpointed full_halo in memory and in time ({_cores_note(t)})?", "",
                  *memory_goals(t), "",
                  image(figures.working_set_vs_epoch_time(t, out_dir / "figures" / "savers"), out_dir), ""]
    if len(quantize_runs):
        t = quantize_table(quantize_runs)
        parts += ["## Study: savers — quantised messages (comm.quantize, AdaQP)", "",
                  "`experiment=savers_quantize`. Mean ± standard deviation over seeds; test accuracy at the best "
                  "validation epoch; cost: plain full_halo's (fp32 messages) minus the variant's, in points "
                  "(positive: below it); halo MB/epoch: every halo category (rows forward, gradients backward, "
                  "AdaQP's), all ranks, at the size sent; the gradient all-reduce apart (`comm.quantize_grads` "
                  "quantises it). No published number is shown: none was measured in these settings.", "",
                  quantize_markdown(t), "",
                  "Effect: the variant minus full_halo seed by seed, mean and 95 % Student-t interval (\"within "
                  "noise\" where it contains 0). Goals, judged on the interval (its lower end >= -0.5): bf16 and "
                  "int8 messages cost <= 0.5 point; int8 moves <= 0.3x full_halo's halo bytes; AdaQP within 0.5 "
                  "point at <= 0.35x its halo bytes.", "",
                  *quantize_goals(t), ""]
        parts += [image(figures.accuracy_cost_vs_bytes_ratio(t, out_dir / "figures" / "savers"), out_dir), ""]
    return parts
