"""Where one run's wall time goes, at several worker counts measured in one command: the cost of a
run in a warm sweep (the fork server up, torch imported), phase by phase, from the ranks' own
`timeline` probe (docs/records.md) and the record's setup and communication probes.

    python -m benchmarks.tools.run_cost dataset=cora method=full_halo epochs=50 --workers 2,8,16,32 [--json PATH]

Each P is one real run (`runner.run`, the spawned launcher, `resume=false`, records in a temporary
folder). Phases, on the critical path (each ends when the LAST rank reaches its moment):

- load dataset, partition cache: the launcher's preparation (`setup.load_time_s`, `.prepare_parts_s`):
  the cache is built before the timed run (a grid builds it once per P and seed, and every method
  reuses it), so the run only validates it; the build's seconds are shown apart;
- launch: the rest of the launcher's work before its ranks are spawned (record builder, environment);
- start: from spawning to the last rank entering `_rank_main` (fork from the server, unpickling);
- rendezvous: the last rank entering to the process group being up everywhere;
- agree: the ranks' configuration check (`_check_ranks_agree`, one all_gather_object);
- load part: reading the rank's part from the cache;
- context: adjacency, exchange plan, model, optimizer and the method;
- train loop: the epochs, split into evaluation (the slowest rank's), the timed epochs' collectives
  (training categories' blocked seconds, mean over ranks), the timed epochs' rest (compute; the
  record's `train_time_s` less those collectives) and the loop's remainder (probe reductions,
  progress lines, untimed `between_epochs`);
- finish: the last rank done training to `runner.run` returning (probes gathered, record written,
  barrier, teardown, processes joined).

On a machine with fewer cores than ranks every phase is time-sliced: read the shares within one
command's run, not the seconds as the cost of a rank.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

#: Communication categories outside the timed epochs (docs/measurement.md).
UNTIMED = ("eval", "probe", "setup")
PHASES = ("load dataset", "partition cache", "launch", "start", "rendezvous", "agree", "load part", "context",
          "evaluation", "epochs: collectives", "epochs: compute", "loop: rest", "finish")


def phases(record: dict, began: float, ended: float) -> dict[str, float]:
    """Seconds per phase (`PHASES`) of a spawned run that `runner.run` ran from `began` to `ended`
    (wall clock), from its record."""
    ranks = record["summary"]["per_rank"]
    lines = [r["timeline"] for r in ranks]

    def last(moment: str) -> float:
        return max(t[moment] for t in lines)

    setup = record["setup"]
    spawned, prepared = lines[0]["spawned"], began + setup["setup_time_s"]
    collectives = sum(sum(s for c, s in r["comm_blocked_s_by_category"].items() if c not in UNTIMED)
                      for r in ranks) / len(ranks)
    epochs = record["summary"]["train_time_s"]
    evaluation = max(t["eval_s"] for t in lines)
    loop = last("trained") - last("ready")
    return {"load dataset": setup["load_time_s"], "partition cache": setup["setup_time_s"] - setup["load_time_s"],
            "launch": spawned - prepared, "start": last("entered") - spawned,
            "rendezvous": last("group_up") - last("entered"), "agree": last("agreed") - last("group_up"),
            "load part": last("part_loaded") - last("agreed"), "context": last("ready") - last("part_loaded"),
            "evaluation": evaluation, "epochs: collectives": collectives,
            "epochs: compute": epochs - collectives, "loop: rest": loop - epochs - evaluation,
            "finish": ended - last("trained")}


def measure(overrides: list[str], workers: list[int], log=print) -> dict:
    """One run per P of `workers` (the overrides plus `workers=P`), each timed and split by `phases`."""
    from benchmarks.commands.composition import config_of
    from benchmarks.run import rank_server, runner
    from benchmarks.run.config import check

    t0 = time.perf_counter()
    rank_server.serve()
    out = {"overrides": overrides, "fork_server_start_s": time.perf_counter() - t0, "by_workers": {}}
    with tempfile.TemporaryDirectory(prefix="run-cost-") as scratch:
        for P in workers:
            cfg = config_of([*overrides, f"workers={P}", "resume=false", f"results_dir={scratch}/results"])
            t0 = time.perf_counter()
            runner.prepare(check(cfg), P, log=lambda m: None)  # the partition cache, built (or found) untimed
            cache_s = time.perf_counter() - t0
            began = time.time()
            _, record = runner.run(cfg, log=lambda m: None)
            ended = time.time()
            if record["status"] != "ok":
                raise RuntimeError(f"the run at P={P} failed: {record.get('error')}")
            split = phases(record, began, ended)
            out["by_workers"][str(P)] = {"wall_s": ended - began, "phases_s": split, "cache_before_s": cache_s,
                                         "epochs": len(record["history"])}
            log(f"P={P}: {ended - began:.1f} s")
    return out


def table(result: dict) -> str:
    ps = list(result["by_workers"])
    rows = [f"{'phase':<22}" + "".join(f"{'P=' + P:>16}" for P in ps)]
    for phase in PHASES:
        cells = []
        for P in ps:
            entry = result["by_workers"][P]
            s = entry["phases_s"][phase]
            cells.append(f"{s:>8.2f} s {s / entry['wall_s']:>5.0%}")
        rows.append(f"{phase:<22}" + "".join(f"{c:>16}" for c in cells))
    rows.append(f"{'wall (runner.run)':<22}" + "".join(f"{result['by_workers'][P]['wall_s']:>8.2f} s {'':>5}"
                                                       for P in ps))
    rows.append(f"{'cache before (untimed)':<22}" + "".join(
        f"{result['by_workers'][P]['cache_before_s']:>8.2f} s {'':>5}" for P in ps))
    first = result["by_workers"][ps[0]]["wall_s"]
    rows.append(f"{'wall / wall at P=' + ps[0]:<22}" + "".join(f"{result['by_workers'][P]['wall_s'] / first:>14.2f}x "
                                                               for P in ps))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.run_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides: dataset=cora method=full_halo epochs=50")
    parser.add_argument("--workers", required=True, help="worker counts, e.g. 2,8,16,32")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    from benchmarks.base.errors import UserError
    from benchmarks.base.registry import check_overrides
    from benchmarks.commands.composition import check_composes, config_of
    from benchmarks.run.config import check

    try:
        try:
            workers = [int(w) for w in args.workers.split(",") if w.strip()]
        except ValueError:
            raise UserError(f"--workers must be a comma list of integers (got {args.workers!r})") from None
        if not workers or min(workers) < 2:
            raise UserError(f"--workers takes worker counts of at least 2, the spawned launcher's (got {workers})")
        if any(o.split("=")[0].lstrip("+~") in ("workers", "resume", "results_dir") for o in args.overrides):
            raise UserError("workers, resume and results_dir are the tool's own (--workers; a temporary folder)")
        check_overrides(args.overrides)
        check_composes(args.overrides)
        for P in workers:
            check(config_of([*args.overrides, f"workers={P}"]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    result = measure(args.overrides, workers, log=lambda m: print(m, file=sys.stderr))
    result["load_average"] = os.getloadavg()
    print(f"{' '.join(args.overrides)}: one run per P, phases on the critical path, seconds and share of its wall")
    print(table(result))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in result['load_average'])} on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
