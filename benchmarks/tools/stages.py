"""Time and peak memory of every stage from a configuration to ranks ready to train, without training:
what decides whether a graph fits one machine before the first epoch (docs/measurement.md, "An
ogbn-products-sized graph on one machine").

    python -m benchmarks.tools.stages dataset=synthetic-products method=sar workers=4 [--stage ...]

Stages, in the order a run goes through them (`runner.prepare`, then each rank's `_rank_main` up to
the first epoch):

- `generate`: `datasets.load_dataset` (for `synthetic`: the draws, then `graph.from_edge_index`),
  then the graph's fingerprint (the partition cache's key);
- `partition`: `partition.prepare_parts` for `workers` parts (METIS in its child process, relabel,
  cut, write the cache; a valid cache is only checked), then what the launcher still holds once
  the graph is dropped, which it keeps while its ranks run. With one worker there is no cache:
  the whole graph's one part is cut in the launcher (`partition.build_parts`);
- `ranks`: `workers` processes, each loading its part (`partition.load_part`), building its context
  (`train.make_context`: adjacency, exchange plan, model, optimizer) and the method
  (`cfg.method_cls(ctx)`), as a run's ranks do before the first epoch. Needs the cache (run
  `partition` first). With one worker, the launcher's own process after `partition`.

Per stage: wall seconds and this process's peak RSS over the stage (VmHWM, reset at the stage's
start by writing 5 to /proc/self/clear_refs); for `partition`, the peak private memory of its child
processes (METIS), sampled every 0.2 s, and the sampled peak of the launcher's RSS plus that; for
`ranks`, each rank's VmHWM and peak PSS (from its start: the fork server's pages are shared) and
their sums. Results are printed and, with --json PATH, written as JSON. Ranks run on the CPU (gloo),
whatever `device` says.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

GIB = 1 << 30


def _private_bytes(pid: int) -> int:
    """Pages only `pid` maps (what a forked child added beyond what it shares with its parent)."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


class ChildSampler:
    """Samples the private memory of this process's children (the METIS child) and this process's
    RSS beside it, every `interval` seconds, keeping the peaks."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.children_peak, self.total_peak = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        from benchmarks.core.probes import rss_bytes

        me = psutil.Process()
        while not self._stop.wait(self.interval):
            try:
                children = sum(_private_bytes(c.pid) for c in me.children(recursive=True))
            except psutil.Error:
                continue
            self.children_peak = max(self.children_peak, children)
            if children:
                self.total_peak = max(self.total_peak, children + rss_bytes())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _stage(name: str, fn):
    """(fn's result, {seconds, peak_rss_bytes, rss_after_bytes}) with VmHWM reset at the start."""
    from benchmarks.core.probes import hwm_bytes, reset_hwm, rss_bytes

    gc.collect()
    reset_hwm()
    t0 = time.perf_counter()
    result = fn()
    out = {"stage": name, "seconds": time.perf_counter() - t0, "peak_rss_bytes": hwm_bytes(),
           "rss_after_bytes": rss_bytes()}
    return result, out


def generate(run) -> tuple[object, list[dict]]:
    from benchmarks.core.datasets import load_dataset

    graph, gen = _stage("generate", lambda: load_dataset(run.dataset_section, run.data_root))
    gen["graph"] = graph.summary()
    _, fp = _stage("fingerprint", graph.fingerprint)
    return graph, [gen, fp]


def partition(run, graph) -> tuple[object, dict]:
    """The launcher's preparation after loading (`runner.prepare`): the cache for P > 1, the whole
    graph's part for P = 1. Returns (the cache folder or the part, the stage's entry)."""
    import torch

    from benchmarks.core.partition import build_parts, prepare_parts
    from benchmarks.run.record import processes_of

    world = processes_of(run)
    with ChildSampler() as sampler:
        if world == 1:
            source, out = _stage("partition", lambda: build_parts(graph, torch.tensor([0, graph.num_nodes]))[0])
        else:
            source, out = _stage("partition", lambda: prepare_parts(graph, run.partitioner, world, run.seed,
                                                                    Path(run.cache_dir)))
            out["cache"] = str(source)
    out["children_peak_private_bytes"] = sampler.children_peak
    out["launcher_plus_children_peak_bytes"] = max(sampler.total_peak, out["peak_rss_bytes"])
    return source, out


def _rank(cfg_dict: dict, rank: int, world: int, folder: str, init_method: str, results) -> None:
    """One rank up to its first epoch, as `runner._rank_main` and `train.run_rank` do it."""
    import torch
    import torch.distributed as dist

    from benchmarks.run.config import check
    from benchmarks.core.partition import load_part
    from benchmarks.core.probes import MemoryProbe, fix_mmap_threshold, hwm_bytes, rss_bytes, shared_excess_bytes
    from benchmarks.run.runner import Plan
    from benchmarks.run.train import make_context

    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback (as `runner._rank_process`)
        run = check(cfg_dict)
        fix_mmap_threshold(run.malloc_mmap_threshold)
        torch.set_num_threads(Plan(run, {}).threads(world))
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        steps = {}
        t0 = time.perf_counter()
        part = load_part(folder, rank)
        steps["load_part_s"], steps["rss_after_load_bytes"] = time.perf_counter() - t0, rss_bytes()
        MemoryProbe(torch.device("cpu"))  # as run_rank: the probe exists before the context is built
        torch.manual_seed(run.seed)  # as run_rank: every draw of training is keyed (benchmarks/core/draws.py)
        t0 = time.perf_counter()
        ctx = make_context(run, rank, world, part, torch.device("cpu"), Path(folder))
        steps["make_context_s"], steps["rss_after_context_bytes"] = time.perf_counter() - t0, rss_bytes()
        t0 = time.perf_counter()
        method = run.method_cls(ctx)
        steps["method_init_s"], steps["rss_after_method_bytes"] = time.perf_counter() - t0, rss_bytes()
        excess = shared_excess_bytes()
        results.put({"rank": rank, **steps, "peak_rss_bytes": hwm_bytes(),
                     "peak_pss_bytes": None if excess is None else hwm_bytes() - excess,
                     "nodes": part.num_local, "halo_nodes": part.num_halo, "edges": part.indices.numel()})
        del method, ctx
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 (reported by the parent)
        results.put({"rank": rank, "error": f"{type(e).__name__}: {e}"})
        raise


def ranks(cfg_dict: dict, run, source) -> dict:
    """P > 1: `workers` processes forked from the runs' fork server (`rank_server`), each loading its
    part from the cache `source`."""
    import tempfile

    from benchmarks.run.record import processes_of

    world = processes_of(run)
    from benchmarks.run import rank_server

    ctx = rank_server.context()
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="stages-", dir=Path(run.cache_dir)) as scratch:
        init = f"file://{Path(scratch).resolve() / 'store'}"
        t0 = time.perf_counter()
        procs = [ctx.Process(target=_rank, args=(cfg_dict, r, world, str(source), init, results)) for r in range(world)]
        for p in procs:
            p.start()
        per_rank = [results.get() for _ in procs]
        for p in procs:
            p.join()
    per_rank.sort(key=lambda r: r["rank"])
    errors = [r["error"] for r in per_rank if "error" in r]
    if errors:
        raise RuntimeError(f"a rank failed: {errors[0]}")
    pss = [r["peak_pss_bytes"] for r in per_rank]
    return {"stage": "ranks", "seconds": time.perf_counter() - t0, "per_rank": per_rank,
            "peak_rss_bytes_sum": sum(r["peak_rss_bytes"] for r in per_rank),
            "peak_pss_bytes_sum": None if None in pss else sum(pss)}


def one_rank(run, part) -> dict:
    """P = 1: the launcher's own process goes on with the part it cut (`runner.run`)."""
    import torch

    from benchmarks.core.probes import fix_mmap_threshold
    from benchmarks.run.train import make_context

    fix_mmap_threshold(run.malloc_mmap_threshold)

    def build():
        ctx = make_context(run, 0, 1, part, torch.device("cpu"))
        return run.method_cls(ctx)

    method, out = _stage("ranks", build)
    del method
    return out


def _fmt(entry: dict) -> str:
    if "per_rank" in entry:
        lines = [f"ranks: {entry['seconds']:.1f} s; sum over ranks of peak RSS {entry['peak_rss_bytes_sum'] / GIB:.2f} "
                 f"GiB, of peak PSS {(entry['peak_pss_bytes_sum'] or 0) / GIB:.2f} GiB"]
        for r in entry["per_rank"]:
            lines.append(f"  rank {r['rank']}: {r['nodes']} nodes, {r['halo_nodes']} halo, {r['edges']} in-edges; "
                         f"load {r['load_part_s']:.1f} s, context {r['make_context_s']:.1f} s, method "
                         f"{r['method_init_s']:.1f} s; peak RSS {r['peak_rss_bytes'] / GIB:.2f} GiB (PSS "
                         f"{(r['peak_pss_bytes'] or 0) / GIB:.2f}), RSS after load/context/method "
                         f"{r['rss_after_load_bytes'] / GIB:.2f}/{r['rss_after_context_bytes'] / GIB:.2f}/"
                         f"{r['rss_after_method_bytes'] / GIB:.2f} GiB")
        return "\n".join(lines)
    line = (f"{entry['stage']}: {entry['seconds']:.1f} s, peak RSS {entry['peak_rss_bytes'] / GIB:.2f} GiB, "
            f"RSS after {entry['rss_after_bytes'] / GIB:.2f} GiB")
    if "children_peak_private_bytes" in entry:
        line += (f"; children (METIS) peak private {entry['children_peak_private_bytes'] / GIB:.2f} GiB, launcher + "
                 f"children peak {entry['launcher_plus_children_peak_bytes'] / GIB:.2f} GiB (sampled)")
    if "launcher_holds_bytes" in entry:
        line += f"; launcher RSS once the graph is dropped {entry['launcher_holds_bytes'] / GIB:.2f} GiB"
    return line


STAGES = ("generate", "partition", "ranks")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides: dataset=... method=... workers=...")
    parser.add_argument("--stage", choices=("all", *STAGES), default="all",
                        help="the last stage to run (each needs the ones before it; default: all)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    from benchmarks.commands.composition import check_composes, config_of
    from benchmarks.run.config import check
    from benchmarks.base.errors import UserError
    from benchmarks.core.probes import rss_bytes
    from benchmarks.run.record import processes_of
    from benchmarks.base.registry import check_overrides

    try:
        check_overrides(args.overrides)
        check_composes(args.overrides)
        cfg = config_of(args.overrides)
        run = check(cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    import torch

    torch.set_num_threads(run.threads_per_rank or len(os.sched_getaffinity(0)))
    last = STAGES.index(args.stage) if args.stage != "all" else len(STAGES) - 1
    entries = []

    def report(entry):
        entries.append(entry)
        print(_fmt(entry), flush=True)

    graph, gen = generate(run)
    for e in gen:
        report(e)
    if last >= 1:
        source, part = partition(run, graph)
        # The launcher drops the graph once the cache is ready (`runner.prepare`); with one rank it
        # keeps the part it cut and trains on it itself.
        del graph
        gc.collect()
        part["launcher_holds_bytes"] = rss_bytes()
        report(part)
        if last >= 2:
            report(one_rank(run, source) if processes_of(run) == 1 else ranks(cfg, run, source))
    if args.json:
        Path(args.json).write_text(json.dumps({"overrides": args.overrides, "stages": entries}, indent=1))


if __name__ == "__main__":
    main()
