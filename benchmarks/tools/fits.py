"""`python -m benchmarks.tools.fits <overrides> --workers 1,2,4,8 --variant "method=sar" --variant ...`:
what the pre-flight memory check (analysis/preflight.py) says of each variant at each worker count, as
one table, without running any of them.

The graph is loaded once and each worker count's partition prepared once (from the cache where it
exists: `python -m benchmarks ... --check-memory` would load the graph again for every run, 1-2 minutes
each at ogbn-products' size). Each cell is the check's own figures: the projected peak of the largest
rank process, with the margin, against this machine's memory shared by the ranks, less what a
launcher holds while its ranks run (`LAUNCHER_BYTES`; this process holds the graph, so its own
memory is not the launcher's). `single` runs on one rank whatever `workers` says: it is checked at 1.

Example (issue 26's table):
  python -m benchmarks.tools.fits dataset=synthetic-products model=sage hidden=256 layers=3 \\
      --workers 1,2,4,8 --variant method=single --variant method=full_halo \\
      --variant "method=full_halo kernel=messages" --variant method=sar
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

#: What a launcher and its fork server hold while the ranks run (PSS): 0.35-0.73 GiB measured at
#: ogbn-products' size (docs/measurement.md, "An ogbn-products-sized graph on one machine"); the
#: check of `sar workers=4` there counted 542 MiB.
LAUNCHER_BYTES = 542 * 2 ** 20


def main(argv=None) -> None:
    from analysis import preflight
    from benchmarks.commands.composition import config_of
    from benchmarks.core.datasets import load_dataset
    from benchmarks.base.errors import UserError
    from benchmarks.core.partition import load_manifest, prepare_parts
    from benchmarks.run.record import processes_of
    from benchmarks.run.runner import plan

    ap = argparse.ArgumentParser(prog="python -m benchmarks.tools.fits", description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="key=value overrides every variant shares")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--variant", action="append", default=[], help="overrides of one row, e.g. 'method=sar'")
    a = ap.parse_args(argv)
    try:
        workers = [int(w) for w in a.workers.split(",")]
    except ValueError:
        raise SystemExit(f"error: --workers must be whole numbers separated by commas (got {a.workers!r})")
    variants = [shlex.split(v) for v in a.variant] or [[]]
    base = plan(config_of(a.overrides)).cfg
    graph = load_dataset(base.dataset_section, base.data_root)
    memory = preflight.machine_memory()
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; machine memory {preflight.size(memory)}; "
          f"margin {preflight.MARGIN * 100:.0f} %; a launcher holds {preflight.size(LAUNCHER_BYTES)}")
    infos = {}
    for w in workers:
        if w == 1:
            infos[w] = {"graph": graph.summary(), "partition": {"nodes_per_rank": [graph.num_nodes],
                                                               "edges_per_rank": [graph.num_edges],
                                                               "halo_nodes_per_rank": [0]}}
        else:
            folder = prepare_parts(graph, base.partitioner, w, base.seed, Path(base.cache_dir), log=print)
            manifest = load_manifest(folder)
            infos[w] = {"graph": manifest["graph"], "partition": manifest["stats"]}
    del graph
    print(f"\n| variant | {' | '.join(f'{w} worker' + ('s' if w > 1 else '') for w in workers)} |")
    print("|---|" + "---|" * len(workers))
    for variant in variants:
        cells = []
        for w in workers:
            try:
                run = plan(config_of([*a.overrides, *variant, f"workers={w}"])).cfg
            except UserError as e:
                cells.append(f"refused: {e}")
                continue
            world = processes_of(run)
            if world != w:
                cells.append(f"(runs on {world})")
                continue
            launcher = "in-process" if world == 1 else "spawn"
            peak = preflight.projected_peak(run, infos[w], launcher)
            if isinstance(peak, str):
                cells.append(f"not checked: {peak}")
                continue
            need, have = preflight.shares(peak, memory, 0 if world == 1 else LAUNCHER_BYTES, world)
            cells.append(f"{'fits' if need <= have else 'no'}: {preflight.size(need)} of {preflight.size(have)}")
        print(f"| {' '.join(variant)} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
