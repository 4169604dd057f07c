"""A sweep forks its runs from a warm parent (benchmarks/commands/sweep.py `warm_up`): torch, the runner and
the datasets are loaded once, and each run is still its own process with its own record. Two runs in
one warm sweep give, bit for bit, what each gives alone in a fresh process (GNNBENCH_SWEEP_FORK=off):
losses, accuracies and bytes of every epoch, and every rank's bytes by category."""
from __future__ import annotations

import json
import os
import subprocess

from tests import commands
from tests.conftest import SMALL_SYNTHETIC

COMMON = ["dataset=synthetic", *SMALL_SYNTHETIC, "epochs=3", "hidden=16", "dropout=0.5", "eval_every=1",
          "log_every=0", "workers=2"]
#: One full-graph run and one sampled one (a sampler, a store): what a run could leave behind for the next.
METHODS = ("full_halo", "neighbor_sampling")


def sweep(tmp_path, results: str, *args: str, fork: bool = True) -> subprocess.CompletedProcess:
    """The sweep command (itself forked from the tests' warm parent, tests/commands.py); with `fork`
    off, each of its runs is a fresh `python -m benchmarks` process."""
    env = {**os.environ, "GNNBENCH_SWEEP_FORK": "on" if fork else "off"}
    out = commands.run("benchmarks.commands.sweep", *COMMON, *args, f"results_dir={tmp_path / results}",
                       f"cache_dir={tmp_path / 'cache'}", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def measured(folder) -> dict:
    """What a run measured that must not depend on how it was started (no times, no memory)."""
    out = {}
    for path in folder.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record.get("error")
        out[record["method"]] = {
            "history": [{k: h[k] for k in ("train_loss", "train_acc", "val_acc", "test_acc", "comm_bytes")}
                        for h in record["history"]],
            "bytes": [r["comm_bytes_by_category"] for r in record["summary"]["per_rank"]],
        }
    return out


def test_two_runs_in_one_warm_sweep_give_the_records_they_give_alone(tmp_path):
    warm = sweep(tmp_path, "warm", f"method={','.join(METHODS)}")
    assert "each forked from this warm process" in warm.stdout
    alone = sweep(tmp_path, "alone", f"method={','.join(METHODS)}", fork=False)  # each run a fresh process
    assert "forked" not in alone.stdout and "each in a fresh process" in alone.stdout
    for method in METHODS:
        assert measured(tmp_path / "alone")[method] == measured(tmp_path / "warm")[method], method
