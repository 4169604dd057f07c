"""Prepare, launch and record one run (design guide: the path of one run).

- Prepare (this process, once): load the dataset into a `Graph`, partition and cache the parts.
- Launch: one process per worker. On one machine the suite spawns them itself (gloo on CPU, NCCL
  on GPUs) and watches them: a rank that dies ends the run at once, with its traceback in a
  `failed` record. Under `torchrun` every process runs in place. One worker runs in this process.
- Record: rank 0 writes the record atomically when training ends; a failed or interrupted run gets
  a `failed` record with the history reached so far.
"""
from __future__ import annotations

import datetime
import faulthandler
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from benchmarks.datasets import load_dataset
from benchmarks.errors import UserError, choose
from benchmarks.method import method_class
from benchmarks.models import MODELS
from benchmarks.probes import fix_mmap_threshold
from benchmarks.partition import PARTITIONERS, build_parts, load_manifest, load_part, partition_stats, prepare_parts
from benchmarks.record import environment, new_record, ok_record, record_path, write_atomic
from benchmarks.train import run_rank


# --------------------------------------------------------------------------- validation
def validate(cfg: dict) -> None:
    for key in ("workers", "epochs", "hidden", "layers"):
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{key} must be a positive integer (got {value!r})")
    choose("model", cfg["model"]["name"], MODELS)
    choose("partitioner", cfg["partitioner"], PARTITIONERS)
    choose("device", cfg["device"], ("cpu", "cuda"))
    choose("backend", cfg["backend"], ("auto", "gloo", "nccl"))
    if cfg["device"] == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but this torch build sees no CUDA device; use device=cpu")
    backend = backend_of(cfg)
    if (backend == "nccl") != (cfg["device"] == "cuda"):
        raise UserError(f"backend={backend} does not fit device={cfg['device']}: use gloo on cpu and nccl on cuda "
                        "(or backend=auto)")
    if not 0 <= cfg["dropout"] < 1:
        raise UserError(f"dropout must be in [0, 1) (got {cfg['dropout']})")
    delays = cfg.get("straggler_delay_s") or []
    if not isinstance(delays, list) or not all(isinstance(d, (int, float)) and d >= 0 for d in delays):
        raise UserError(f"straggler_delay_s must be a list of seconds >= 0, one per rank (got {delays!r})")


def backend_of(cfg: dict) -> str:
    if cfg["backend"] != "auto":
        return cfg["backend"]
    return "nccl" if cfg["device"] == "cuda" else "gloo"


def device_of(cfg: dict, local_rank: int) -> torch.device:
    if cfg["device"] == "cuda":
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_per_rank(cfg: dict, local_world: int) -> int:
    """Ranks on one machine share its cores instead of each taking all of them."""
    return cfg.get("threads_per_rank") or max(1, cores() // local_world)


# --------------------------------------------------------------------------- prepare
def prepare(cfg: dict, world: int, log=print):
    """Load and partition. Returns (what the record says about it, what a rank loads from)."""
    t0 = time.perf_counter()
    graph = load_dataset(cfg["dataset"], cfg.get("data_root"))
    load_s = time.perf_counter() - t0
    if world > graph.num_nodes:
        raise UserError(f"workers={world} exceeds the {graph.num_nodes} nodes of {graph.name}; use at most {graph.num_nodes}")
    if world == 1:
        # The whole graph in its original numbering: the oracle needs no partition or relabel.
        parts = build_parts(graph, torch.tensor([0, graph.num_nodes]))
        info = {"graph": graph.summary(), "partition": partition_stats(graph, parts, "none"),
                "setup": {"load_time_s": load_s, "partition_time_s": 0.0, "setup_time_s": time.perf_counter() - t0}}
        return info, parts[0]
    t1 = time.perf_counter()
    folder = prepare_parts(graph, cfg["partitioner"], world, cfg["seed"], Path(cfg["cache_dir"]), log=log)
    manifest = load_manifest(folder)
    info = {"graph": manifest["graph"], "partition": manifest["stats"],
            "setup": {"load_time_s": load_s, "partition_time_s": manifest["partition_time_s"],
                      "partition_cache": str(folder), "prepare_parts_s": time.perf_counter() - t1,
                      "setup_time_s": time.perf_counter() - t0}}
    return info, folder


# --------------------------------------------------------------------------- the record
def finish_record(record: dict, result: dict) -> dict:
    record = dict(record)
    per_rank = result["per_rank"]
    by_cat = {}
    for r in per_rank:
        for cat, b in r["comm_bytes_by_category"].items():
            by_cat[cat] = by_cat.get(cat, 0) + b
    record.update(status="ok", finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), history=result["history"],
                  summary={**result["summary"], "per_rank": per_rank,
                           "edges_per_s": record["graph"]["edges"] / result["summary"]["epoch_time_s_median"]},
                  comm={"bytes_by_category": by_cat})
    record["env"]["threads_per_rank"] = per_rank[0]["threads"]
    return record


def failed_record(record: dict, error: str, tb: str, progress: Path | None) -> dict:
    record = dict(record)
    history = []
    if progress is not None and progress.exists():
        history = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    record.update(status="failed", error=error, traceback=tb, history=history,
                  finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    return record


def progress_writer(cfg: dict, run_dir: Path):
    """Rank 0's per-epoch hook: keep the history on disk (a failed run keeps it) and print progress."""
    path = run_dir / "progress.jsonl"
    log_every = cfg.get("log_every") or 0
    epochs = cfg["epochs"]

    def on_epoch(entry: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
        e = entry["epoch"] + 1
        if log_every and (e % log_every == 0 or e == epochs):
            acc = f" val {entry['val_acc']:.4f} test {entry['test_acc']:.4f}" if entry["val_acc"] is not None else ""
            print(f"  epoch {e:>4}/{epochs}  loss {entry['train_loss']:.4f}{acc}  {entry['epoch_time_s']:.3f} s",
                  flush=True)
    return on_epoch


def _save_grads(result: dict, path: Path) -> None:
    if result.get("grads") is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(result["grads"], path.with_suffix(".grads.pt"))


# --------------------------------------------------------------------------- launch
def ranks(cfg: dict) -> int:
    """The ranks a run really uses: 1 for single-process methods, whatever `workers` says."""
    return 1 if method_class(cfg["method"]["name"]).single_process else cfg["workers"]


def run(cfg: dict, log=print) -> tuple[Path, dict]:
    """Run one configuration; return (record path, record). Bad input raises UserError (no record);
    any failure after preparation produces a `failed` record. With `resume` (the default) a
    configuration whose record exists with status ok is not run again; under torchrun it always
    runs (ranks on other machines may not see the same results folder, and all must agree)."""
    validate(cfg)
    method_cls = method_class(cfg["method"]["name"])
    method_cls.check_run(cfg)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _run_torchrun(cfg, method_cls, log)
    world = ranks(cfg)
    path = record_path(cfg, world)
    done = ok_record(path) if cfg.get("resume", True) else None
    if done is not None:  # a resumed sweep runs only what is missing (failed records are rerun)
        log(f"skipped: {path} already holds an ok record (resume=false runs it again)")
        return path, done
    info, source = prepare(cfg, world, log)
    record = {**new_record(cfg, world), **info,
              "env": environment(backend_of(cfg), cfg["device"], threads_per_rank(cfg, world))}
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=_runs_root(cfg)))
    try:
        if world == 1:
            _run_in_process(cfg, source, record, path, run_dir)
        else:
            _run_spawned(cfg, world, source, record, path, run_dir)
    except KeyboardInterrupt:
        write_atomic(path, failed_record(record, "interrupted", "", run_dir / "progress.jsonl"))
        raise
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return path, json.loads(path.read_text())


def _runs_root(cfg: dict) -> Path:
    root = Path(cfg["cache_dir"]) / "runs"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _run_in_process(cfg, part, record, path, run_dir):
    try:
        fix_mmap_threshold(cfg["malloc_mmap_threshold"])
        torch.set_num_threads(threads_per_rank(cfg, 1))  # `threads_per_rank` holds in process too
        device = device_of(cfg, 0)
        result = run_rank(cfg, 0, 1, part, device, on_epoch=progress_writer(cfg, run_dir))
        _save_grads(result, path)
        write_atomic(path, finish_record(record, result))
    except Exception as e:
        write_atomic(path, failed_record(record, f"{type(e).__name__}: {e}", traceback.format_exc(),
                                         run_dir / "progress.jsonl"))


def _train_distributed(cfg, rank, world, local_rank, local_world, folder, record, path: Path, run_dir: Path,
                       init_method):
    """One rank of a multi-process run, once its process exists: join the group, load the part,
    train; rank 0 writes the record. Shared by the spawn and torchrun launchers."""
    device = device_of(cfg, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend_of(cfg), init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg["dist_timeout_s"]))
    part = load_part(folder, rank)
    on_epoch = progress_writer(cfg, run_dir) if rank == 0 else None
    result = run_rank(cfg, rank, world, part, device, on_epoch=on_epoch, partition_folder=Path(folder),
                      local_rank=local_rank, local_world=local_world)
    if rank == 0:
        _save_grads(result, path)
        write_atomic(path, finish_record(record, result))
    dist.barrier()  # nobody tears the group down while rank 0 still writes
    dist.destroy_process_group()


def _rank_process(rank, world, cfg, folder, record, path, run_dir, init_method, threads, plugin_path):
    """Entry point of a spawned rank."""
    faulthandler.enable()  # a rank killed by a fatal signal still prints its Python stack
    try:
        fix_mmap_threshold(cfg["malloc_mmap_threshold"])  # before the part is loaded
        # The fork server's environment is the one it started with: pass on what this run needs.
        os.environ["GNNBENCH_METHODS_PATH"] = plugin_path
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback, whatever the hostname
        torch.set_num_threads(threads)
        _train_distributed(cfg, rank, world, rank, world, folder, record, Path(path), Path(run_dir), init_method)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        (Path(run_dir) / f"rank{rank}.err").write_text(f"{type(e).__name__}: {msg}\n{traceback.format_exc()}")
        sys.stderr.write(f"rank {rank} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        os._exit(1)  # do not wait on a process group whose peers may be gone
    # Skip interpreter finalisation: a spawned child otherwise runs it, and a communication thread
    # left in a C++ static can abort the process ("terminate called without an active exception")
    # after the record is safely written.
    os._exit(0)


def _run_spawned(cfg, world, folder, record, path, run_dir):
    if cfg["device"] == "cuda" and world > torch.cuda.device_count():
        raise UserError(f"workers={world} but this machine has {torch.cuda.device_count()} GPUs; NCCL needs one "
                        "GPU per rank (use fewer workers, or torchrun across machines)")
    # Ranks are forked from a fork server that imported torch and the runtime once, so a rank starts
    # in a fraction of a second instead of re-importing everything (and never inherits this
    # process's threads, as a plain fork would).
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["benchmarks.runner"])
    init_method = f"file://{(run_dir / 'store').resolve()}"
    threads = threads_per_rank(cfg, world)
    plugin_path = os.environ.get("GNNBENCH_METHODS_PATH", "")
    procs = [ctx.Process(target=_rank_process, name=f"gnnbench-rank{r}",
                         args=(r, world, cfg, str(folder), record, str(path), str(run_dir), init_method, threads,
                               plugin_path))
             for r in range(world)]
    started = time.time()
    failed = []
    try:
        for p in procs:
            p.start()
        pending = set(range(world))
        while pending and not failed:
            mp.connection.wait([procs[r].sentinel for r in pending], timeout=1.0)
            for r in list(pending):
                if procs[r].exitcode is not None:
                    pending.discard(r)
                    if procs[r].exitcode != 0:
                        failed.append(r)
    finally:
        for p in procs:  # a dead rank ends the run now: its peers would only wait for the timeout
            if p.pid is not None and p.is_alive():
                p.terminate()
        for p in procs:
            if p.pid is None:
                continue
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    if failed:
        # The root cause is the rank that failed first; its peers fail because it left. A rank killed
        # by a signal (out of memory, say) leaves no traceback; else the earliest traceback wins.
        killed = [r for r in failed if procs[r].exitcode < 0 and not (Path(run_dir) / f"rank{r}.err").exists()]
        errs = sorted(Path(run_dir).glob("rank*.err"), key=lambda f: f.stat().st_mtime)
        if killed or not errs:
            r = (killed or failed)[0]
            text = ""
            error = f"rank {r}: process died with exit code {procs[r].exitcode} (killed by a signal or out of memory?)"
        else:
            text = errs[0].read_text()
            error = f"{errs[0].stem.replace('rank', 'rank ')}: {text.splitlines()[0]}"
        write_atomic(path, failed_record(record, error, text, Path(run_dir) / "progress.jsonl"))
    elif not Path(path).exists() or Path(path).stat().st_mtime < started:  # an older run's record
        write_atomic(path, failed_record(record, "rank 0 exited without writing the record", "",
                                         Path(run_dir) / "progress.jsonl"))


def _run_torchrun(cfg, method_cls, log):
    """In place under torchrun: every process is one rank. Each machine's local rank 0 prepares the
    partition cache (atomically, so machines sharing a file system do not collide) and tells its
    local peers through a ready file; then all ranks join the process group."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if method_cls.single_process and world != 1:
        raise UserError(f"method={cfg['method']['name']} runs in one process; start it without torchrun")
    if world != cfg["workers"]:
        raise UserError(f"workers={cfg['workers']} but torchrun started WORLD_SIZE={world}; make them equal")
    path = record_path(cfg, world)
    ready = _runs_root(cfg) / f"{path.stem}.ready.json"
    if local_rank == 0:
        info, folder = prepare(cfg, world, log)
        write_atomic(ready, {"info": info, "folder": str(folder)})
    else:
        deadline = time.monotonic() + cfg["dist_timeout_s"]
        started = psutil.Process().create_time() - 5  # a ready file from an earlier run is older
        while not (ready.exists() and ready.stat().st_mtime >= started):
            if time.monotonic() > deadline:
                raise UserError(f"local rank 0 did not prepare the partition within {cfg['dist_timeout_s']} s")
            time.sleep(0.2)
    state = json.loads(ready.read_text())
    info, folder = state["info"], state["folder"]
    record = {**new_record(cfg, world), **info,
              "env": environment(backend_of(cfg), cfg["device"], threads_per_rank(cfg, local_world))}
    record["env"]["launcher"] = "torchrun"
    run_dir = Path(tempfile.mkdtemp(prefix=f"torchrun-r{rank}-", dir=_runs_root(cfg)))
    torch.set_num_threads(threads_per_rank(cfg, local_world))
    fix_mmap_threshold(cfg["malloc_mmap_threshold"])
    try:
        _train_distributed(cfg, rank, world, local_rank, local_world, folder, record, path, run_dir, init_method=None)
    except Exception as e:
        if rank == 0:
            write_atomic(path, failed_record(record, f"{type(e).__name__}: {e}", traceback.format_exc(),
                                             run_dir / "progress.jsonl"))
        raise
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if rank != 0:
        return path, {}
    return path, json.loads(path.read_text())
