"""The pre-flight memory check (docs/measurement.md, "Pre-flight memory check"): once the partition is
prepared and before any rank starts, the cost model's projected peak of the run's largest rank
process (`costmodel.process_peak`, plus `MARGIN`) is held against the memory this machine gives each
rank. A run that would not fit is refused in one line naming both figures (a `UserError`; the
launcher records it as a failed run), unless `force=true`; a run the model leaves out
(`projection.outside_model`) is not checked, and says so in one line.

`python -m benchmarks` hands `check` to the launcher (benchmarks/__main__.py, the one module above
both the runtime and analysis: `cli.main(preflight=check)` -> `runner.run(cfg, preflight=check)`), so
the runtime imports nothing from analysis. A run started otherwise (`runner.run` in tests and tools)
is not checked."""
from __future__ import annotations

import os
from pathlib import Path

#: The projected peak is raised by this share before it is compared: the largest under-projection
#: of the peak's validation, rounded up (docs/measurement.md, "Pre-flight memory check": the 43 runs
#: of `experiment=peak_validate` on this machine, `python -m analysis project results/peak --hardware
#: this-machine`; median |error| 9 %, the largest measured peak 1.48 times its projection: PipeGCN,
#: whose working set the cost model under-projects; 1.21 times without it).
MARGIN = 0.50
#: The machine's memory in bytes, instead of what /proc and the cgroup say: for tests, and for a
#: user who wants to see what the check would say on a smaller machine.
MEMORY_ENV = "GNNBENCH_MEMORY_BYTES"
GiB, MiB = 2 ** 30, 2 ** 20


def machine_memory() -> int:
    """The memory this machine has: `GNNBENCH_MEMORY_BYTES` where set, else the smaller of MemTotal and
    the memory limit of this process's cgroup (a container's). Total, not available: the same run
    gets the same answer whatever else happens to run beside it."""
    if os.environ.get(MEMORY_ENV):
        return int(os.environ[MEMORY_ENV])
    import psutil
    total = psutil.virtual_memory().total
    limit = cgroup_limit()
    return min(total, limit) if limit else total


def cgroup_limit(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The smallest memory limit set on this process's cgroup or any of its ancestors (cgroup v2
    `memory.max`, v1 `memory/memory.limit_in_bytes`); None where no limit can be read."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = Path(root), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = Path(root) / "memory", "memory.limit_in_bytes"
        else:
            continue
        folder = base / path.strip("/")
        for f in (folder, *folder.parents):
            if f != base and base not in f.parents:
                break
            try:
                text = (f / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit():  # v2 says `max` where there is no limit
                limits.append(int(text))
    return min(limits) if limits else None


def held_by_launcher(in_process: bool) -> int:
    """What the launching process and its children (the fork server) hold now, their PSS (RSS where
    the kernel has no smaps_rollup): memory the ranks cannot have. A launcher that runs the only rank
    itself is that rank (its own memory is in the projection). The fork server's pages that its ranks
    will inherit are counted here and again in the ranks' shares: on the safe side, by at most its
    size (about 0.3 GiB)."""
    import psutil
    me = psutil.Process()
    held = 0 if in_process else _pss(me)
    for child in me.children(recursive=True):
        try:
            held += _pss(child)
        except psutil.Error:  # gone since it was listed
            pass
    return held


def _pss(process) -> int:
    try:
        with open(f"/proc/{process.pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        return process.memory_info().rss


def size(nbytes: float) -> str:
    return f"{nbytes / GiB:.1f} GiB" if nbytes >= GiB else f"{nbytes / MiB:.0f} MiB"


def shares(peak: float, memory: int, held: int, local_ranks: int) -> tuple[float, float]:
    """(what a rank needs: its projected peak with the margin, what it has: the machine's memory less
    what the launcher `held`, shared by `local_ranks` ranks)."""
    return peak * (1 + MARGIN), max(0, memory - held) / local_ranks


def figures(method: str, world: int, local_ranks: int, peak: float, memory: int, held: int) -> tuple[bool, str]:
    """Whether a run fits, from its projected peak per rank (`peak`, before the margin), the machine's
    `memory` and what the launcher `held`, shared by `local_ranks` ranks on this machine; and the
    figures, in words."""
    need, have = shares(peak, memory, held, local_ranks)
    ranks = f"{local_ranks} rank{'s' if local_ranks > 1 else ''}"
    shared = f"{size(memory)}{f' less {size(held)} the launcher holds,' if held else ''} shared by {ranks}"
    return need <= have, (f"{method} with {world} worker{'s' if world > 1 else ''} needs about {size(need)} per "
                          f"rank by the cost model's projection ({size(peak)} + {MARGIN * 100:.0f} % margin), this "
                          f"machine gives each rank {size(have)} ({shared})")


def _line(text: str, force: bool) -> str:
    return f"warning: {text}; force=true: running it anyway" if force else f"{text}; force=true runs it anyway"


def verdict(method: str, world: int, local_ranks: int, peak: float, memory: int, held: int,
            force: bool) -> str | None:
    """The line a run gets (`figures`): None when it fits; else the refusal, or with `force` the
    warning that it runs anyway."""
    fits, text = figures(method, world, local_ranks, peak, memory, held)
    return None if fits else _line(text, force)


def not_checked(run) -> str | None:
    """Why the check does not cover `run` (a GPU run, or one the cost model leaves out); None where it does."""
    from analysis import projection
    if run.device == "cuda":
        return "device=cuda (the check covers the host memory of CPU runs)"
    why = projection.outside_run(run)
    return f"the cost model leaves it out ({why})" if why else None


def projected_peak(run, info: dict, launcher: str) -> float | str:
    """The projected peak of the run's largest rank process (`costmodel.process_peak`), from the
    prepared partition's per-rank sizes (`info`: the record's `graph` and `partition`); or why the
    model leaves the run out."""
    from analysis import costmodel, projection
    from benchmarks.run.record import processes_of
    why = not_checked(run)
    if why:
        return why
    world = processes_of(run)
    model, ranks = projection.run_inputs(run, info["graph"], info["partition"], world)
    return costmodel.process_peak(run.method_cls, run.method, model, ranks, world, in_process=launcher != "spawn")


def answer(run, info: dict, launcher: str, local_ranks: int) -> tuple[bool | None, str]:
    """(whether the run fits, `figures`' words) on this machine now; (None, why) where the model
    leaves the run out. `check` and `check_only` take it; their arguments are the same."""
    from benchmarks.run.record import processes_of
    peak = projected_peak(run, info, launcher)
    if isinstance(peak, str):
        return None, peak
    return figures(run.method_name, processes_of(run), local_ranks, peak, machine_memory(),
                   held_by_launcher(in_process=launcher != "spawn"))


def declared_totals(run) -> tuple[str, int, int, int, int, int] | None:
    """(where the sizes come from, nodes, in-edges as the suite counts them, features, classes,
    training nodes) of the run's graph before it is built: a synthetic graph's from its
    configuration (`nodes * avg_degree / 2` draws, both directions and a self-loop a node; the few
    repeated draws the graph policy drops are counted), a named graph's from its published totals
    (`projection.TOTALS`) or its measured statistics (data/partition_stats/); None for any other."""
    from analysis import projection
    d = run.dataset_section
    if d["name"] == "synthetic":
        nodes = int(d["nodes"])
        return ("its configuration", nodes, 2 * int(nodes * d["avg_degree"] / 2) + nodes, int(d["features"]),
                int(d["classes"]), int(d["train_frac"] * nodes))
    if d["name"] in projection.TOTALS:
        return ("its published totals", *projection.TOTALS[d["name"]])
    for stats in projection.measured_stats():
        g = stats["graph"]
        if g["name"] == d["name"]:  # check_stats holds nodes, edges, features and classes
            return ("its measured statistics", g["nodes"], g["edges"], g["features"], g["classes"],
                    g.get("train_nodes", 0))
    return None


def estimate(run, launcher: str, local_ranks: int) -> str:
    """The check's answer before the graph is built (`--check-memory`'s first line, in seconds
    whatever the graph's size): the run's projected peak on the sizes the configuration declares
    (`declared_totals`), with the per-rank shares of a partition taken from the measured graph of
    nearest average degree (`projection.proxy_stats`; one rank: the whole graph). `estimate: fits:
    ...`, `estimate: would not fit: ...` or `estimate: none: <why>`. The prepared partition's own
    sizes give the exact answer after it."""
    from analysis import costmodel, projection
    from benchmarks.base.traffic import Rank
    from benchmarks.run.record import processes_of
    from benchmarks.run.train import model_for
    why = not_checked(run)
    if why:
        return f"estimate: none: {why}"
    totals = declared_totals(run)
    if totals is None:
        return f"estimate: none: the sizes of {run.dataset_name} are known once it is loaded"
    source, nodes, edges, features, classes, train = totals
    world = processes_of(run)
    stats = projection.proxy_stats(projection.measured_stats(), run.dataset_name, nodes, edges, features, classes,
                                   [max(world, 2)], train)
    degrees = projection.graph_degrees(stats["graph"], stats)
    if world == 1:  # one rank holds the whole graph: no partition to borrow shares from
        ranks = [Rank(nodes, edges, 0, 0, 1, train, degrees)]
    else:
        ranks = projection.ranks_of(stats["by_workers"][str(world)], world, graph=degrees)
    in_process = launcher != "spawn"
    peak = costmodel.process_peak(run.method_cls, run.method, model_for(run, features, classes), ranks, world,
                                  in_process)
    fits, text = figures(run.method_name, world, local_ranks, peak, machine_memory(),
                         held_by_launcher(in_process))
    return (f"estimate: {'fits' if fits else 'would not fit'}: {text}; from the sizes {source} gives "
            f"({nodes:,} nodes, {edges:,} in-edges, {features} features)"
            + (", a partition's shares taken from a measured graph of similar degree" if world > 1 else ""))


def check_only(run, info: dict, launcher: str, local_ranks: int, log) -> None:
    """`check`'s answer instead of the run (`python -m benchmarks ... --check-memory`): raises
    MemoryChecked with one line, `fits: ...`, `would not fit: ...` or `not checked: ...`."""
    from benchmarks.base.errors import MemoryChecked
    fits, text = answer(run, info, launcher, local_ranks)
    if fits is None:
        raise MemoryChecked(f"not checked: {text}", True)
    raise MemoryChecked(f"{'fits' if fits else 'would not fit'}: {text}", fits)


def _estimate_first(run, launcher: str, local_ranks: int, log) -> None:
    """The estimate's line, for a graph whose sizes are known before it is built (the others, the
    small named datasets, load in seconds)."""
    if declared_totals(run) is not None:
        print(f"{estimate(run, launcher, local_ranks)}; building the graph for the exact answer (Ctrl-C stops)",
              flush=True)


#: What `runner.run` calls before it loads the graph (`before_prepare`): `--check-memory` answers
#: from the declared sizes first, in seconds, then from the prepared partition.
check_only.before_prepare = _estimate_first


def check(run, info: dict, launcher: str, local_ranks: int, log) -> None:
    """The check the launcher calls (`runner.run`'s `preflight`): `run` the `RunConfig`, `info` what
    preparing said of the graph and its partition, `launcher` `in-process`, `spawn` or `torchrun` (as
    the record's `env.launcher`), `local_ranks` the ranks on this machine. Raises UserError with the
    one line when the run would not fit and `force` is off; `log`s one line when it is not checked,
    or runs although it would not fit."""
    from benchmarks.base.errors import UserError
    fits, text = answer(run, info, launcher, local_ranks)
    if fits is None:
        log(f"memory not checked: {text}; running it")
    elif not fits and not run.force:
        raise UserError(_line(text, force=False))
    elif not fits:
        log(_line(text, force=True))
