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
    args = p.parse_args(argv)
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


if __name__ == "__main__":
    main()
