"""A run's outcome as the command line reports it: run a composed configuration, print where its
record went and a one-line summary, and exit with the status `python -m benchmarks` exits with. The
command line (benchmarks/commands/cli.py) and a sweep's forked runs (benchmarks/commands/sweep.py) both report here."""
from __future__ import annotations

import sys

from benchmarks.base.errors import MemoryChecked, Stopped, UserError


def summary_line(record: dict) -> str:
    head = f"{record['method']} {record['dataset']} {record['model']} workers={record['workers']}"
    if record["status"] != "ok":
        return f"{head}: FAILED: {record['error']}"
    s = record["summary"]
    gib = 1024 ** 3
    if s["best_val_acc"] is None:
        acc = "no evaluation"
    elif s.get("selected_epoch", s["best_epoch"]) != s["best_epoch"]:  # a stopping rule chose another model
        acc = (f"stopped at epoch {record['history'][-1]['epoch'] + 1}, model of epoch {s['selected_epoch'] + 1}: "
               f"val {s['val_acc_selected']:.4f}, test {s['test_acc_selected']:.4f}")
    else:
        acc = f"best val {s['best_val_acc']:.4f}, test {s['test_acc_at_best_val']:.4f}"
    return (f"{head}: epoch {s['epoch_time_s_median']:.4f} s (median), {acc}, "
            f"peak RSS {s['peak_rss_bytes_max'] / gib:.2f} GiB/rank "
            f"(train +{s['train_mem_delta_bytes_max'] / gib:.3f}), "
            f"comm {s['comm_bytes_per_epoch'] / 1e6:.2f} MB/epoch")


def run_and_report(config: dict, preflight=None) -> None:
    """Run a composed configuration and print where its record went and its summary line; exits 2 on
    bad input, 1 on a failed run, 128 + signal on a stop (what `python -m benchmarks` exits with; a
    sweep's forked run calls this too). `preflight`: the pre-flight memory check, as `runner.run`
    takes it (the entry point's, handed down: the runtime does not import analysis/)."""
    from benchmarks.run.runner import run

    try:
        path, record = run(config, log=lambda m: print(m, file=sys.stderr), preflight=preflight)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except MemoryChecked as e:  # --check-memory: the answer, nothing run
        print(e, flush=True)
        sys.exit(0 if e.fits else 2)
    except Stopped as e:  # a stop ends a multirun too
        where = f"record {e.record} (failed)" if e.record else "no record (stopped before training)"
        print(f"{e}: {where}", file=sys.stderr)
        sys.exit(128 + e.signum)
    if record:  # torchrun ranks other than 0 have nothing to report
        print(f"record: {path}")
        print(summary_line(record), flush=True)
        if record["status"] != "ok":
            sys.exit(1)
