"""Hand-made run records with known answers (the shape benchmarks.run.runner writes, only the fields
the analysis reads, including the ones the runtime states about a run when it writes it)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

# The options of the methods these records use, when none is given (conf/method/*.yaml when the
# fixture was written): a record's `variant` names the options that differ from these.
DEFAULTS = {"sar": {"mode": "sar", "prefetch": 1}, "digest": {"sync_every": 10, "asynchronous": False}}
# Keys that are not part of a run's setting (the runtime's non-semantic keys, plus the comparison axes).
NOT_SETTING = ("method", "workers", "seed", "lr", "results_dir", "data_root", "cache_dir", "log_every",
               "dist_timeout_s",
               "resume", "reproduces", "study", "study_margin_pt", "sweep", "kernel", "memory", "precision", "comm")
NOT_TRAINING = ("eval", "setup", "probe")


def variant(method: str, options: dict) -> str:
    defaults = DEFAULTS.get(method, {})
    return " ".join([method, *(f"{k}={v}" for k, v in sorted(options.items())
                               if k not in defaults or defaults[k] != v)])


def record(method="full_halo", workers=2, seed=0, epoch_time=1.0, peak=1000, train_mem=100, comm=0,
           val=(0.5, 0.7, 0.9), status="ok", dataset="synthetic", model="sage", options=None, reproduces=None,
           hidden=128, layers=3, batch_norm=False, by_cat=None, error=None, epochs=3, extra=None,
           summary=None, savers=None) -> dict:
    """`extra`: more config keys (a study's `study`, `partitioner`, ...); `summary`: more summary fields;
    `savers`: the savers that are not at their default, as the variant names them, in its order
    (`{"memory.checkpoint": "layer", "precision": "bf16"}`): in the config and the variant, not the setting."""
    history = [{"epoch": e, "train_loss": 1.0 / (e + 1), "train_acc": v, "val_acc": v, "test_acc": v - 0.01,
                "epoch_time_s": epoch_time, "comm_bytes": comm} for e, v in enumerate(val)]
    config = {"method": {"name": method, **(options or {})}, "dataset": {"name": dataset}, "model": {"name": model},
              "workers": workers, "seed": seed, "lr": 0.01, "epochs": epochs, "hidden": hidden, "layers": layers,
              "batch_norm": batch_norm, "reproduces": reproduces, "results_dir": "r", **(extra or {})}
    for dotted, value in (savers or {}).items():
        *parents, leaf = dotted.split(".")
        node = config
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    setting_config = {k: v for k, v in config.items() if k not in NOT_SETTING}
    r = {"status": status, "error": error, "method": method, "dataset": dataset, "model": model, "workers": workers,
         "seed": seed, "config": config, "history": history, "env": {"cores": 2, "torch": "x", "device": "cpu"},
         "variant": " ".join([variant(method, options or {}), *(f"{k}={v}" for k, v in (savers or {}).items())]),
         "setting_config": setting_config,
         "setting": hashlib.sha1(json.dumps(setting_config, sort_keys=True, default=str).encode()).hexdigest()[:6]}
    if status == "ok":
        best = max(range(len(val)), key=lambda i: val[i])
        r["summary"] = {"epoch_time_s_median": epoch_time, "peak_rss_bytes_max": peak,
                        "train_mem_delta_bytes_max": train_mem, "comm_bytes_per_epoch": comm,
                        "best_val_acc": val[best], "test_acc_at_best_val": val[best] - 0.01,
                        "train_time_s": epoch_time * len(val), **(summary or {})}
        by_cat = by_cat if by_cat is not None else ({"halo_fwd": comm * len(val) * 3 // 4,
                                                     "grad_allreduce": comm * len(val) // 4,
                                                     "eval": 12345, "setup": 99} if comm else {"eval": 0})
        r["comm"] = {"bytes_by_category": by_cat,
                     "bytes_per_epoch_by_category": {c: b / len(val) for c, b in by_cat.items()
                                                     if c not in NOT_TRAINING}}
    else:
        r["error"] = error or "RuntimeError: boom"
    return r


def write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        (folder / f"{r['method']}-w{r['workers']}-s{r['seed']}-{i}.json").write_text(json.dumps(r))
    return folder
