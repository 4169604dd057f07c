"""`python -m analysis seeds <results_dir> [--cap N]`: the second stage of the two-stage seed plan
(docs/analysis.md, "The verdict"). The first stage is the preset's own seeds; from them each row of the
study's table has a paired SD, and `paired.verdict` says how many seeds its 95 % interval needs for a
half-width of `paired.HEADLINE_HALF_WIDTH_POINTS`. Each row that is neither resolved nor shown equivalent and
needs more seeds than it has gets one sweep command that runs the seeds it lacks, up to the cap (the sweep
adds each run's exact control, and keeps what exists); rows that cannot reach the target within the cap say so.
Run the commands, report again, and repeat while rows ask for more: the verdicts are read afresh each time,
with Holm over the whole page."""
from __future__ import annotations

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


def overrides(row: dict, default_partitioner: str | None) -> list[str]:
    """The overrides that select a row's runs: its method and the options its variant names (a saver,
    `memory.checkpoint=layer`, as it is; a method option as `method.<option>`), its dataset, model and worker
    count, and its partitioner where it is not the preset's."""
    name, *options = str(row["method"]).split()
    out = [f"method={name}", *(o if "." in o.split("=", 1)[0] else f"method.{o}" for o in options),
           f"dataset={row['dataset']}", f"model={row['model']}"]
    if int(row["workers"]) > 1:
        out.append(f"workers={int(row['workers'])}")
    if row.get("partitioner") and row["partitioner"] != default_partitioner:
        out.append(f"partitioner={row['partitioner']}")
    return out


def plan(recs: list[dict], cap: int = DEFAULT_CAP) -> list[str]:
    """The lines `seeds` prints: per row that needs more seeds, a comment with its verdict and the command
    that runs them (seeds numbered on from the largest any run of the row has)."""
    lines = []
    for study, table in studies_with_verdicts().items():
        mine = [r for r in recs if r["config"].get("study") == study]
        if not mine:
            continue
        t = table(mine)
        seeds = records.runs(mine)
        main = seeds[seeds["variant"] == "single"]["config"]
        default_partitioner = main.iloc[0].get("partitioner") if len(main) else None
        for row in t.to_dict("records"):
            v = row.get("verdict")
            if v is None or v.seeds_needed is None or v.seeds_needed <= v.n:
                continue
            runs = seeds[(seeds["variant"] == row["method"]) & (seeds["dataset"] == row["dataset"])
                         & (seeds["model"] == row["model"]) & (seeds["workers"] == row["workers"])]
            first = int(pd.Series(runs["seed"]).max()) + 1 if len(runs) else 0
            upto = min(v.seeds_needed, cap)
            label = f"{row.get('row', row['method'])} ({row['dataset']}, {row['model']}, P={int(row['workers'])})"
            if upto <= v.n:
                lines.append(f"# {label}: {v.text}; the cap ({cap}) is reached")
                continue
            more = list(range(first, first + upto - v.n))
            lines.append(f"# {label}: {v.text}; runs {len(more)} more (to {upto}"
                         + (f", the cap: it needs {v.seeds_needed}" if upto < v.seeds_needed else "") + ")")
            lines.append("python -m benchmarks.commands.sweep " + shlex.join(
                [f"experiment={study}", *overrides(row, default_partitioner), "seed=" + ",".join(map(str, more))]))
    return lines or ["# every row is resolved, shown equivalent, or has the seeds its target needs"]
