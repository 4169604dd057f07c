"""One JSON record per run, written atomically (temporary file, then rename), readable without the
run's process. `record_path` is a pure function of the configuration, so a sweep can tell which
runs already have a record."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.datasets import PROJECT_ROOT

# Keys that say where things are or how chatty a run is, not what is measured.
NON_SEMANTIC = ("results_dir", "data_root", "cache_dir", "log_every", "dist_timeout_s", "resume", "reproduces",
                "study", "sweep")


def config_hash(cfg: dict) -> str:
    semantic = {k: v for k, v in cfg.items() if k not in NON_SEMANTIC}
    return hashlib.sha1(json.dumps(semantic, sort_keys=True, default=str).encode()).hexdigest()[:10]


def record_path(cfg: dict, workers: int) -> Path:
    """`workers` is the number of ranks the run really uses (1 for single-process methods)."""
    name = (f"{cfg['dataset']['name']}-{cfg['model']['name']}-{cfg['method']['name']}-w{workers}"
            f"-s{cfg['seed']}-{config_hash(cfg)}.json")
    return Path(cfg["results_dir"]) / name


def ok_record(path: Path) -> dict | None:
    """The record at `path` if it exists and its run succeeded (what a resumed sweep skips)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("status") == "ok" else None


def write_atomic(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, default=str)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; records are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(backend: str, device: str, threads_per_rank: int) -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "backend": backend,
        "device": device,
        "cuda_device": torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else None,
        "threads_per_rank": threads_per_rank,
        "agg_kernel": "csr_spmm_int32+transposed_csr_backward",
        "memory_probe": "VmHWM reset via /proc/self/clear_refs at each training segment",
        "git_commit": git_commit(),
    }


def new_record(cfg: dict, world: int) -> dict:
    return {
        "status": "running",
        "error": None,
        "method": cfg["method"]["name"],
        "dataset": cfg["dataset"]["name"],
        "model": cfg["model"]["name"],
        "workers": world,
        "workers_requested": cfg["workers"],
        "seed": cfg["seed"],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": cfg,
    }
