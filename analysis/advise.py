"""`python -m analysis advise --graph G --hardware H --workers 16,32,64 [--model sage] [--hidden 256]
[--layers 3]`: which method to run on a cluster one does not have yet, with no record needed.

Every registered method (an alias at its own option values) is projected at its default options by
the cost model, on the graph's partition statistics (`projection.load_stats`) and the hardware
profile: the path of `project --workers` without the records (`projection.project_setting`). Per
worker count, the methods that fit a rank's memory ranked by projected epoch time, then those that do
not, each beside what the suite measured of it at small scale: its accuracy effect against its exact
control (docs/results/findings.csv at P=2, every docs/results/scaling*.csv as P grows: one a graph), carried
to the user's graph only inside the regime it was measured in (`nearest`): the same model, parts made by the
same partitioner, a P within the P measured, and the graph's halo rows per node at that P (from its statistics
file, `statistic_here`) within the range the measured pages state (`effect_rows`), and so its label skew where
the file states one;
elsewhere the cell says "not measured in this regime" with both figures; and
the projection's validated error (docs/results/projection.csv). The page opens with what it recommends
(analysis/recommend.py: fits, no resolved accuracy cost, accuracy known here before not, fastest to the
target accuracy; the command
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
#: The `scaling` study's tables, one a graph (scaling.csv: Cora's; scaling_citeseer.csv: CiteSeer's...): each
#: approximation's effect against its control at several P.
SCALING_TABLES = "scaling*.csv"
SCALING_COLUMNS = ("method", "dataset", "model", "partitioner", "workers", "control", "pairs", "effect_pt",
                   "effect_low_pt", "effect_high_pt", "halo_rows_per_node")
#: Columns of the measured tables read where a table has them (tables published before them lack them): the
#: regime's statistics.
OPTIONAL_COLUMNS = ("partitioner", "halo_rows_per_node", "label_skew_mean")
#: Their columns; those named in NUMBERS are read as numbers (empty: not applicable).
FINDINGS_COLUMNS = ("method", "family", "exactness", "reference", "dataset", "model", "workers", "seeds", "test_acc",
                    "effect_pt", "effect_low_pt", "effect_high_pt", "ws_vs_single", "bytes_vs_control",
                    "bytes_per_epoch", "target_val_acc", "epochs_to_target", "missed_target")
VALIDATION_COLUMNS = ("quantity", "median_error", "largest_error", "runs", "hardware", "source")
NUMBERS = {"workers", "seeds", "pairs", "test_acc", "effect_pt", "effect_low_pt", "effect_high_pt", "ws_vs_single",
           "bytes_vs_control", "bytes_per_epoch", "median_error", "largest_error", "runs", "target_val_acc",
           "epochs_to_target", "missed_target", "halo_rows_per_node", "label_skew_mean"}
QUANTITIES = {"epoch_time": "epoch time", "working_set": "training working set"}
MODELS = ("sage", "gcn", "gat")
GB = 1e9  # decimal, as the profiles state a device's memory


def read_table(path, columns: tuple, option: str, optional: tuple = ()) -> list[dict]:
    """The rows of the CSV at `path`, NUMBERS among `columns` and the `optional` columns (OPTIONAL_COLUMNS for
    the measured tables) read as numbers (None where empty; an optional column it lacks: None); [] where there
    is no file (nothing measured yet). UserError, one line naming `option`, for a file that cannot be read,
    lacks a column or holds a number that is not one."""
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
        for c in optional:
            r.setdefault(c, "")
        for c in NUMBERS.intersection({*columns, *optional}):
            text = (r[c] or "").strip()
            try:
                r[c] = float(text) if text else None
            except ValueError:
                raise UserError(f"{option} {path} line {line}: {c} is {text!r}, not a number") from None
    return rows


def scaling_tables() -> list[Path]:
    """The published scaling tables (SCALING_TABLES in docs/results/), in name order."""
    return sorted(RESULTS.glob(SCALING_TABLES))


def measured(findings_path, scaling_paths) -> list[dict]:
    """Every measured effect row (`effect_rows`) of the findings table and the scaling tables at these paths
    (a list: one a graph), each read with the regime statistics it states (OPTIONAL_COLUMNS)."""
    scaling = [r for path in scaling_paths for r in read_table(path, SCALING_COLUMNS, "--scaling", OPTIONAL_COLUMNS)]
    return effect_rows(read_table(findings_path, FINDINGS_COLUMNS, "--findings", OPTIONAL_COLUMNS), scaling)


def curve_rows(scaling: list[dict]) -> list[dict]:
    """The scaling study's rows as findings rows (the effect against the control at each P), each with the
    partition statistic of its regime (STATISTIC) as the scaling page states it."""
    return [{"method": r["method"], "family": "", "exactness": "approximate", "reference": r["control"],
             "dataset": r["dataset"], "model": r["model"], "partitioner": r["partitioner"], "workers": r["workers"],
             "seeds": r["pairs"],
             "test_acc": None, "effect_pt": r["effect_pt"], "effect_low_pt": r["effect_low_pt"],
             "effect_high_pt": r["effect_high_pt"], STATISTIC: stated(r.get(STATISTIC)),
             SKEW: stated(r.get(SKEW)),
             # the scaling page judges with Holm's correction (`holm`); a findings row has none (no key)
             "holm": str(r.get("holm", "")).strip().lower() == "true",
             "verdict": r.get("verdict") or ""} for r in scaling]  # `paired.verdict`'s word, where the page states it


# ------------------------------------------------------------------ the regime an effect was measured in
#: The partition statistic an accuracy effect is carried to another graph through: every rank's halo rows
#: summed over the graph's nodes (how much boundary the partition gives an approximation to approximate),
#: the one statistic the measured pages state beside each P (analysis/studies/scaling.py).
STATISTIC, STATISTIC_NAME = "halo_rows_per_node", "halo rows/node"
#: How far beyond the measured [least, most] of the statistic a graph still counts as inside, as a share of
#: each edge: one graph's statistic at one P moves by a few percent between partition seeds, and the page
#: rounds it to 3 decimals; one step of P on the same graph moves it by far more (Cora, METIS: 0.099 at
#: P=2, 0.171 at P=4), so 10 % admits the noise of a measurement and not a neighbouring regime.
REGIME_TOLERANCE = 0.10
#: The second statistic the regime checks, where both the measured row and the user's statistics file state it:
#: the mean total-variation distance of a part's training labels from the global mix. On the scaling page the
#: local-rounds family's cost grows with P on METIS parts as their skew does (no page yet separates the skew from
#: the cut); a graph whose parts hold a near-global mix lies outside Cora's regime even at the same halo. An
#: extrapolated proxy's file states none: there it is not checked, and the page says so.
SKEW, SKEW_NAME = "label_skew_mean", "label skew"
#: The other statistics the effects may depend on (issue 47), which the regime does not check: the scaling page
#: states them beside each P, but on one graph's parts they move with P together with the two above. Each with
#: whether a statistics file's entry states it (a measured file's regime statistics, docs/records.md; an
#: extrapolated proxy's summary and fractions).
NOT_CHECKED = (
    ("cut fraction", lambda e: "cut_fraction" in e or "edge_cut" in e or "edge_cut_frac" in (e.get("fractions") or {})),
    ("training nodes per part", lambda e: "train_nodes_mean" in e or "train_nodes_per_rank" in e
     or "train_mean" in (e.get("summary") or {})))


def not_checked(stats: dict) -> str:
    """What the page says once of the statistics the regime does not check (NOT_CHECKED, and SKEW where the
    user's statistics file states none), naming those the file does not state either."""
    entries = [e for p, e in stats["by_workers"].items() if int(p) > 1]
    absent = [name for name, states in NOT_CHECKED if not any(states(e) for e in entries)]
    no_skew = not any(e.get(SKEW) is not None for e in entries)
    return (f"{', '.join(name for name, _ in NOT_CHECKED)}: the scaling page states them beside each P, but an "
            f"effect is carried by the partitioner, {STATISTIC_NAME} and {SKEW_NAME} alone"
            + (f"; this graph's statistics file has no {' or '.join(absent)} either" if absent else "")
            + ((", nor " if absent else "; this graph's statistics file states no ")
               + f"{SKEW_NAME}, which is therefore not checked either (a graph whose parts hold a near-global "
               "label mix may fare otherwise than Cora's)" if no_skew else ""))


def stated(x) -> float | None:
    """A statistic as a page states it: None where empty or NaN (the scaling page's "not known")."""
    return None if x is None or x != x else float(x)


def findings_partitioner() -> str:
    """The partitioner the findings study runs at: the suite's default (conf/experiment/findings.yaml
    names none)."""
    from omegaconf import OmegaConf

    from benchmarks.base.registry import CONF
    return OmegaConf.load(CONF / "config.yaml")["partitioner"]


def effect_rows(findings: list[dict], scaling: list[dict]) -> list[dict]:
    """Every measured effect row: the findings' (P=2), then the scaling study's (`curve_rows`), each with
    the partition statistics of the regime it was measured in (STATISTIC, SKEW): a row's own where its table
    states them (the findings' partitions at its P); else a findings row's from the scaling rows of its dataset,
    P and partitioner (tables from before the findings stated them); 0 at P=1 for an exact row (one part has no
    halo and the global label mix); None where no page states it, as for a one-process approximation, which
    approximates over its own mini-batch parts, not the workers' (such a row is carried nowhere). Every row
    names the partitioner it was measured on (a findings row without one: the findings study's)."""
    by_partition = {(r["dataset"], r["partitioner"], int(r["workers"]), key): stated(r.get(key))
                    for r in reversed(scaling) if r["workers"] for key in (STATISTIC, SKEW)}
    default = findings_partitioner() if findings else None

    def statistic(f, key):
        if f["workers"] == 1:  # one part: no halo, the global label mix
            return 0.0 if f.get("exactness") == "exact" else None
        if f.get(key) is not None:
            return f[key]
        return by_partition.get((f["dataset"], f.get("partitioner") or default, int(f["workers"] or 0), key))
    return [{**f, "partitioner": f.get("partitioner") or default, STATISTIC: statistic(f, STATISTIC),
             SKEW: statistic(f, SKEW)} for f in findings] + curve_rows(scaling)


def statistic_here(stats: dict, p: int) -> float | None:
    """The user's graph's STATISTIC at P=`p` from its statistics file (`projection.load_stats`): every
    rank's halo rows summed (`halo_nodes_per_rank`), or the mean rank's × P where an entry states only its
    `summary` (an extrapolated proxy), over the graph's nodes (a file's own `halo_rows_per_node` where it
    states one, the same quantity); 0 at P=1 (one part has no halo); None where
    the file has no entry at `p` or none of these."""
    if p == 1:
        return 0.0
    entry, nodes = stats["by_workers"].get(str(p)) or {}, stats["graph"]["nodes"]
    if isinstance(entry.get(STATISTIC), (int, float)):  # a file measured with the partition's regime statistics
        return float(entry[STATISTIC])
    if entry.get("halo_nodes_per_rank"):
        return sum(entry["halo_nodes_per_rank"]) / nodes
    halo_mean = (entry.get("summary") or {}).get("halo_mean")
    return None if halo_mean is None else halo_mean * p / nodes


def skew_here(stats: dict, p: int) -> float | None:
    """The user's graph's SKEW at P=`p` from its statistics file (a measured file's regime statistics); 0 at
    P=1 (one part holds the global mix); None where the file states none (an extrapolated proxy)."""
    if p == 1:
        return 0.0
    x = (stats["by_workers"].get(str(p)) or {}).get(SKEW)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _range(values: list) -> tuple[float, float] | None:
    xs = [x for x in values if x is not None]
    return (min(xs), max(xs)) if xs else None


def regimes(accuracy: list[dict]) -> list[dict]:
    """The regime a method's effect rows were measured in, one a dataset and partitioner: `dataset`,
    `partitioner`, `workers` (least, most P measured), `statistic` (least, most STATISTIC over its rows that
    state one; None where none does) and `skew` (the same of SKEW). Two partitioners of one graph are two
    regimes: the statistic's range of one says nothing of the gap between them."""
    out = []
    for dataset, partitioner in dict.fromkeys((f["dataset"], f.get("partitioner")) for f in accuracy if f["workers"]):
        rows = [f for f in accuracy if f["dataset"] == dataset and f.get("partitioner") == partitioner
                and f["workers"]]
        ps = [int(f["workers"]) for f in rows]
        out.append({"dataset": dataset, "partitioner": partitioner, "workers": (min(ps), max(ps)),
                    "statistic": _range([f.get(STATISTIC) for f in rows]), "skew": _range([f.get(SKEW) for f in rows])})
    return out


def _within(x: float, measured: tuple[float, float]) -> bool:
    low, high = measured
    return low * (1 - REGIME_TOLERANCE) <= x <= high * (1 + REGIME_TOLERANCE)


def inside(regime: dict, p: int, here: float | None, skew: float | None = None) -> bool:
    """Whether a graph whose statistic at P=`p` is `here` (and label skew `skew`) lies in `regime`: `p` within
    the P measured, `here` within the statistic's measured range, REGIME_TOLERANCE wider at each edge, and so
    `skew` where both the graph's file and the measured rows state one (not checked otherwise: `not_checked`)."""
    least, most = regime["workers"]
    if regime["statistic"] is None or here is None or not least <= p <= most:
        return False
    return _within(here, regime["statistic"]) and (skew is None or not regime.get("skew")
                                                   or _within(skew, regime["skew"]))


def regime_text(regime: dict) -> str:
    """`cora metis, P=2..8, halo rows/node 0.099-0.293, label skew 0.32-0.55` (the skew where rows state it)."""
    (least, most), x, k = regime["workers"], regime["statistic"], regime.get("skew")
    ps = f"P={least}" + (f"..{most}" if most != least else "")
    span = lambda r: f"{number(r[0])}" + (f"-{number(r[1])}" if r[1] != r[0] else "")  # noqa: E731
    parts = f" {regime['partitioner']}" if regime.get("partitioner") else ""
    return (f"{regime['dataset']}{parts}, {ps}, {STATISTIC_NAME} {span(x) if x else 'not stated'}"
            + (f", {SKEW_NAME} {span(k)}" if k else ""))


def nearest(accuracy: list[dict], p: int, here: float | None, skew: float | None = None) -> tuple[dict | None, str]:
    """The measured row of `accuracy` that applies at `p` workers on a graph whose statistic there is
    `here` (`statistic_here`) and label skew `skew` (`skew_here`; None: not known), and where it was measured:
    among the regimes that hold the graph (`inside`), the row whose statistic is nearest `here` (then whose label
    skew is nearest `skew` where both state one, then whose P is nearest `p`, in ratio), `at P=w, halo rows/node
    x (here y)`, with the skew where both state it. Where no regime holds it, a row that says so and why,
    which `recommend.effect_status` reads as NOT_IN_REGIME:
    `{"not_in_regime": "measured: cora metis, P=2..8, halo rows/node 0.099-0.293; here: 4.85 at P=16"}`.
    (None, "") where nothing was measured."""
    measured = [f for f in accuracy if f["workers"]]
    if not measured:
        return None, ""
    import math
    measured_regimes = regimes(measured)
    held = {(r["dataset"], r.get("partitioner")) for r in measured_regimes if inside(r, p, here, skew)}
    if not held:
        figure = ("not known" if here is None else number(here)) + (
            f", {SKEW_NAME} {number(skew)}" if skew is not None else "")
        return {"not_in_regime": f"measured: {'; '.join(map(regime_text, measured_regimes))}; here: {figure} at "
                                 f"P={p}", "effect_pt": None}, ""
    def skew_gap(f) -> float:  # two regimes at one statistic (a graph's two splits share its parts): the skew decides
        return 0.0 if skew is None or f.get(SKEW) is None else abs(f[SKEW] - skew)

    best = min((f for f in measured if (f["dataset"], f.get("partitioner")) in held and f.get(STATISTIC) is not None),
               key=lambda f: (abs(f[STATISTIC] - here), skew_gap(f), abs(math.log2(f["workers"] / p))))
    where = f"at P={int(best['workers'])}, {STATISTIC_NAME} {number(best[STATISTIC])} (here {number(here)})"
    if skew is not None and best.get(SKEW) is not None:
        where += f", {SKEW_NAME} {number(best[SKEW])} (here {number(skew)})"
    return best, where


def effect_at(row: dict, p: int) -> str:
    """What a ranked table says of a row's accuracy at `p` workers (`recommend.finding_at`): the effect and
    where it was measured, `not measured in this regime (...)`, or why there is none."""
    found, where = recommend.finding_at(row, p)
    if found is None:
        return where or not_measured(row)
    return " ".join(x for x in (effect(found, short=True), where) if x)


def not_measured(row: dict) -> str:
    """What a row without an effect for the user's model says: `not measured with gcn (measured with sage
    only)` where its method's rows are all another model's (another model is another regime: not carried),
    else `not measured`."""
    return row.get("not_measured", "not measured")


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


def cited_paths(measured: dict) -> list[str]:
    """Every table a result's `measured` names (its `scaling` entry a list: one a graph)."""
    return [path for paths in measured.values() for path in ([paths] if isinstance(paths, str) else paths)]


#: What a method whose plugin failed is said to be, where its `About` could not be read.
FAILED_ABOUT = {"family": "", "kind": "failed", "approximates": "", "claim": ""}


def advise(stats: dict, profile, workers: list[int], model, spec: dict, findings: list[dict],
           validation: list[dict], measured: dict | None = None, command: str = "",
           tolerance: float | None = None) -> dict:
    """Every registered method projected at each P of `workers` with the built `model` (`spec`: its
    name, hidden width and layers): rows as `projection.row`'s, with what the method is (`about`:
    family, kind, ...; as its records state it), its rows of `findings` (`accuracy`: `effect_rows`, each
    with the statistic of the regime it was measured in) and the user's graph's statistic on the devices
    it runs on (`statistic_here`), which decide where an effect applies (`nearest`); and the methods left
    out, with their reason. `measured`: the tables `findings` was read from, which the
    page cites; `command`: the command line that writes the page; `tolerance`: the accuracy cost in
    points a user accepts (analysis/recommend.py, which also marks the rows at P=1 and those an option
    makes fast, and states how to run each row: `ranks_per_node`, `device_kind`, `dataset_overrides`)."""
    from benchmarks.run.method import method_class, method_defaults
    from benchmarks.run.methods_table import about
    from benchmarks.base.registry import method_names
    rows, left_out = [], []
    # the user's graph's regime at each device count a row runs on (a one-process method's: 1)
    here = {p: statistic_here(stats, p) for p in sorted({1, *workers})}
    skew = {p: skew_here(stats, p) for p in here}
    # an effect is carried only from parts made as the user's graph's were, with the user's model: another
    # partitioner or another model is another regime (a row whose model cell is empty: any)
    partitioner = stats.get("partitioner") or findings_partitioner()
    for name in method_names():
        parted = [f for f in findings if f["method"] == name and f.get("partitioner", partitioner) == partitioner]
        accuracy = [f for f in parted if (f.get("model") or spec["name"]) == spec["name"]]
        # where every row is another model's, the cell says so, not a bare "not measured"
        others = sorted({f["model"] for f in parted} - {spec["name"]}) if parted and not accuracy else []
        # what every row of this method carries of its measurements (projected and left out alike)
        measured_here = {"accuracy": accuracy, "not_measured": (
            f"not measured with {spec['name']} (measured with {', '.join(others)} only)" if others else "not measured")}
        # a plugin that raises (importing it, in a hook) is left out with its one line; the others go on
        why = costmodel.why_not_modelled(name)
        try:
            what = costmodel.asking(name, "its About", about, name)
        except costmodel.PluginFailed as e:
            what, why = FAILED_ABOUT, why or str(e)
        if why:
            left_out.append({"method": name, "about": what, "why": why, **measured_here})
            continue
        try:
            # a one-process method (single, gas) runs on one device whatever P: its P=1 row in every table
            one_device = method_class(name).single_process
            mine, mine_left_out = [], []
            for variant, options in variants(name, costmodel.asking(name, "its Options", method_defaults, name)):
                projected, skipped = projection.project_setting(
                    {"method": name, "variant": variant, "model": spec["name"]}, options, model, stats,
                    [1] if one_device else workers, profile)
                mine += [{**r, "workers": p, "devices": r["workers"], "about": what, **measured_here,
                          "statistic_here": here[r["workers"]], "skew_here": skew[r["workers"]]}
                         for r in projected for p in (workers if one_device else [r["workers"]])]
                mine_left_out += [{"method": name, "about": what, "why": reason, "accuracy": []}
                                  for _, reason in skipped]
        except costmodel.PluginFailed as e:
            left_out.append({"method": name, "about": what, "why": str(e), **measured_here})
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
            "device_kind": profile.device, "dataset_overrides": recommend.dataset_overrides(stats),
            "regime": {"statistic": STATISTIC, "partitioner": partitioner, "by_workers": here, "skew": skew,
                       "partitioner_named": bool(stats.get("partitioner")),
                       "tolerance": REGIME_TOLERANCE, "not_checked": not_checked(stats)}}
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
    itself and where too few seeds paired. A row `nearest` found outside every measured regime:
    `not measured in this regime (measured: ...; here: ...)`, no figure."""
    if finding.get("not_in_regime"):
        return f"{recommend.NOT_IN_REGIME} ({finding['not_in_regime']})"
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
               + ", ".join(f"`{path}`" for path in cited_paths(result["measured"]))] if result.get("measured") else []),
            "- Each method at its default options (`python -m benchmarks --methods`). Projected: epoch time, peak "
            "memory per rank (the largest rank: training working set + graph, features, parameters) and training "
            "bytes per epoch over all ranks (the mean rank × P on extrapolated statistics), host memory per "
            "device where a method keeps its graph there. Measured at small scale: the accuracy effect, and the "
            "epochs to the findings' target accuracy (95 % of the best validation accuracy any run reached, on the "
            "findings' dataset and P; an epoch is the method's own: a pass over the training nodes, or one round of "
            "local steps for the local-round family), which `s to target` multiplies by the projected epoch time. "
            "Epochs at this graph's scale are not measured: read that column as a shape, not a forecast.",
            regime_line(result)]
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
    text += ["", "## Accuracy effect, as measured (each where it names; carried above only inside its regime)", "",
             md_table(["method", "kind", "measured regime", "accuracy effect"],
                      [[r["method"], r["about"]["kind"], "; ".join(map(regime_text, regimes(r["accuracy"]))),
                        "; ".join(map(effect, r["accuracy"])) or not_measured(r)]
                       for r in methods], aligned=True)]
    if result["left_out"]:
        text += ["", "## Not projected", "",
                 md_table(["method", "kind", "why", "accuracy effect (measured)"],
                          [[r["method"], r["about"]["kind"], r["why"],
                            "; ".join(map(effect, r.get("accuracy", []))) or not_measured(r)]
                           for r in result["left_out"]], aligned=True)]
    return "\n".join(text) + "\n"


def regime_line(result: dict) -> str:
    """How the page carries a measured effect to this graph: the statistic, this graph's at each P, what
    is not checked (once)."""
    regime = result["regime"]
    here = ", ".join(f"{'not known' if x is None else number(x)} at P={p}" for p, x in regime["by_workers"].items())
    parts, named = regime.get("partitioner"), regime.get("partitioner_named", True)
    skews = {p: x for p, x in (regime.get("skew") or {}).items() if x is not None and int(p) > 1}
    skew = ", ".join(f"{number(x)} at P={p}" for p, x in skews.items())
    return ("- Accuracy effects are carried to this graph only inside the regime they were measured in: "
            + (f"on {parts} parts, as this graph's statistics were partitioned" + ("" if named else
               " (its file names no partitioner: the suite's default)") + " (an effect measured on another "
               "partitioner's parts is not carried), " if parts else "")
            + f"at a P within the P measured, with this graph's {STATISTIC_NAME} (every rank's halo rows summed over "
            f"the graph's nodes, from its statistics file: {here}) within the measured range, "
            + (f"and so its {SKEW_NAME} (the mean total-variation distance of a part's training labels "
               f"from the global mix: {skew}) where the measured rows state one, " if skew else "")
            + f"{100 * regime['tolerance']:g} % wider at each edge. Elsewhere a cell says "
            f"\"{recommend.NOT_IN_REGIME}\" with both figures, and the method's accuracy is not known here (an exact "
            f"method's effect is 0 by construction in any regime). Not checked: {regime['not_checked']}.")


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
    `p` (`effect_at`: measured inside this graph's regime, named, or "not measured in this regime");
    epochs to the findings' target accuracy and what they cost at the projected epoch time; each row's
    place in the recommendation's order (`recommend.ranked`) or why it has none."""
    candidates, refused = recommend.ranked(result["rows"], p, result.get("tolerance"))
    place = {id(r): f"{i}" for i, r in enumerate(candidates, 1)} | {id(r): why for r, why in refused}

    def to_target_s(r):
        seconds = seconds_to_target(r)
        return number(seconds) if seconds is not None else ""
    return md_table(["#", "method", "devices", "epoch s", "epochs to target", "s to target", "peak GB/device",
                     "host GB/device", "GB/epoch", "kind", "accuracy effect", "where the time goes",
                     "to the target, among candidates"],
                    [[i, r.get("variant") or r["method"], r.get("devices", p), number(r["projected_epoch_s"]),
                      to_target(r)[1], to_target_s(r),
                      number(r["projected_peak_mem_bytes"] / GB), number(r.get("projected_host_mem_bytes", 0) / GB),
                      number(r["projected_bytes_per_epoch"] / GB), r["about"]["kind"], effect_at(r, p),
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
