"""`python -m analysis advise --graph G --hardware H --workers 16,32,64 [--model sage] [--hidden 256]
[--layers 3]`: which method to run on a cluster one does not have yet, with no record needed.

Every registered method (an alias at its own option values) is projected at its default options by
the cost model, on the graph's partition statistics (`projection.load_stats`) and the hardware
profile: the path of `project --workers` without the records (`projection.project_setting`). Per
worker count, the methods that fit a rank's memory ranked by projected epoch time, then those that do
not, each beside what the suite measured of it at small scale: its accuracy effect against its exact
control at the measured P nearest the P asked, named, and said to be extrapolated beyond the largest
P measured (docs/results/findings.csv at P=2, docs/results/scaling.csv as P grows), and the
projection's validated error (docs/results/projection.csv). The page opens with what it recommends
(analysis/recommend.py: fits, no resolved accuracy cost, fastest to the target accuracy; the command
to run it, ranges from the validated error, device-hours).

Writes `advise.md` (what it prints), `advise.json` and `figures/advise.png` / `.pdf`.
"""
from __future__ import annotations

import csv
from pathlib import Path

from analysis import PROJECT_ROOT, costmodel, projection, recommend
from analysis.markdown import md_table

RESULTS = PROJECT_ROOT / "docs" / "results"
#: What the suite measured: each method's accuracy effect (the `findings` study), and the
#: projection's validation (`experiment=projection_validate`). Tests point these elsewhere.
FINDINGS, VALIDATION = RESULTS / "findings.csv", RESULTS / "projection.csv"
#: The `scaling` study: each approximation's effect against its control at several P.
SCALING = RESULTS / "scaling.csv"
SCALING_COLUMNS = ("method", "dataset", "model", "partitioner", "workers", "control", "pairs", "effect_pt",
                   "effect_low_pt", "effect_high_pt")
#: Their columns; those named in NUMBERS are read as numbers (empty: not applicable).
FINDINGS_COLUMNS = ("method", "family", "exactness", "reference", "dataset", "model", "workers", "seeds", "test_acc",
                    "effect_pt", "effect_low_pt", "effect_high_pt", "ws_vs_single", "bytes_vs_control",
                    "bytes_per_epoch", "target_val_acc", "epochs_to_target", "missed_target")
VALIDATION_COLUMNS = ("quantity", "median_error", "largest_error", "runs", "hardware", "source")
NUMBERS = {"workers", "seeds", "pairs", "test_acc", "effect_pt", "effect_low_pt", "effect_high_pt", "ws_vs_single",
           "bytes_vs_control", "bytes_per_epoch", "median_error", "largest_error", "runs", "target_val_acc",
           "epochs_to_target", "missed_target"}
QUANTITIES = {"epoch_time": "epoch time", "working_set": "training working set"}
MODELS = ("sage", "gcn", "gat")
GB = 1e9  # decimal, as the profiles state a device's memory


def read_table(path, columns: tuple, option: str) -> list[dict]:
    """The rows of the CSV at `path`, NUMBERS among `columns` read as numbers (None where empty); []
    where there is no file (nothing measured yet). UserError, one line naming `option`, for a file
    that cannot be read, lacks a column or holds a number that is not one."""
    from benchmarks.base.errors import UserError
    path = Path(path)
    if not path.exists():
        return []
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{option} {path}: not a readable CSV file ({e})") from None
    if missing:
        raise UserError(f"{option} {path}: no column {', '.join(missing)} (it needs {', '.join(columns)})")
    for line, r in enumerate(rows, start=2):
        for c in NUMBERS.intersection(columns):
            text = (r[c] or "").strip()
            try:
                r[c] = float(text) if text else None
            except ValueError:
                raise UserError(f"{option} {path} line {line}: {c} is {text!r}, not a number") from None
    return rows


def curve_rows(scaling: list[dict]) -> list[dict]:
    """The scaling study's rows as findings rows (the effect against the control at each P)."""
    return [{"method": r["method"], "family": "", "exactness": "approximate", "reference": r["control"],
             "dataset": r["dataset"], "model": r["model"], "workers": r["workers"], "seeds": r["pairs"],
             "test_acc": None, "effect_pt": r["effect_pt"], "effect_low_pt": r["effect_low_pt"],
             "effect_high_pt": r["effect_high_pt"],
             # the scaling page judges with Holm's correction (`holm`); a findings row has none (no key)
             "holm": str(r.get("holm", "")).strip().lower() == "true"} for r in scaling]


def nearest(accuracy: list[dict], p: int) -> tuple[dict | None, str]:
    """The measured row of `accuracy` at the worker count nearest `p` (in ratio: 8 is as near 16 as
    32), and how it stands to `p`: `at P=w`, or `at P=w, extrapolated to P=p` beyond the largest P
    measured. The first dataset measured, as the findings list them."""
    measured = [f for f in accuracy if f["dataset"] == accuracy[0]["dataset"] and f["workers"]] if accuracy else []
    if not measured:
        return None, ""
    import math
    best = min(measured, key=lambda f: (abs(math.log2(f["workers"] / p)), -f["workers"]))
    w = int(best["workers"])
    largest = max(int(f["workers"]) for f in measured)
    return best, (f"at P={w}" if p <= largest else f"at P={w}, extrapolated to P={p}")


def model_of(name: str, features: int, hidden: int, classes: int, layers: int):
    """The suite's model; what advise does not ask (dropout, GAT's heads) at the run config's defaults."""
    from omegaconf import OmegaConf

    from benchmarks.base.registry import CONF
    heads = OmegaConf.load(CONF / "model" / "gat.yaml")["heads"]
    return projection.build_model(name, features, hidden, classes, layers, heads,
                                  dropout=OmegaConf.load(CONF / "config.yaml")["dropout"])


def cited(path) -> str:
    """How a page names a measured table it read: relative to the project root where it lies inside."""
    path = Path(path).resolve()
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


#: What a method whose plugin failed is said to be, where its `About` could not be read.
FAILED_ABOUT = {"family": "", "kind": "failed", "approximates": "", "claim": ""}


def advise(stats: dict, profile, workers: list[int], model, spec: dict, findings: list[dict],
           validation: list[dict], measured: dict | None = None, command: str = "",
           tolerance: float | None = None) -> dict:
    """Every registered method projected at each P of `workers` with the built `model` (`spec`: its
    name, hidden width and layers): rows as `projection.row`'s, with what the method is (`about`:
    family, kind, ...; as its records state it) and its rows of `findings` (`accuracy`); and the
    methods left out, with their reason. `measured`: the tables `findings` was read from, which the
    page cites; `command`: the command line that writes the page; `tolerance`: the accuracy cost in
    points a user accepts (analysis/recommend.py, which also marks the rows at P=1 and those an option
    makes fast, and states how to run each row: `ranks_per_node`, `device_kind`, `dataset_overrides`)."""
    from benchmarks.run.method import method_class, method_defaults
    from benchmarks.run.methods_table import about
    from benchmarks.base.registry import method_names
    rows, left_out = [], []
    for name in method_names():
        accuracy = [f for f in findings if f["method"] == name]
        # a plugin that raises (importing it, in a hook) is left out with its one line; the others go on
        why = costmodel.why_not_modelled(name)
        try:
            what = costmodel.asking(name, "its About", about, name)
        except costmodel.PluginFailed as e:
            what, why = FAILED_ABOUT, why or str(e)
        if why:
            left_out.append({"method": name, "about": what, "why": why, "accuracy": accuracy})
            continue
        try:
            # a one-process method (single, gas) runs on one device whatever P: its P=1 row in every table
            one_device = method_class(name).single_process
            mine, mine_left_out = [], []
            for variant, options in variants(name, costmodel.asking(name, "its Options", method_defaults, name)):
                projected, skipped = projection.project_setting(
                    {"method": name, "variant": variant, "model": spec["name"]}, options, model, stats,
                    [1] if one_device else workers, profile)
                mine += [{**r, "workers": p, "devices": r["workers"], "about": what, "accuracy": accuracy}
                         for r in projected for p in (workers if one_device else [r["workers"]])]
                mine_left_out += [{"method": name, "about": what, "why": reason, "accuracy": []}
                                  for _, reason in skipped]
        except costmodel.PluginFailed as e:
            left_out.append({"method": name, "about": what, "why": str(e), "accuracy": accuracy})
            continue
        rows += mine
        left_out += mine_left_out
    g = stats["graph"]
    result = {"graph": g["name"], "partition": stats.get("proxy") or f"{stats.get('source', 'measured')} partition "
            "statistics", "hardware": profile.name, "device": getattr(profile, "description", ""),
            "model": {**spec, "features": g["features"], "classes": g["classes"]}, "workers": workers,
            "memory_per_rank_bytes": {p: costmodel.rank_memory(profile, p) for p in workers},
            "validation": validation, "measured": measured or {}, "command": command, "rows": rows,
            "left_out": left_out, "tolerance": tolerance, "ranks_per_node": profile.ranks_per_node,
            "device_kind": profile.device, "dataset_overrides": recommend.dataset_overrides(stats)}
    recommend.annotate(result, stats, profile, model)
    return result


def variants(name: str, defaults: dict) -> list[tuple[str, dict]]:
    """(variant, options) advise projects for method `name`: its defaults, then what its plugin names
    as a user's other choice (`Method.Cost.advise_variants`: neighbour sampling with a feature cache), for
    the plugin's own name only (an alias is a choice of option values already)."""
    from benchmarks.run.method import method_class
    from benchmarks.base.registry import alias_of
    if alias_of(name) is not None:
        return [(name, defaults)]
    return [(name, defaults)] + [(f"{name} {v}", {**defaults, **o})
                                 for v, o in method_class(name).Cost.advise_variants.items()]


def number(x: float) -> str:
    """Three significant figures; whole numbers from 1000 on (no exponent)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def effect(finding: dict, short: bool = False) -> str:
    """A measured accuracy effect: `-0.4 pt [-1.6, +0.9] vs <reference>, <dataset> · <model>, 5 seeds`
    (`short`: the effect and its interval alone). The findings leave it empty for the reference
    itself and where too few seeds paired."""
    e, low, high = finding["effect_pt"], finding["effect_low_pt"], finding["effect_high_pt"]
    if e is None:
        acc = finding["test_acc"]
        text = "no effect measured" + (f" (test acc {acc:.1%})" if acc is not None and not short else "")
    else:
        text = f"{e:+.1f} pt" + (f" [{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else "")
    if short:
        return text
    against = f" vs {finding['reference']}" if finding["reference"] else " (the reference)"
    seeds = f", {finding['seeds']:g} seeds" if finding["seeds"] is not None else ""
    at = f", P={finding['workers']:g}" if finding.get("workers") else ""
    return f"{text}{against}, {finding['dataset']} · {finding['model']}{at}{seeds}"


def validated(validation: list[dict], hardware: str) -> str:
    """The projection's validated error, and where it does not reach."""
    if not validation:
        return "The projection's error: not validated (no validation rows)."
    where = sorted({r["hardware"] for r in validation})
    runs = "/".join(sorted({f"{r['runs']:g}" for r in validation if r["runs"] is not None}))
    errors = ", ".join(f"{QUANTITIES.get(r['quantity'], r['quantity'])} within {number(100 * r['median_error'])} % "
                       f"median ({number(100 * r['largest_error'])} % largest)" for r in validation)
    beyond = ("at projected scale (this graph, these worker counts)" if where == [hardware] else
              f"on {hardware}, and at projected scale,")
    return (f"Validated on {', '.join(where)} ({runs} runs): {errors}; {beyond} the error is not validated. "
            f"Source: {'; '.join(sorted({r['source'] for r in validation}))}")


def markdown(result: dict) -> str:
    """What advise prints and writes to advise.md: first one screen, the recommendation and the
    runner-up with their commands and ranges (`recommend.summary`); then one compact table per worker
    count (Markdown, padded so that it reads in a terminal too), each method's measured accuracy effect
    and the methods left out."""
    text = [f"# Which method: {title(result)} (projected, not measured)", "", *recommend.summary(result),
            "## How these figures were made", "",
            f"- Device: {result['device']}", f"- Partition: {result['partition']}",
            f"- {validated(result['validation'], result['hardware'])}",
            *([f"- Command: `{result['command']}`"] if result.get("command") else []),
            *(["- Measured (accuracy effects, epochs to target): "
               + ", ".join(f"`{path}`" for path in result["measured"].values())] if result.get("measured") else []),
            "- Each method at its default options (`python -m benchmarks --methods`). Projected: epoch time, peak "
            "memory per rank (the largest rank: training working set + graph, features, parameters) and training "
            "bytes per epoch over all ranks (the mean rank × P on extrapolated statistics), host memory per "
            "device where a method keeps its graph there. Measured at small scale: the accuracy effect, and the "
            "epochs to the findings' target accuracy (95 % of the best validation accuracy any run reached, on the "
            "findings' dataset and P; an epoch is the method's own: a pass over the training nodes, or one round of "
            "local steps for the local-round family), which `s to target` multiplies by the projected epoch time. "
            "Epochs at this graph's scale are not measured: read that column as a shape, not a forecast."]
    for p in result["workers"]:
        at = [r for r in result["rows"] if r["workers"] == p]
        fit = sorted((r for r in at if r["fits"]), key=lambda r: r["projected_epoch_s"])
        out = sorted((r for r in at if not r["fits"]), key=lambda r: r["projected_peak_mem_bytes"])
        has = number(result["memory_per_rank_bytes"][p] / GB)
        text += ["", f"## {p} workers", ""]
        text += [f"Fit in the {has} GB a rank has, fastest epoch first:", "", _ranked(fit, p, result), "",
                 choice_at(result, p)] if fit else \
            [f"None fits in the {has} GB a rank has."]
        if out:
            text += ["", f"Do not fit in {has} GB:", "",
                     md_table(["method", "peak GB/rank", "a rank has, GB", "epoch s", "kind"],
                              [[r.get("variant") or r["method"], number(r["projected_peak_mem_bytes"] / GB), has,
                                number(r["projected_epoch_s"]), r["about"]["kind"]] for r in out], aligned=True)]
    methods = {r["method"]: r for r in result["rows"]}.values()
    text += ["", "## Accuracy effect, measured at small scale (each at the P it names)", "",
             md_table(["method", "kind", "accuracy effect"],
                      [[r["method"], r["about"]["kind"], "; ".join(map(effect, r["accuracy"])) or "not measured"]
                       for r in methods], aligned=True)]
    if result["left_out"]:
        text += ["", "## Not projected", "",
                 md_table(["method", "kind", "why", "accuracy effect (measured)"],
                          [[r["method"], r["about"]["kind"], r["why"],
                            "; ".join(effect(f, short=True) for f in r.get("accuracy", [])) or "not measured"]
                           for r in result["left_out"]], aligned=True)]
    return "\n".join(text) + "\n"


def to_target(row: dict) -> tuple[float | None, str]:
    """The epochs the method took to the findings' target accuracy at small scale (the findings' row
    of the method, `epochs_to_target`: median over its seeds) and the text for it: `10 (5 seeds)`;
    where some seeds did not reach it, no number (`25 in 3 of 5 seeds, not reached in 2`); `not
    reached`, or `not measured`."""
    if row.get("as_control"):  # measured with the approximation, which has nothing to act on at P=1
        return None, "its control's: not measured"
    f = next((f for f in row["accuracy"] if f.get("epochs_to_target") is not None
              or f.get("missed_target") is not None), None)
    if f is None:
        return None, "not measured"
    seeds, missed = f["seeds"] or 0, f.get("missed_target") or 0
    if f["epochs_to_target"] is None:
        return None, "not reached"
    if missed:  # a median over the seeds that got there flatters a method most seeds of which did not
        return None, f"{f['epochs_to_target']:g} in {seeds - missed:g} of {seeds:g} seeds, not reached in {missed:g}"
    return f["epochs_to_target"], f"{f['epochs_to_target']:g} ({seeds:g} seeds)"


def seconds_to_target(row: dict) -> float | None:
    """The epochs to the target (`to_target`) at the projected epoch time; None where not measured (or
    measured with an approximation that has nothing to act on at P=1: `recommend.annotate`)."""
    epochs, _ = to_target(row)
    return None if epochs is None else epochs * row["projected_epoch_s"]


def _ranked(rows: list[dict], p: int, result: dict) -> str:
    """The methods that fit at `p` workers, in the order given; the accuracy effect that applies at
    `p` (`recommend.finding_at`: measured at the P nearest, named); epochs to the findings' target
    accuracy and what they cost at the projected epoch time; each row's place in the recommendation's
    order (`recommend.ranked`) or why it has none."""
    candidates, refused = recommend.ranked(result["rows"], p, result.get("tolerance"))
    place = {id(r): f"{i}" for i, r in enumerate(candidates, 1)} | {id(r): why for r, why in refused}

    def measured(r):
        row, where = recommend.finding_at(r, p)
        return f"{effect(row, short=True)} {where}" if row else (where or "not measured")

    def to_target_s(r):
        seconds = seconds_to_target(r)
        return number(seconds) if seconds is not None else ""
    return md_table(["#", "method", "devices", "epoch s", "epochs to target", "s to target", "peak GB/device",
                     "host GB/device", "GB/epoch", "kind", "accuracy effect", "where the time goes",
                     "to the target, among candidates"],
                    [[i, r.get("variant") or r["method"], r.get("devices", p), number(r["projected_epoch_s"]),
                      to_target(r)[1], to_target_s(r),
                      number(r["projected_peak_mem_bytes"] / GB), number(r.get("projected_host_mem_bytes", 0) / GB),
                      number(r["projected_bytes_per_epoch"] / GB), r["about"]["kind"], measured(r),
                      reason(r) + (f"; {r['option_saves']['option']} (an option) saves "
                                   f"{1 - r['projected_epoch_s'] / r['option_saves']['plain_epoch_s']:.0%}"
                                   if r.get("option_saves") else ""), place[id(r)]]
                     for i, r in enumerate(rows, 1)], aligned=True)


def choice_at(result: dict, p: int) -> str:
    """One line on the recommendation at `p` workers alone (`recommend.ranked`: fits, no resolved accuracy
    cost, fastest to the target), with its reason."""
    candidates, _ = recommend.ranked(result["rows"], p, result.get("tolerance"))
    if not candidates:
        return f"Recommended at {p} workers: none (each method that fits has a resolved accuracy cost)."
    first = candidates[0]
    return (f"Recommended at {p} workers: {recommend.name_of(first)}: "
            f"{recommend.why(first, result, result.get('tolerance'))}")


def reason(row: dict) -> str:
    """Why a row fits and where its time goes: its two largest time terms, with their shares."""
    terms = {k: v for k, v in row["time_terms"].items() if v > 0 and k != "hidden_exchange"}
    total = sum(terms.values()) or 1.0
    top = sorted(terms.items(), key=lambda kv: -kv[1])[:2]
    return ", ".join(f"{k} {v / total:.0%}" for k, v in top)


def title(result: dict) -> str:
    m = result["model"]
    return f"{result['graph']} · {m['name']} {m['layers']} × {m['hidden']} on {result['hardware']}"


def write(result: dict, out_dir) -> list[Path]:
    """advise.md, advise.json and figures/advise.png / .pdf in `out_dir`."""
    from analysis.figures import advise_vs_workers
    from benchmarks.base.outputs import write_atomic
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "advise.md").write_text(markdown(result))
    write_atomic(out / "advise.json", result)
    return [out / "advise.md", out / "advise.json",
            *advise_vs_workers(result["rows"], result["memory_per_rank_bytes"], out / "figures",
                               f"{title(result)}: projected, each method at its default options")]
