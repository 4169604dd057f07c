"""The launch pipeline (design guide: the path of one run), one path for every launcher:

    plan (validate, resolve the method once) -> prepare (load, partition, cache)
        -> launch: in-process | spawned ranks | torchrun -> `_rank_main` on every rank -> record

- Plan: every check that needs no data runs here, so bad input is a one-line `UserError` (exit
  status 2) before anything is loaded; checks that need the partition run right after preparing it,
  still before any rank starts.
- Launch: one process per worker. On one machine the suite spawns them itself (gloo on CPU, NCCL
  on GPUs) and watches them: a rank that dies ends the run at once, with its traceback in a
  `failed` record. Under `torchrun` every process runs in place. One worker runs in this process.
- Every rank, whichever launcher made it, goes through `_rank_main`: allocator, threads, device,
  process group, its part, training; rank 0 hands the result to the run's `RecordBuilder`, which
  writes the record (a failed or interrupted run gets a `failed` record with the history so far).
"""
from __future__ import annotations

import datetime
import faulthandler
import functools
import gc
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from benchmarks.run.config import PER_MACHINE, RunConfig, check as check_config, control_config, flat
from benchmarks.base import registry
from benchmarks.core import native
from benchmarks.run import rank_server
from benchmarks.core.datasets import load_dataset
from benchmarks.base.errors import Stopped, UserError, busy, stop_on_signals
from benchmarks.base.leftovers import die_with_launcher, on_this_host, owner_tag, remove_leftovers
from benchmarks.run.method import method_defaults
from benchmarks.core.partition import build_parts, load_manifest, load_part, partition_stats, prepare_parts
from benchmarks.core.probes import cores, fix_mmap_threshold
from benchmarks.base.progress import epoch_printer
from benchmarks.run.record import RecordBuilder, environment, ok_record, processes_of, record_path, run_variant
from benchmarks.base.outputs import NotWritten, check_writable, write_atomic
from benchmarks.run.train import Diverged, run_rank


# --------------------------------------------------------------------------- plan
@dataclass
class Plan:
    """A validated run: its typed configuration (the method resolved and its options checked), its
    method's defaults and the ranks it uses. It travels to spawned ranks pickled into bytes, which
    a rank unpickles once it has set up the plugin path (an out-of-tree plugin's module is found
    only then)."""

    cfg: RunConfig
    method_defaults: dict
    control: str | None = None  # the variant of its exact control (`config.control_config`); None: exact

    @property
    def world(self) -> int:
        """Ranks the run really uses: 1 for single-process methods, whatever `workers` says."""
        return processes_of(self.cfg)

    def check_partition(self, info: dict) -> None:
        """Checks that need the partition (after preparing it, before any rank starts)."""
        self.cfg.method_cls.check_partition(self.cfg, info["partition"])

    @functools.cached_property
    def path(self) -> Path:
        """Where its record goes (`record.record_path`), worked out once."""
        return record_path(self.cfg)

    def threads(self, local_world: int) -> int:
        """Ranks on one machine share its cores instead of each taking all of them."""
        return self.cfg.threads_per_rank or max(1, cores() // local_world)


def plan(cfg: dict) -> Plan:
    """Validate the composed run config and resolve its method; raises UserError (nothing has run
    yet). Every key is held to the schema (`config.check`: types, ranges, names, unknown keys); then
    what this machine must offer (CUDA, enough GPUs)."""
    run = check_config(cfg)
    if run.device == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but this torch build sees no CUDA device; use device=cpu")
    world = processes_of(run)
    if run.device == "cuda" and world > 1 and not under_torchrun() and world > torch.cuda.device_count():
        raise UserError(f"workers={world} but this machine has {torch.cuda.device_count()} GPUs; NCCL needs one "
                        "GPU per rank (use fewer workers, or torchrun across machines)")
    control = control_config(run)
    control = None if control is None else run_variant(control.as_dict(), method_defaults(control.method_name))
    return Plan(run, method_defaults(run.method_name), control)


def ran_kernel(cfg: RunConfig, log) -> str:
    """The kernel this run's aggregations take here, for the record's `env.agg_kernel`: the asked one,
    or `spmm` where `native` cannot run (no compiler, CUDA), said once in one line (`native.resolve`;
    the adjacency and dropout then take torch's kernels by themselves, `native.usable`). The config
    keeps the asked kernel: the run is the same run, by another implementation of the same products
    (and the same dropout masks: benchmarks/core/draws.py computes native.c's hash in torch)."""
    return native.resolve(cfg.kernel, cfg.device, log)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


# --------------------------------------------------------------------------- prepare
def prepare(cfg: RunConfig, world: int, log=print):
    """Load and partition. Returns (what the record says about it, what a rank loads from: the
    whole graph's one part for one rank, else the partition cache folder)."""
    t0 = time.perf_counter()
    with busy(f"{'generating' if cfg.dataset_name == 'synthetic' else 'loading'} the graph ({cfg.dataset_name})", log):
        graph = load_dataset(cfg.dataset_section, cfg.data_root)
    load_s = time.perf_counter() - t0
    if world > graph.num_nodes:
        raise UserError(f"workers={world} exceeds the {graph.num_nodes} nodes of {graph.name}; "
                        f"use at most {graph.num_nodes}")
    if world == 1:
        # The whole graph in its original numbering: the oracle needs no partition or relabel.
        parts = build_parts(graph, torch.tensor([0, graph.num_nodes]))
        info = {"graph": graph.summary(), "partition": partition_stats(graph, parts, "none"),
                "setup": {"load_time_s": load_s, "partition_time_s": 0.0, "setup_time_s": time.perf_counter() - t0}}
        return info, parts[0]
    t1 = time.perf_counter()
    folder = prepare_parts(graph, cfg.partitioner, world, cfg.seed, Path(cfg.cache_dir), log=log)
    manifest = load_manifest(folder)
    info = {"graph": graph.summary(), "partition": manifest["stats"],
            "setup": {"load_time_s": load_s, "partition_time_s": manifest["partition_time_s"],
                      "partition_cache": str(folder), "prepare_parts_s": time.perf_counter() - t1,
                      "setup_time_s": time.perf_counter() - t0}}
    return info, folder


# --------------------------------------------------------------------------- launch
def run(cfg: dict, log=print, preflight=None) -> tuple[Path, dict]:
    """Run one configuration; return (record path, record). Bad input raises UserError (no record);
    any failure after preparation produces a `failed` record, and so does a stop from outside
    (SIGINT, SIGTERM, SIGHUP), which then raises `Stopped` with the record's path in `.record`.
    With `resume` (the default) a configuration whose record exists with status ok is not run
    again; under torchrun it always runs (ranks on other machines may not see the same results
    folder, and all must agree). `preflight`: a check to run once the partition is prepared, before
    any rank starts (`_preflight`; `python -m benchmarks` hands it the pre-flight memory check); its
    `before_prepare(run, launcher, local_ranks, log)`, where it has one, runs before the graph is
    loaded (`--check-memory`'s estimate from the declared sizes)."""
    p = plan(cfg)
    cfg = p.cfg
    for key in ("results_dir", "cache_dir"):  # found now, not after training
        check_writable(key, getattr(cfg, key))
    with stop_on_signals():
        if under_torchrun():
            return _run_torchrun(p, log, preflight)
        done = ok_record(p.path) if cfg.resume else None
        if done is not None:  # a resumed sweep runs only what is missing (failed records are rerun)
            log(f"skipped: {p.path} already holds an ok record (resume=false runs it again)")
            return p.path, done
        before = getattr(preflight, "before_prepare", None)  # --check-memory: an estimate before the graph is built
        if before is not None:
            before(cfg, "in-process" if p.world == 1 else "spawn", p.world, log)
        info, source = prepare(cfg, p.world, log)
        p.check_partition(info)
        scratch = Path(tempfile.mkdtemp(prefix=_scratch_prefix(), dir=_runs_root(cfg.cache_dir)))
        builder = RecordBuilder(cfg, scratch, info,
                                environment(cfg.backend_name, cfg.device, p.threads(p.world),
                                            "in-process" if p.world == 1 else "spawn", ran_kernel(cfg, log)),
                                p.method_defaults, p.control)
        try:
            _preflight(preflight, p, info, builder, "in-process" if p.world == 1 else "spawn", p.world, log)
            if p.world == 1:
                try:
                    _rank_main(p, builder, 0, 0, 1, source, init_method=None)
                except NotWritten:  # the run finished; its record is kept elsewhere, the message says where
                    raise
                except Exception as e:
                    builder.fail(_error_line(e), traceback.format_exc())
            else:
                _run_spawned(p, builder, source, scratch)
        except Stopped as e:
            builder.fail(str(e))
            e.record = p.path
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return p.path, json.loads(p.path.read_text())


def _preflight(check, p: Plan, info: dict, builder: RecordBuilder | None, launcher: str, local_ranks: int,
               log) -> None:
    """`check(run, info, launcher, local_ranks, log)`, handed down by the entry point (the pre-flight
    memory check, analysis/preflight.py: the runtime imports nothing from analysis), after the
    partition and before any rank starts. A refusal (UserError, one line) is recorded as a failed
    run by `builder` (rank 0's) and raised: a sweep sees the record, the command line the line."""
    if check is None:
        return
    try:
        check(p.cfg, info, launcher, local_ranks, log)
    except UserError as e:
        if builder is not None:
            builder.fail(str(e))
        raise


def _error_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _scratch_prefix() -> str:
    """`run-<host>-<pid>-<start time>-`: a scratch folder's owner, for `remove_leftovers`."""
    return f"{on_this_host('run-')}{owner_tag()}"


def _runs_root(cache_dir: str) -> Path:
    """Where runs keep their scratch folders; those of runs whose launcher was killed are removed."""
    root = Path(cache_dir) / "runs"
    root.mkdir(parents=True, exist_ok=True)
    remove_leftovers(root, on_this_host("run-"))  # machines sharing cache_dir: only this one's
    return root


def device_of(cfg: RunConfig, local_rank: int) -> torch.device:
    if cfg.device == "cuda":
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def on_epoch(builder: RecordBuilder, cfg: RunConfig):
    """Rank 0's per-epoch hook: the record keeps the history, the progress line is printed."""
    show = epoch_printer(cfg.epochs, cfg.log_every)

    def hook(entry: dict, left: str | None = None) -> None:
        builder.keep_epoch(entry)
        show(entry, left)
    return hook


def _rank_main(p: Plan, builder: RecordBuilder | None, rank: int, local_rank: int, local_world: int, source,
               init_method: str | None, spawned: float | None = None) -> None:
    """One rank, whichever launcher started it: allocator and threads first (before the part is
    loaded), then device, process group, part, training; rank 0 writes the record. The rank's
    moments (wall clock: `spawned` by its launcher, entered, group up, agreed, part loaded; then
    `run_rank`'s) go into its probe `timeline`, where a run's wall time went (docs/records.md)."""
    timeline = {"spawned": spawned, "entered": time.time()} if spawned is not None else {"entered": time.time()}
    cfg = p.cfg
    fix_mmap_threshold(cfg.malloc_mmap_threshold)
    torch.set_num_threads(p.threads(local_world))
    device = device_of(cfg, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if p.world > 1:
        dist.init_process_group(cfg.backend_name, init_method=init_method, rank=rank, world_size=p.world,
                                timeout=datetime.timedelta(seconds=cfg.dist_timeout_s))
        timeline["group_up"] = time.time()
        _check_ranks_agree(cfg, p.world, Path(source))
        timeline["agreed"] = time.time()
        part, folder = load_part(source, rank), Path(source)
        timeline["part_loaded"] = time.time()
    else:
        part, folder = source, None
    result = run_rank(cfg, rank, p.world, part, device, on_epoch=on_epoch(builder, cfg) if rank == 0 else None,
                      partition_folder=folder, local_rank=local_rank, local_world=local_world, timeline=timeline)
    not_written = None
    if rank == 0:
        try:
            builder.finish(result["history"], result["per_rank"], result["grads"])
        except NotWritten as e:  # kept elsewhere: the peers still end cleanly, then rank 0 says where
            not_written = e
    if p.world > 1:
        dist.barrier()  # nobody tears the group down while rank 0 still writes
        dist.destroy_process_group()
    if not_written is not None:
        raise not_written


def _check_ranks_agree(cfg: RunConfig, world: int, folder: Path) -> None:
    """Every rank runs rank 0's run, checked by one small exchange as soon as the process group is
    up, before any part is loaded. Under torchrun each machine composes its own command line: nodes
    whose overrides differ would otherwise train together under rank 0's name (mixed learning rates,
    parts of two partitions) or wait on each other until `dist_timeout_s` (different epochs). Only
    the folders may differ (`config.PER_MACHINE`), so the ranks also compare what their partition
    caches hold (the manifest's key, with the data's fingerprint, and its statistics). Each rank
    sends its whole configuration (a few KB) rather than a hash, so that every rank can name the
    keys, and all raise the same one line. The spawned launcher's ranks share one plan and cannot
    differ; they take this path too (milliseconds) rather than a second one."""
    manifest = load_manifest(folder)
    mine = {"config": flat(cfg.as_dict()), "partition": {"key": manifest["key"], "stats": manifest["stats"]}}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    first = everyone[0]["config"]

    def differing(theirs: dict) -> list[str]:
        return sorted(k for k in first.keys() | theirs.keys()
                      if k not in PER_MACHINE and first.get(k, _UNSET) != theirs.get(k, _UNSET))

    def shown(values: dict, keys: list[str]) -> str:
        return ", ".join(f"{k}={_override_value(values.get(k, _UNSET))}" for k in keys)

    apart = [r for r in range(1, world) if differing(everyone[r]["config"])]
    if apart:
        r, keys = apart[0], differing(everyone[apart[0]]["config"])
        others = f" (so do ranks {', '.join(map(str, apart[1:]))})" if apart[1:] else ""
        error = (f"the ranks' configurations differ: rank {r} has {shown(everyone[r]['config'], keys)} where rank 0 "
                 f"has {shown(first, keys)}{others}; start every torchrun node with the same overrides")
    else:
        apart = [r for r in range(1, world) if everyone[r]["partition"] != everyone[0]["partition"]]
        if not apart:
            return

        def built(r: int) -> str:
            key, stats = everyone[r]["partition"]["key"], everyone[r]["partition"]["stats"]
            return f"{key['dataset']} (fingerprint {key['fingerprint'][:12]}) cut by {stats['edge_cut']} edges"

        r = apart[0]
        error = (f"the ranks' partitions differ although their configurations agree: rank {r} has {built(r)} "
                 f"where rank 0 has {built(0)}; give every torchrun node the same dataset files and pymetis")
    dist.destroy_process_group()  # every rank is here, past the one collective: nobody waits on another
    raise UserError(error)


_UNSET = object()


def _override_value(value) -> str:
    """A value as an override writes it (`lr=0.5`, `resume=false`, `regime=null`)."""
    if value is _UNSET:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value)


class _Output:
    """The launcher's standard output or error, handed to a rank: the fork server a rank is forked
    from has its own, which is the launcher's only when the launcher started it (a run forked from a
    warm sweep shares the sweep's server, and writes its output elsewhere). Sent as a descriptor
    through the server (multiprocessing's `DupFd`, at pickling), put in place by `_take_outputs`."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction
        return _inherited_fd, (reduction.DupFd(self.fd),)


def _inherited_fd(dup) -> int:
    return dup.detach()


def _outputs() -> tuple[_Output, _Output]:
    """This launcher's standard output and error, as `_rank_process` takes them (fds 1 and 2 where the
    streams have no descriptor of their own: a test's captured stream)."""
    def fd(stream, default: int) -> int:
        try:
            return stream.fileno()
        except (AttributeError, OSError, ValueError):
            return default
    return _Output(fd(sys.stdout, 1)), _Output(fd(sys.stderr, 2))


def _take_outputs(outputs: tuple[int, int]) -> None:
    for fd, target in zip(outputs, (1, 2)):
        os.dup2(fd, target)
        os.close(fd)


def _rank_process(plan_bytes: bytes, builder: RecordBuilder, rank: int, folder: str, scratch: str,
                  init_method: str, environ: dict[str, str], outputs: tuple[int, int], spawned: float) -> None:
    """Entry point of a spawned rank. The launcher owns the run: a Ctrl-C or hang-up reaches it (and
    it stops the ranks), not each rank with a traceback of its own; and a rank never outlives it."""
    _take_outputs(outputs)  # what a rank prints is its launcher's output
    faulthandler.enable()  # a rank killed by a fatal signal still prints its Python stack
    # What the fork server imported is never garbage: the memory probe's collection skips it
    # instead of walking (and so copying) every inherited page of objects.
    gc.freeze()
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    die_with_launcher()  # the launcher's sentinel: even a SIGKILLed launcher takes its ranks along
    try:
        # The fork server's environment is the one it started with: take what this run needs of the
        # launcher's (`_launcher_environ`).
        os.environ.update(environ)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback, whatever the hostname
        registry.plugin_path()  # `methods.<plugin>` now imports from the run's folders, as the plan needs
        p = pickle.loads(plan_bytes)
        _rank_main(p, builder, rank, rank, p.world, folder, init_method, spawned)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        try:
            (Path(scratch) / f"rank{rank}.err").write_text(f"{type(e).__name__}: {msg}\n{traceback.format_exc()}")
            said = True
        except OSError:  # a full disk
            said = False
        # rank 0 trained, then could not write the record: the launcher says where it went
        if isinstance(e, NotWritten):
            if not said:
                sys.stderr.write(f"{msg}\n")
                sys.stderr.flush()
            os._exit(NOT_WRITTEN_EXIT)
        if not isinstance(e, Diverged):  # an outcome, not a bug: the record says it in one line
            sys.stderr.write(f"rank {rank} failed:\n{traceback.format_exc()}")
            sys.stderr.flush()
        os._exit(1)  # do not wait on a process group whose peers may be gone
    # Skip interpreter finalisation: a spawned child otherwise runs it, and a communication thread
    # left in a C++ static can abort the process ("terminate called without an active exception")
    # after the record is safely written.
    os._exit(0)


#: A spawned rank 0's exit status when it trained but could not write the record (`outputs.NotWritten`).
NOT_WRITTEN_EXIT = 3


def _launcher_environ() -> dict[str, str]:
    """What a rank needs of the launcher's environment, which the fork server (started before the
    launcher set them) lacks: the run's plugin folders, and the native kernels' answer when they cannot
    be used (`native.DECIDED`), so each rank does not ask the compiler again (one that hangs would cost
    every rank its timeout)."""
    return {key: os.environ.get(key, "") for key in ("GNNBENCH_METHODS_PATH", native.DECIDED)}


def _run_spawned(p: Plan, builder: RecordBuilder, folder: Path, scratch: Path) -> None:
    ctx = rank_server.context()  # started already by `python -m benchmarks` (rank_server.start)
    init_method = f"file://{(scratch / 'store').resolve()}"
    started = time.time()
    procs = [ctx.Process(target=_rank_process, name=f"gnnbench-rank{r}",
                         args=(pickle.dumps(p), builder, r, str(folder), str(scratch), init_method,
                               _launcher_environ(), _outputs(), started))
             for r in range(p.world)]
    failed = []
    try:
        for proc in procs:
            proc.start()
        pending = set(range(p.world))
        while pending and not failed:
            mp.connection.wait([procs[r].sentinel for r in pending], timeout=1.0)
            for r in list(pending):
                if procs[r].exitcode is not None:
                    pending.discard(r)
                    if procs[r].exitcode != 0:
                        failed.append(r)
    finally:
        for proc in procs:  # a dead rank ends the run now: its peers would only wait for the timeout
            if proc.pid is not None and proc.is_alive():
                proc.terminate()
        for proc in procs:
            if proc.pid is None:
                continue
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    if 0 in failed and procs[0].exitcode == NOT_WRITTEN_EXIT:  # trained; the record went elsewhere
        errs = list(scratch.glob("rank0.err"))
        line = errs[0].read_text().splitlines()[0] if errs else ""
        raise NotWritten(line.removeprefix(f"{NotWritten.__name__}: ") or
                         "rank 0 could not write the record (full disk?); its message above says where it is")
    # A dead fork server: every rank reads as dead (exit code 255) and they die with this launcher. Ranks
    # read 255 a moment before the server shows as dead: give `died` that moment where a rank read 255.
    server_dead = failed and rank_server.died(wait=2.0 if any(procs[r].exitcode == 255 for r in failed) else 0.0)
    if server_dead:
        builder.fail("the ranks' fork server died (killed: out of memory?), so the run lost its ranks")
    elif failed:
        # The root cause is the rank that failed first; its peers fail because it left. A rank killed
        # by a signal (out of memory, say) leaves no traceback; else the earliest traceback wins.
        killed = [r for r in failed if procs[r].exitcode < 0 and not (scratch / f"rank{r}.err").exists()]
        errs = sorted(scratch.glob("rank*.err"), key=lambda f: f.stat().st_mtime)
        if killed or not errs:
            r = (killed or failed)[0]
            code = procs[r].exitcode
            how = (f"killed by {signal.Signals(-code).name}" + (" (out of memory?)" if code == -signal.SIGKILL else "")
                   if code < 0 else f"exit code {code}")
            builder.fail(f"rank {r}: process died, {how}")
        else:
            text = errs[0].read_text()
            error = text.splitlines()[0]
            if not error.startswith(f"{Diverged.__name__}:"):  # every rank diverges at once: no rank to name
                error = f"{errs[0].stem.replace('rank', 'rank ')}: {error}"
            builder.fail(error, text)
    elif not p.path.exists() or p.path.stat().st_mtime < started:  # an older run's record
        builder.fail("rank 0 exited without writing the record")


def record_death(cfg: dict, launcher: int, error: str, tb: str = "", run_id: str | None = None) -> Path:
    """Write the failed record of a run whose launcher (process `launcher`, dead now) ended without
    writing one: killed by a signal (the out-of-memory killer), or a bug outside its ranks. Its starter
    (a sweep) writes it with what is known: the configuration, `error` and `tb`, and the history rank 0
    kept in the launcher's scratch folder, which is then removed. Returns its path; NotWritten where
    it could not be written there (the message says where it is)."""
    p = plan(cfg)
    root = Path(p.cfg.cache_dir) / "runs"
    scratch = next(root.glob(f"{on_this_host('run-')}{launcher}-*"), root / "gone")  # named by `_scratch_prefix`
    try:
        RecordBuilder(p.cfg, scratch, {}, None, p.method_defaults, p.control, run_id).fail(error, tb)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return p.path


def _run_torchrun(p: Plan, log, preflight=None) -> tuple[Path, dict]:
    """In place under torchrun: every process is one rank. Each machine's local rank 0 prepares the
    partition cache (atomically, so machines sharing a file system do not collide) and tells its
    local peers through a ready file; then all ranks join the process group. A worker dies with its
    agent (its parent): torchrun starts each in a session of its own, so a SIGKILLed agent would
    otherwise leave them training, orphaned."""
    die_with_launcher()
    cfg = p.cfg
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if cfg.method_cls.single_process and world != 1:
        raise UserError(f"method={cfg.method_name} runs in one process; start it without torchrun")
    if world != cfg.workers:
        raise UserError(f"workers={cfg.workers} but torchrun started WORLD_SIZE={world}; make them equal")
    ready = _runs_root(cfg.cache_dir) / f"{p.path.stem}.ready.json"
    if local_rank == 0:
        info, folder = prepare(cfg, world, log)
        write_atomic(ready, {"info": info, "folder": str(folder)})
    else:
        deadline = time.monotonic() + cfg.dist_timeout_s
        started = psutil.Process().create_time() - 5  # a ready file from an earlier run is older
        while not (ready.exists() and ready.stat().st_mtime >= started):
            if time.monotonic() > deadline:
                raise UserError(f"local rank 0 did not prepare the partition within {cfg.dist_timeout_s} s")
            time.sleep(0.2)
    state = json.loads(ready.read_text())
    p.check_partition(state["info"])
    scratch = Path(tempfile.mkdtemp(prefix=f"{_scratch_prefix()}r{rank}-", dir=_runs_root(cfg.cache_dir)))
    builder = RecordBuilder(cfg, scratch, state["info"],
                            environment(cfg.backend_name, cfg.device, p.threads(local_world), "torchrun",
                                        ran_kernel(cfg, log)),
                            p.method_defaults, p.control)
    _preflight(preflight, p, state["info"], builder if rank == 0 else None, "torchrun", local_world, log)
    try:
        _rank_main(p, builder, rank, local_rank, local_world, state["folder"], init_method=None)
    except Stopped as e:  # torchrun stops its workers with SIGTERM
        if rank == 0:
            builder.fail(str(e))
            e.record = p.path
        raise
    except UserError as e:  # the ranks disagree (`_check_ranks_agree`): a failed run, said in one line
        if rank == 0:
            builder.fail(str(e))
        raise
    except Exception as e:
        if rank == 0:
            builder.fail(_error_line(e), traceback.format_exc())
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if rank != 0:
        return p.path, {}
    return p.path, json.loads(p.path.read_text())
