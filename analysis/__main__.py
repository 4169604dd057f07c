"""`python -m analysis report <results_dir> [--out DIR] [--target-acc X]`: write `report.md` and its
figures (PNG and PDF) from a folder of run records. `python -m analysis table <results_dir>`: print
the runs table only (one line per configuration, mean over seeds, failed runs marked)."""
from __future__ import annotations

import argparse
import sys

from analysis.records import NoRecords


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="write report.md and figures/ for a folder of records")
    r.add_argument("results_dir")
    r.add_argument("--out", default=None, help="where report.md and figures/ go (default: results_dir)")
    r.add_argument("--target-acc", type=float, default=None,
                   help="validation accuracy to time each run to (default: 95%% of the best reached)")
    t = sub.add_parser("table", help="print the runs table of a folder of records")
    t.add_argument("results_dir")
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
    j.add_argument("--hidden", type=int, default=None, help="project the records' models at this hidden width")
    j.add_argument("--out", default=None, help="where projection.md/.json and figures/ go (default: results_dir)")
    args = p.parse_args(argv)
    if args.command == "project":
        return _project(args)
    from analysis import records as rec  # pandas and matplotlib load only once the arguments are good
    from analysis.report import build, runs_table

    try:
        if args.command == "table":
            print(runs_table(rec.speedup(rec.aggregate(rec.runs(rec.load(args.results_dir))))))
            return
        path = build(args.results_dir, args.out, args.target_acc)
    except NoRecords as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"report: {path}")


def _project(args) -> None:
    from analysis import projection
    from analysis import records as rec
    from benchmarks.errors import UserError
    from benchmarks.tools.hardware import load_profile

    if args.published:
        out = args.out or "results/projection"
        print(f"projection of published rows: {projection.write_published(out)}")
        return
    if not (args.results_dir and args.hardware):
        print("error: project needs a records folder and --hardware (or --published)", file=sys.stderr)
        sys.exit(2)
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
        if any(w < 1 for w in workers) or (workers and not args.graph):
            raise ValueError
    except ValueError:
        print(f"error: --workers takes positive integers, with --graph (got {args.workers!r})", file=sys.stderr)
        sys.exit(2)
    try:
        profile = load_profile(args.hardware)
        stats = projection.load_stats(args.graph, workers) if args.graph else None
        rows, skipped = projection.project_records(rec.load(args.results_dir), profile, workers, stats, args.hidden)
    except (NoRecords, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    paths = projection.write(rows, skipped, profile.name, args.out or args.results_dir)
    print(f"projection: {paths[0]}")


if __name__ == "__main__":
    main()
