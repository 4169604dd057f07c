"""One JSON record per run, owned from start to finish by one `RecordBuilder`.

The builder is made by the launcher once the run is prepared, travels to rank 0 (it is plain data),
appends rank 0's per-epoch progress to a scratch file, and writes the record atomically (temporary
file, then rename) exactly once: `finish` with the gathered result, or `fail` with the error and
the history reached so far. Everything analysis needs is computed here, at write time: the variant
label (the options that differ from the method's defaults *when it ran*), the setting key, the
training time and the training bytes per epoch by category. Analysis reads records, never the
runtime. `record_path` is a pure function of the configuration, so a sweep can tell which runs
already have a record.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import torch

from benchmarks.core.comm import NOT_TRAINING
from benchmarks.run.config import SAVER_AXES, RunConfig, moved_savers
from benchmarks import PROJECT_ROOT
from benchmarks.run.methods_table import about
from benchmarks.base.options import RESERVED
from benchmarks.base.outputs import write_or_keep
from benchmarks.core.probes import MemoryProbe, cores
from benchmarks.run.stopping import selected

# Keys that say where things are or how chatty a run is, not what is measured.
NON_SEMANTIC = ("results_dir", "data_root", "cache_dir", "log_every", "dist_timeout_s", "resume", "force",
                "reproduces", "regime", "study", "study_margin_pt", "sweep", "allow_nonfinite")
# The axes a comparison runs along: what a run's setting leaves out. The aggregation kernel is an
# implementation of the same math, compared like a method option (SAR against `full_halo` and
# `full_halo kernel=messages`, experiment=sar_vanilla): it is named in the variant (`run_variant`).
# The savers (`memory`: activation checkpointing; `precision`; `comm`: quantised messages) are options
# that compose with any method, and are named in the variant the same way. The learning rate is chosen per
# family (a sweep's `lr_by_family`): a method and its exact control may train at their own families' rates
# and still share a setting.
AXES = ("method", "workers", "seed", "lr", *SAVER_AXES)

#: The environment variable a run's starter (a sweep) sets to the id it gives the run: the record says it
#: (`run_id`), so the starter tells the record this run wrote from one an earlier run left at its path.
RUN_ID = "GNNBENCH_RUN_ID"


#: Options added since run records began to be kept with their results pages (2026-12-07), each with the value
#: that runs as before it existed: `method.<plugin>.<option>` for a method's, the dotted key (`model.heads`,
#: `epochs`) for any other; a new section is its options plus the section itself at `{}`. A configuration
#: holding that value hashes as one that lacks the key, so every record made before keeps its name and a sweep
#: resumes on it (results/README.md). tests/benchmarks/test_record.py holds the schema's keys to the list of
#: tests/benchmarks/data/hashed_keys.json, so an option added without an entry here fails there. A default that
#: changes needs nothing: the value is hashed, so the same command names another run.
ADDED_OPTIONS: dict[str, object] = {}


def config_hash(cfg: dict) -> str:
    """`cfg`: a complete configuration (`RunConfig.as_dict`, or a record's stored one)."""
    return _digest(_without_added({k: v for k, v in cfg.items() if k not in NON_SEMANTIC}), 10)


def _without_added(cfg: dict) -> dict:
    """`cfg` less each option of ADDED_OPTIONS that holds the value it ran as before it existed (a section's
    options before the section: a new section emptied so is dropped whole)."""
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    plugin = (cfg.get("method") or {}).get("plugin") or (cfg.get("method") or {}).get("name")
    for key, value in sorted(ADDED_OPTIONS.items(), key=lambda kv: -kv[0].count(".")):
        section, _, option = key.rpartition(".")
        if section.startswith("method."):  # one plugin's option
            section, _, owner = section.partition(".")
            if owner != plugin:
                continue
        holder = cfg.get(section) if section else cfg
        if isinstance(holder, dict) and option in holder and holder[option] == value:
            del holder[option]
    return cfg


def setting_config(cfg: dict) -> dict:
    """What a run shares with the runs it is compared to: its configuration less the axes and
    where things are."""
    setting = {k: v for k, v in cfg.items() if k not in (*AXES, *NON_SEMANTIC)}
    for axis in AXES:  # an axis that is one option of a section (`dataset.transform`)
        section, _, option = axis.partition(".")
        if option and isinstance(setting.get(section), dict):
            setting[section] = {k: v for k, v in setting[section].items() if k != option}
    return setting


def _digest(obj, length: int) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


def run_variant(cfg: dict, method_defaults: dict) -> str:
    """The record's variant: the method's label, plus the kernel and savers that are not the
    schema's defaults (`sar kernel=messages`, `full_halo memory.checkpoint=layer`). `cfg`: a
    configuration as a dict (`RunConfig.as_dict()`)."""
    return " ".join([variant_label(cfg["method"], method_defaults),
                     *(f"{option}={value}" for option, value in moved_savers(cfg))])


def variant_label(method_cfg: dict, defaults: dict) -> str:
    """The method, plus the options that differ from its defaults (`sar`, `sar mode=sa`,
    `digest sync_every=4`)."""
    extra = [f"{k}={v}" for k, v in sorted(method_cfg.items())
             if k not in RESERVED and (k not in defaults or defaults[k] != v)]
    return " ".join([method_cfg["name"], *extra])


def record_path(run: RunConfig, digest: str | None = None) -> Path:
    """Where the record of `run` is: a pure function of its configuration (`digest`: its
    `config_hash`, where the caller has it already)."""
    name = (f"{run.dataset_name}-{run.model_name}-{run.method_name}-w{processes_of(run)}"
            f"-s{run.seed}-{digest or config_hash(run.as_dict())}.json")
    return Path(run.results_dir) / name


def processes_of(run: RunConfig) -> int:
    """The ranks a run really uses: 1 for single-process methods, whatever `workers` says."""
    return 1 if run.method_cls.single_process else run.workers


def ok_record(path: Path) -> dict | None:
    """The record at `path` if it exists and its run succeeded (what a resumed sweep skips)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("status") == "ok" else None


def git_commit() -> str | None:
    """HEAD, with `-dirty` when tracked files differ from it: a record (and a results page) must not
    name a commit whose code did not make it. Records and pages (`results/`, `docs/`, where a page's
    records ship) are not code: a page published beside a running sweep leaves its records clean."""
    try:
        def git(*args):
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                  timeout=5).stdout.strip()
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!docs")
        return head and head + ("-dirty" if changed else "")
    except (OSError, subprocess.SubprocessError):
        return None


AGG_KERNELS = {"native": "native_c_csr_row_parallel+transposed_csr_backward+hashed_dropout",
               "spmm": "csr_spmm_int32+transposed_csr_backward",
               "messages": "per_edge_messages_gather_scale_index_add"}


def environment(backend: str, device: str, threads_per_rank: int, launcher: str, kernel: str = "spmm") -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cores": cores(),
        "backend": backend,
        "device": device,
        "cuda_device": (torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available()
                        else None),
        "threads_per_rank": threads_per_rank,
        "launcher": launcher,
        "agg_kernel": AGG_KERNELS[kernel],
        "memory_probe": MemoryProbe.DESCRIPTION,
        "git_commit": git_commit(),
    }


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def warmup_dropped(epochs: int, warmup_epochs: int) -> int:
    """Epochs dropped from the epoch-time median: `warmup_epochs`, at least 1 when there are 2+
    epochs, never all of them. The memory probe measures exactly these epochs (docs/measurement.md)."""
    return min(max(1, warmup_epochs), epochs - 1) if epochs > 1 else 0


#: The numbers a record's `summary` holds (`summarize`, and `edges_per_s` from `finish`): what a
#: bisection may hold to a bound (`sweep.Bisect.field`).
SUMMARY_FIELDS = ("epoch_time_s_median", "epoch_time_s_p90", "warmup_epochs_dropped", "train_time_s",
                  *MemoryProbe.SUMMARY, "comm_bytes_per_epoch", "best_val_acc", "test_acc_at_best_val",
                  "best_epoch", "selected_epoch", "val_acc_selected", "test_acc_selected", "final_train_loss",
                  "edges_per_s")


def summarize(history: list[dict], per_rank: list[dict], warmup_epochs: int, stopping: str = "none") -> dict:
    """Per-run summary from the history (identical on every rank) and the ranks' probes. `best_*`: the
    epoch of the best validation accuracy; `*_selected`: the model the stopping rule reports
    (`stopping.selected`; the same epoch under stopping=none), the test accuracy analysis reads."""
    times = [h["epoch_time_s"] for h in history]
    drop = warmup_dropped(len(times), warmup_epochs)
    kept = sorted(times[drop:])
    evaluated = [h for h in history if h["val_acc"] is not None]
    best = max(evaluated, key=lambda h: h["val_acc"]) if evaluated else None
    chosen = selected(history, stopping)
    return {
        "epoch_time_s_median": statistics.median(kept),
        "epoch_time_s_p90": kept[min(len(kept) - 1, int(0.9 * len(kept)))],
        "warmup_epochs_dropped": drop,
        "train_time_s": sum(times),
        **{key: reduce(r[field] for r in per_rank) for key, (field, reduce) in MemoryProbe.SUMMARY.items()},
        "comm_bytes_per_epoch": statistics.fmean(h["comm_bytes"] for h in history),
        "best_val_acc": best["val_acc"] if best else None,
        "test_acc_at_best_val": best["test_acc"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "selected_epoch": chosen["epoch"] if chosen else None,
        "val_acc_selected": chosen["val_acc"] if chosen else None,
        "test_acc_selected": chosen["test_acc"] if chosen else None,
        "final_train_loss": history[-1]["train_loss"],
    }


class RecordBuilder:
    """One run's record from start to end (see the module docstring). Made in the launching process
    (or on every rank under torchrun); `keep_epoch`, `finish` and `fail` run wherever rank 0 or the
    launcher notices the outcome."""

    def __init__(self, run: RunConfig, scratch: Path, prepared: dict, env: dict | None, method_defaults: dict,
                 control: str | None = None, run_id: str | None = None):
        cfg = run.as_dict()
        digest = config_hash(cfg)
        self.path, self.progress = record_path(run, digest), Path(scratch) / "progress.jsonl"
        self.warmup_epochs, self.stopping = run.warmup_epochs, run.stopping
        setting = setting_config(cfg)
        self.record = {
            "status": "running", "error": None,
            "method": run.method_name, "variant": run_variant(cfg, method_defaults),
            "control": control,  # the variant of its exact control (config.control_config); None: exact
            "about": about(run.method_name),  # family, kind, what it approximates, its paper's claim
            "dataset": run.dataset_name, "model": run.model_name,
            "workers": processes_of(run), "workers_requested": run.workers, "seed": run.seed,
            "setting": _digest(setting, 6), "setting_config": setting,
            "config_hash": digest, "started_at": now(), "config": cfg, **prepared, "env": env,
            # this run's own id: the one its starter handed it (`RUN_ID`), else a fresh one
            "run_id": run_id or os.environ.get(RUN_ID) or uuid.uuid4().hex,
        }

    def keep_epoch(self, entry: dict) -> None:
        """Rank 0's per-epoch history, kept on disk as it goes (a failed run keeps it)."""
        with open(self.progress, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def finish(self, history: list[dict], per_rank: list[dict], grads: dict | None = None) -> dict:
        """The `ok` record from the history and every rank's probes (rank 0, after training)."""
        if grads is not None:  # probe_grads: epoch 0's synchronised gradients beside the record (tests)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(grads, self.path.with_suffix(".grads.pt"))
        by_cat = {}
        for r in per_rank:
            for cat, b in r["comm_bytes_by_category"].items():
                by_cat[cat] = by_cat.get(cat, 0) + b
        summary = summarize(history, per_rank, self.warmup_epochs, self.stopping)
        record = {**self.record, "status": "ok", "finished_at": now(), "history": history,
                  "summary": {**summary, "per_rank": per_rank,
                              "edges_per_s": self.record["graph"]["edges"] / summary["epoch_time_s_median"]},
                  "comm": {"bytes_by_category": by_cat,
                           "bytes_per_epoch_by_category": {c: b / len(history) for c, b in by_cat.items()
                                                           if c not in NOT_TRAINING}}}
        record["env"] = {**record["env"], "threads_per_rank": per_rank[0]["threads"]}
        write_or_keep(self.path, record, "the record")
        return record

    def fail(self, error: str, tb: str = "") -> dict:
        """A `failed` record with the history reached so far."""
        history = []
        if self.progress.exists():
            history = [json.loads(line) for line in self.progress.read_text().splitlines() if line.strip()]
        record = {**self.record, "status": "failed", "error": error, "traceback": tb, "history": history,
                  "finished_at": now()}
        write_or_keep(self.path, record, "the failed record")
        return record
