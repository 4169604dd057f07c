"""`python -m analysis report <results_dir> [--out DIR] [--target-acc X]`: write `report.md` and its
figures (PNG and PDF) from a folder of run records; `--publish docs/results/<study>.md` writes a
results page instead (the study's sections, the command, commit, machine and dates of its records).
`python -m analysis table <results_dir>`: print the runs table only (one line per configuration, mean
over seeds, failed runs marked).
`python -m analysis notebooks <results_dir> [--out DIR]`: run the notebooks of analysis/notebooks/ on a
folder of records (executed copies and their figures in `<results_dir>/notebooks/`).
`python -m analysis project ...`: the cost model's projection of a folder of records (docs/projection.md).
`python -m analysis seeds <results_dir> [--cap N]`: the two-stage seed plan's second stage, the sweep
commands that run each unresolved row to the seeds its half-width needs (analysis/seed_plan.py).
`python -m analysis advise --graph G --hardware H --workers 16,32,64 [--tolerance POINTS]`: which method
to run on a cluster, with no records: a recommendation and a runner-up with their commands, then every
method projected (docs/projection.md, "advise")."""
from __future__ import annotations

import argparse
import math
import sys

from analysis.records import MixedRates, NoRecords


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="write report.md and figures/ for a folder of records")
    r.add_argument("results_dir")
    r.add_argument("--out", default=None, help="where report.md and figures/ go (default: results_dir)")
    r.add_argument("--target-acc", type=float, default=None,
                   help="validation accuracy to time each run to (default: 95%% of the best reached)")
    r.add_argument("--publish", default=None, metavar="PAGE",
                   help="write a results page (e.g. docs/results/findings.md) with its figures beside it, "
                   "instead of report.md")
    t = sub.add_parser("table", help="print the runs table of a folder of records")
    t.add_argument("results_dir")
    n = sub.add_parser("notebooks", help="run the notebooks on a folder of records (into <results_dir>/notebooks)")
    n.add_argument("results_dir")
    n.add_argument("--out", default=None, help="where the executed notebooks and their figures/ go "
                   "(default: results_dir/notebooks)")
    s = sub.add_parser("seeds", help="print the sweep commands that run each unresolved row of a study to the "
                       "seeds its target half-width needs (the two-stage seed plan's second stage)")
    s.add_argument("results_dir")
    s.add_argument("--cap", default="30", help="the most seeds a row is run to (default 30)")
    j = sub.add_parser("project", help="project epoch time and memory per rank with the cost model")
    j.add_argument("results_dir", nargs="?", help="a folder of records (or --published)")
    j.add_argument("--hardware", help="a profile in conf/hardware/ (or a path to one)")
    j.add_argument("--published", action="store_true",
                   help="project the published rows of results/reference/projection.csv on their papers' "
                   "hardware profiles instead (partition statistics from the measured graph of nearest degree)")
    j.add_argument("--workers", default="", help="comma-separated worker counts to project to (needs --graph)")
    j.add_argument("--graph", default=None, help="partition statistics of the target graph "
                   "(data/partition_stats/*.json, from `python -m benchmarks.tools.partition_stats`), or "
                   "ogbn-products, ogbn-papers100M, reddit (a proxy from the measured graph of nearest degree)")
    j.add_argument("--hidden", default=None, help="project the records' models at this hidden width (needs --graph)")
    j.add_argument("--out", default=None, help="where projection.md/.json and figures/ go (default: results_dir)")
    a = sub.add_parser("advise", help="recommend a method for a cluster (fits, no resolved accuracy cost, fastest "
                       "to the target accuracy) and project every registered method (no records needed)")
    a.add_argument("--graph", help="the target graph, as for project: a partition-statistics file or "
                   "ogbn-products, ogbn-papers100M, reddit")
    a.add_argument("--hardware", help="a profile in conf/hardware/ (or a path to one)")
    a.add_argument("--workers", default="", help="comma-separated worker counts, e.g. 16,32,64")
    a.add_argument("--model", default="sage", help="sage, gcn or gat (default sage)")
    a.add_argument("--hidden", default="256", help="hidden width (default 256)")
    a.add_argument("--layers", default="3", help="layers (default 3)")
    a.add_argument("--tolerance", default=None, metavar="POINTS",
                   help="an accuracy cost, in points, you accept: a method whose measured cost is resolved is "
                   "recommended only where it costs at most this (default: never)")
    a.add_argument("--out", default=None, help="where advise.md/.json and figures/ go "
                   "(default: results/advise/<graph>-<hardware>-<model>)")
    # the measured accuracy effects and the projection's validation (tests point them elsewhere)
    a.add_argument("--findings", default=None, help=argparse.SUPPRESS)
    a.add_argument("--scaling", default=None, help=argparse.SUPPRESS)  # comma-separated: one table a graph
    a.add_argument("--validation", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from analysis import costmodel
    from benchmarks.base.errors import UserError
    costmodel.FAILED.clear()  # this command's plugin failures (in-process callers run many)
    try:
        checked = _check(args)
        if args.command == "project":
            _project(args, **checked)
            return _failed_plugins()
        if args.command == "advise":
            _advise(args, **checked)
            return _failed_plugins()
        from analysis import records as rec  # pandas and matplotlib load only once the arguments are good
        from analysis.report import build, runs_table
        if args.command == "seeds":
            from analysis.seed_plan import plan
            print("\n".join(plan(rec.load(args.results_dir), cap=checked["cap"])))
            return
        if args.command == "table":
            print(runs_table(rec.speedup(rec.aggregate(rec.runs(rec.load(args.results_dir))))))
            return
        from benchmarks.base.outputs import writing
        if args.command == "notebooks":
            from analysis import notebook_runner
            rec.load(args.results_dir)  # no records: the same one-line error as the report's, before a kernel starts
            with writing("the notebooks", checked["out"]):
                paths = notebook_runner.run(args.results_dir, checked["out"])
            print(f"notebooks: {', '.join(map(str, paths))}; figures in {checked['out'] / 'figures'}")
            return
        if args.publish:
            from analysis.report import publish
            with writing("the results page", args.publish):
                path = publish(args.results_dir, args.publish)
        else:
            with writing("the report", args.out or args.results_dir):
                path = build(args.results_dir, args.out, args.target_acc)
    except (NoRecords, MixedRates, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"{'page' if getattr(args, 'publish', None) else 'report'}: {path}")
    _failed_plugins()


def _failed_plugins() -> None:
    """Once the command has written what it could: each plugin that raised (`costmodel.FAILED`: its
    method left out, the others done) in one line on stderr, and exit status 1."""
    from analysis import costmodel
    if costmodel.FAILED:
        for line in costmodel.FAILED.values():
            print(f"error: {line}", file=sys.stderr)
        sys.exit(1)


def _whole(option: str, text: str, least: int = 1) -> int:
    from benchmarks.base.errors import UserError
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise UserError(f"{option} takes whole numbers of at least {least} (got {text!r})")
    return value


def _graph(graph: str, workers: list[int]) -> dict:
    """`--graph`'s partition statistics (`projection.load_stats`), refused when `workers` asks for
    more ranks than the graph has nodes (the runtime refuses them too)."""
    from analysis import projection
    from benchmarks.base.errors import UserError
    stats = projection.load_stats(graph, workers)
    nodes = stats["graph"]["nodes"]
    if max(workers, default=0) > nodes:
        raise UserError(f"--workers {max(workers)} exceeds the {nodes} nodes of {stats['graph']['name']}; "
                        f"use at most {nodes}")
    return stats


def _check(args) -> dict:
    """Every argument of `report`, `table`, `project` and `advise` checked before any work, in this
    one place (UserError, one line, status 2): numbers in range, options that need each other, the
    hardware profile and `--graph` readable, no more ranks than the graph has nodes, and the output
    folder writable (`benchmarks.base.outputs.check_writable`). Returns what `_project` or `_advise`
    needs, loaded."""
    from pathlib import Path

    from benchmarks.base.errors import UserError
    from benchmarks.base.outputs import check_writable
    if args.command == "advise":
        return _check_advise(args)
    if args.command == "seeds":
        return {"cap": _whole("--cap", args.cap, least=2)}
    if args.command == "notebooks":
        from analysis import notebook_runner
        if (why := notebook_runner.missing_kernel()):
            raise UserError(why)
        out = Path(args.out) if args.out else notebook_runner.default_out(args.results_dir)
        if args.out or Path(args.results_dir).is_dir():
            check_writable("--out", str(out))
        return {"out": out}
    if args.command != "project":
        if args.command == "report" and args.publish:
            if args.out or args.target_acc is not None:
                raise UserError("--publish writes a results page of its own; it takes neither --out nor --target-acc")
            if not args.publish.endswith(".md"):
                raise UserError(f"--publish takes the page's path, ending in .md (got {args.publish!r})")
            check_writable("--publish", str(Path(args.publish).parent))
            from analysis.report import page_in_the_way
            in_the_way = page_in_the_way(args.publish)  # never a folder publish did not make (the records)
            if in_the_way:
                raise UserError(in_the_way)
            return {}
        # without --out the report goes beside the records; a folder that is not there has no records (said later)
        if args.command == "report" and (args.out or Path(args.results_dir).is_dir()):
            check_writable("--out", args.out or args.results_dir)
        return {}
    if args.published:
        check_writable("--out", args.out or "results/projection")
        return {}
    if not (args.results_dir and args.hardware):
        raise UserError("project needs a records folder and --hardware (or --published)")
    workers = [int(w) if w.strip().isdigit() else -1 for w in args.workers.split(",") if w.strip()]
    if any(w < 1 for w in workers) or (workers and not args.graph):
        raise UserError(f"--workers takes positive integers, with --graph (got {args.workers!r})")
    hidden = _whole("--hidden", args.hidden) if args.hidden is not None else None
    if hidden is not None and not workers:
        raise UserError("--hidden sets the width of the projection to --workers on --graph; give those too")
    from benchmarks.tools.hardware import load_profile
    profile = load_profile(args.hardware)
    stats = _graph(args.graph, workers) if args.graph else None
    check_writable("--out", args.out or args.results_dir)
    return {"workers": workers, "hidden": hidden, "profile": profile, "stats": stats}


def _check_advise(args) -> dict:
    """`advise`'s arguments (for `_check`): the worker counts, width and depth whole numbers, a model
    the advice covers (GAT's heads dividing the width), the profile, `--graph` with statistics at
    every P asked for, the measured findings and validation readable, and `--out` writable."""
    from pathlib import Path

    from analysis import advise
    from benchmarks.base.errors import UserError, choose
    from benchmarks.base.outputs import check_writable
    from benchmarks.tools.hardware import load_profile
    if not (args.graph and args.hardware and args.workers):
        raise UserError("advise needs --graph, --hardware and --workers")
    workers = sorted({_whole("--workers", w) for w in args.workers.split(",")})
    hidden, layers = _whole("--hidden", args.hidden), _whole("--layers", args.layers)
    tolerance = _points("--tolerance", args.tolerance) if args.tolerance is not None else None
    choose("--model", args.model, advise.MODELS)
    profile = load_profile(args.hardware)
    stats = _graph(args.graph, sorted({1, *workers}))  # P=1: the one-device rows
    missing = [p for p in workers if str(p) not in stats["by_workers"]]
    if missing:
        raise UserError(f"--graph {args.graph} has no partition statistics for P={','.join(map(str, missing))} "
                        f"(it has P={','.join(sorted(stats['by_workers'], key=int))}); measure them with "
                        "`python -m benchmarks.tools.partition_stats`")
    g = stats["graph"]
    model = advise.model_of(args.model, g["features"], hidden, g["classes"], layers)
    scaling = [Path(path) for path in args.scaling.split(",")] if args.scaling else advise.scaling_tables()
    findings = advise.measured(args.findings or advise.FINDINGS, scaling)
    validation = advise.read_table(args.validation or advise.VALIDATION, advise.VALIDATION_COLUMNS, "--validation")
    out = args.out or f"results/advise/{Path(args.graph).stem}-{Path(args.hardware).stem}-{args.model}"
    check_writable("--out", out)
    measured = {"findings": advise.cited(args.findings or advise.FINDINGS),
                "scaling": [advise.cited(path) for path in scaling]}
    return {"workers": workers, "profile": profile, "stats": stats, "model": model, "findings": findings,
            "validation": validation, "out": out, "measured": measured, "tolerance": tolerance,
            "spec": {"name": args.model, "hidden": hidden, "layers": layers}}


def _points(option: str, text: str) -> float:
    from benchmarks.base.errors import UserError
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise UserError(f"{option} takes a number of accuracy points of at least 0 (got {text!r})")
    return value


def _advise(args, workers, profile, stats, model, findings, validation, out, spec, measured, tolerance) -> None:
    from analysis import advise
    from benchmarks.base.outputs import writing
    command = (f"python -m analysis advise --graph {args.graph} --hardware {args.hardware} "
               f"--workers {','.join(map(str, workers))} --model {spec['name']} --hidden {spec['hidden']} "
               f"--layers {spec['layers']}" + (f" --tolerance {tolerance:g}" if tolerance is not None else "")
               + f" --out {out}")
    result = advise.advise(stats, profile, workers, model, spec, findings, validation, measured, command, tolerance)
    with writing("the advice", out):
        paths = advise.write(result, out)
    print(paths[0].read_text(), end="")
    print(f"\nadvice: {', '.join(map(str, paths))}")


def _project(args, workers=(), hidden=None, profile=None, stats=None) -> None:
    from analysis import projection
    from analysis import records as rec
    from benchmarks.base.outputs import writing

    if args.published:
        out = args.out or "results/projection"
        with writing("the projection of published rows", out):
            print(f"projection of published rows: {projection.write_published(out)}")
        return
    records = rec.load(args.results_dir, projection.check_record)
    rows, skipped = projection.project_records(records, profile, workers, stats, hidden)
    out = args.out or args.results_dir
    with writing("the projection", out):
        paths = projection.write(rows, skipped, profile.name, out)
    print(f"projection: {paths[0]}")


if __name__ == "__main__":
    main()
