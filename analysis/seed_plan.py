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


def plan(recs: list[dict], cap: int = DEFAULT_CAP) -> list[str]:
    """The lines `seeds` prints: per row that needs more seeds, a comment with its verdict and the command
    that runs them (seeds numbered on from the largest any run of the row has). A row with fewer than 2 pairs
    is run to the first stage's seeds (the most any row of the page has); a row measured against `single`
    rather than a control of its own runs `single` on the new seeds too (a sweep adds controls, not `single`).
    The scaling study's rows between partitioners (`scaling.between_partitioners`) are planned the same way:
    each runs its seeds on both partitioners, numbered on from the largest either side has, so that the
    seeds pair across them."""
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

        def runs_of(row: dict, partitioners) -> pd.DataFrame:
            return seeds[(seeds["variant"] == row["method"]) & (seeds["dataset"] == row["dataset"])
                         & (seeds["model"] == row["model"]) & (seeds["workers"] == row["workers"])
                         & (seeds["partitioner"].isin(partitioners) if "partitioner" in row else True)]

        for row in t.to_dict("records"):
            v = row.get("verdict")
            if v is None:
                continue
            needed = _needed(v, first_stage)
            if needed is None:
                continue
            runs = runs_of(row, [row.get("partitioner")])
            label = f"{row.get('row', row['method'])} ({row['dataset']}, {row['model']}, P={int(row['workers'])})"
            chosen = overrides(row, default_partitioner, runs["config"].iloc[0] if len(runs) else {})
            if row.get("reference") == "single" and " " not in str(row["method"]):
                chosen[0] += ",single"  # `single` is this row's reference, not a control the sweep adds
            lines += _lines(label, v, needed, _first_new_seed(runs), cap, study, chosen)
        between = scaling.between_partitioners(t) if study == "scaling" else pd.DataFrame()
        for row in between.to_dict("records"):
            v = row["verdict"]
            needed = _needed(v, first_stage)
            if needed is None:
                continue
            both = [scaling.BASELINE_PARTITIONER, row["partitioner"]]
            runs = runs_of(row, both)
            label = (f"{row['method']} ({row['dataset']}, {row['model']}, P={int(row['workers'])}), "
                     f"{row['partitioner']} against {both[0]} parts")
            # the partitioner named as an axis over both sides: `partitioner=metis,random`
            chosen = overrides({**row, "partitioner": ",".join(both)}, None,
                               runs["config"].iloc[0] if len(runs) else {})
            lines += _lines(label, v, needed, _first_new_seed(runs), cap, study, chosen)
    return lines or ["# every row is resolved, shown equivalent, or has the seeds its target needs"]
