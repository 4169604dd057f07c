"""`python -m analysis seeds <results_dir> [--cap N]`: the second stage of the two-stage seed plan
(docs/analysis.md, "The verdict"). The first stage is the preset's own seeds; from them each row of the
study's table has a paired SD, and `paired.verdict` says how many seeds its 95 % interval needs for a
half-width of `paired.HEADLINE_HALF_WIDTH_POINTS`. Each row that is neither resolved nor shown equivalent and
needs more seeds than it has gets one sweep command that runs the seeds it lacks, up to the cap (the sweep
adds each run's exact control, and keeps what exists); rows that cannot reach the target within the cap say so.
Run the commands, report again, and repeat while rows ask for more: the verdicts are read afresh each time,
with Holm over the whole page."""
from __future__ import annotations

import re
import shlex

import pandas as pd

from analysis import records

#: The most seeds the plan runs a row to unless `--cap` says otherwise: about 2 h of this machine for a
#: local-rounds row and its control (experiment=findings), and the half-width at the measured median SD
#: (1.29 pt) comes to +-0.5 pt at 29.
DEFAULT_CAP = 30


def studies_with_verdicts() -> dict:
    """The studies whose table gives each row a `paired.verdict` (`table(records)` with the columns `verdict`,
    `method`, `partitioner`, `dataset`, `model`, `workers`), by study name (= the preset)."""
    from analysis.studies import findings, scaling

    return {"findings": findings.table, "scaling": scaling.table}


def _value(value) -> str:
    """A configuration value as an override writes it: `[15,10,5]`, `true`, `null`."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def overrides(row: dict, default_partitioner: str | None, config: dict) -> list[str]:
    """The overrides that select a row's runs: its method and each option its variant names, with the value a
    run of the row states (`config`: a method option as `method.<option>`; a top-level saver or axis,
    `kernel=messages`, and a section's, `memory.checkpoint=layer`, as they are), its dataset, model and worker
    count, and its partitioner where it is not the preset's."""
    name, _, options = str(row["method"]).partition(" ")
    out = [f"method={name}"]
    for key in re.findall(r"(?:^|\s)([\w.]+)=", options):
        if "." in key:
            node = config
            for part in key.split("."):
                node = (node or {}).get(part)
            out.append(f"{key}={_value(node)}")
        elif key in (config.get("method") or {}):
            out.append(f"method.{key}={_value(config['method'][key])}")
        else:
            out.append(f"{key}={_value(config.get(key))}")
    out += [f"dataset={row['dataset']}", f"model={row['model']}"]
    if int(row["workers"]) > 1:
        out.append(f"workers={int(row['workers'])}")
    if row.get("partitioner") and row["partitioner"] != default_partitioner:
        out.append(f"partitioner={row['partitioner']}")
    return out


def _lines(label: str, v, needed: int, first: int, cap: int, study: str, chosen: list[str]) -> list[str]:
    """A row's comment and, unless its cap is reached, the sweep that runs seeds `first`, ... up to
    min(`needed`, `cap`) pairs in all."""
    upto = min(needed, cap)
    if upto <= v.n:
        return [f"# {label}: {v.text}; the cap ({cap}) is reached"]
    more = list(range(first, first + upto - v.n))
    # `sweep.variants=[[]]`: the row's runs alone, not the preset's other variants of the same method
    return [f"# {label}: {v.text}; runs {len(more)} more (to {upto}"
            + (f", the cap: it needs {needed}" if upto < needed else "") + ")",
            "python -m benchmarks.commands.sweep " + shlex.join(
                [f"experiment={study}", *chosen, "sweep.variants=[[]]", "seed=" + ",".join(map(str, more))])]


def _needed(v, first_stage: int) -> int | None:
    """The seeds a row's verdict `v` asks for (a row of fewer than 2 pairs: the first stage's), None where it
    has them already."""
    needed = v.seeds_needed if v.n >= 2 else max(first_stage, 2)
    return None if needed is None or needed <= v.n else needed

def _first_new_seed(runs: pd.DataFrame) -> int:
    return int(pd.Series(runs["seed"]).max()) + 1 if len(runs) else 0


def _rates(runs: pd.DataFrame, study: str) -> list[str]:
    """`sweep.lr_by_family={...}` where the rates `runs` trained at (their sweep's mapping) are not what
    experiment=<study> gives: a preset of another graph (experiment=scaling_cora_full) chose its own, and the
    plan's sweep, on experiment=<study>, would train the new seeds at the study preset's."""
    from benchmarks.commands.composition import config_of

    theirs = (runs["config"].iloc[0].get("sweep") or {}).get("lr_by_family") if len(runs) else None
    if not theirs or theirs == (config_of([f"experiment={study}"]).get("sweep") or {}).get("lr_by_family"):
        return []
    return ["sweep.lr_by_family={" + ",".join(f"{family}:{lr:g}" for family, lr in sorted(theirs.items())) + "}"]


def _one_sweep(sides: list[list[str]]) -> list[list[str]]:
    """Two sides' overrides as one sweep where they differ in one override only (`partitioner=metis,random`),
    else each its own (another graph's rates: `dataset=cora` and `dataset=cora-full` each with its preset's)."""
    a, b = sides
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b) or len(differ) != 1 or a[differ[0]].split("=")[0] != b[differ[0]].split("=")[0]:
        return sides
    i = differ[0]
    return [[*a[:i], a[i] + "," + b[i].split("=", 1)[1], *a[i + 1:]]]


def plan(recs: list[dict], cap: int = DEFAULT_CAP) -> list[str]:
    """The lines `seeds` prints: per row that needs more seeds, a comment with its verdict and the command
    that runs them (seeds numbered on from the largest any run of the row has). A row with fewer than 2 pairs
    is run to the first stage's seeds (the most any row of the page has); a row measured against `single`
    rather than a control of its own runs `single` on the new seeds too (a sweep adds controls, not `single`);
    a row whose runs trained at rates another preset chose says so (`_rates`).
    The scaling study's rows between partitioners and between splits (`scaling.between`) are planned the same
    way: each runs its seeds on both sides, numbered on from the largest either side has, so that the seeds
    pair across them (one sweep where the sides differ in one override, `partitioner=metis,random`)."""
    from analysis.studies import scaling

    lines = []
    for study, table in studies_with_verdicts().items():
        mine = [r for r in recs if r["config"].get("study") == study]
        if not mine:
            continue
        t = table(mine)
        seeds = records.runs(mine)
        seeds["partitioner"] = seeds["config"].map(lambda c: c.get("partitioner"))
        main = seeds[seeds["variant"] == "single"]["config"]
        default_partitioner = main.iloc[0].get("partitioner") if len(main) else None
        first_stage = max((v.n for v in t["verdict"] if v is not None), default=0)

        def runs_of(row: dict, dataset: str, partitioners) -> pd.DataFrame:
            return seeds[(seeds["variant"] == row["method"]) & (seeds["dataset"] == dataset)
                         & (seeds["model"] == row["model"]) & (seeds["workers"] == row["workers"])
                         & (seeds["partitioner"].isin(partitioners) if "partitioner" in row else True)]

        for row in t.to_dict("records"):
            v = row.get("verdict")
            if v is None:
                continue
            needed = _needed(v, first_stage)
            if needed is None:
                continue
            runs = runs_of(row, row["dataset"], [row.get("partitioner")])
            label = f"{row.get('row', row['method'])} ({row['dataset']}, {row['model']}, P={int(row['workers'])})"
            chosen = overrides(row, default_partitioner, runs["config"].iloc[0] if len(runs) else {})
            if row.get("reference") == "single" and " " not in str(row["method"]):
                chosen[0] += ",single"  # `single` is this row's reference, not a control the sweep adds
            lines += _lines(label, v, needed, _first_new_seed(runs), cap, study, chosen + _rates(runs, study))
        for axis in (scaling.BASELINES if study == "scaling" else {}):
            for row in scaling.between(t, axis).to_dict("records"):
                v = row["verdict"]
                needed = _needed(v, first_stage)
                if needed is None:
                    continue
                both = [(row["baseline_dataset"], row["baseline_partitioner"]), (row["dataset"], row["partitioner"])]
                runs = [runs_of(row, dataset, [partitioner]) for dataset, partitioner in both]
                label = (f"{row['method']} ({row['dataset']}, {row['model']}, P={int(row['workers'])}), "
                         + (f"{row['other']} against {row['baseline']} parts" if axis == "partitioner" else
                            f"the {row['other']} split against the {row['baseline']}"))
                # each side's overrides, the partitioner named on both (`partitioner=metis,random`)
                sides = [overrides({**row, "dataset": dataset, "partitioner": partitioner}, None,
                                   side["config"].iloc[0] if len(side) else {}) + _rates(side, study)
                         for (dataset, partitioner), side in zip(both, runs)]
                first = _first_new_seed(pd.concat(runs))
                for i, chosen in enumerate(_one_sweep(sides)):  # the row's comment once, above its first sweep
                    lines += _lines(label, v, needed, first, cap, study, chosen)[1 if i else 0:]
    return lines or ["# every row is resolved, shown equivalent, or has the seeds its target needs"]
