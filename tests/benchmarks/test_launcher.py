"""The launcher: a dying rank ends the run promptly with a failed record; torchrun gives the same
run as the spawn launcher; records carry every required field."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.run.record import SUMMARY_FIELDS
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC

CRASHING_PLUGINS = {
    "raises_on_rank1": """
from benchmarks.families.full_graph import FullGraphMethod

class Method(FullGraphMethod):
    def train_epoch(self, epoch):
        if epoch == 2 and self.ctx.rank == 1:
            raise RuntimeError("injected failure on rank 1")
        return super().train_epoch(epoch)
""",
    "killed_on_rank2": """
import os, signal
from benchmarks.families.full_graph import FullGraphMethod

class Method(FullGraphMethod):
    def train_epoch(self, epoch):
        if epoch == 1 and self.ctx.rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
        return super().train_epoch(epoch)
""",
}


@pytest.fixture
def crashing_plugins(write_plugins):
    return write_plugins(CRASHING_PLUGINS)


@pytest.mark.parametrize("plugin, rank, error", [
    ("raises_on_rank1", 1, "RuntimeError: injected failure on rank 1"),
    ("killed_on_rank2", 2, "process died, killed by SIGKILL (out of memory?)"),
])
def test_a_dying_rank_ends_the_run_with_a_failed_record(make_cfg, crashing_plugins, plugin, rank, error):
    cfg = make_cfg("workers=3", "epochs=20", "dist_timeout_s=600", *SMALL_SYNTHETIC)
    cfg["method"] = {"name": plugin}  # full_halo's options (layer0) are not the plugin's
    start = time.monotonic()
    path, record = run(cfg)
    # The survivors were blocked in a collective; the launcher ended them instead of waiting for
    # the 600 s process-group timeout.
    assert time.monotonic() - start < 120
    assert record["status"] == "failed"
    assert record["error"].startswith(f"rank {rank}") and error in record["error"]
    assert "\n" not in record["error"]
    if plugin == "raises_on_rank1":
        assert "Traceback" in record["traceback"] and "injected failure" in record["traceback"]
    # What was measured before the failure is kept.
    assert [h["epoch"] for h in record["history"]][:1] == [0]
    assert json.loads(path.read_text())["status"] == "failed"


REQUIRED = {
    "top": ["status", "error", "method", "dataset", "model", "workers", "config", "env", "graph", "partition",
            "history", "summary"],
    "env": ["torch", "python", "cores", "backend", "device", "git_commit"],
    "graph": ["nodes", "edges", "features", "classes"],
    "partition": ["partitioner", "edge_cut", "nodes_per_rank", "halo_nodes_per_rank"],
    "history": ["epoch", "train_loss", "val_acc", "test_acc", "epoch_time_s", "comm_bytes"],
    "summary": ["epoch_time_s_median", "peak_rss_bytes_max", "train_mem_delta_bytes_max", "comm_bytes_per_epoch",
                "best_val_acc", "test_acc_at_best_val", "per_rank"],
    "per_rank": ["peak_rss_bytes", "rss_train_start_bytes", "train_mem_delta_bytes", "comm_bytes_by_category"],
}


def test_record_has_every_required_field(make_cfg):
    path, record = run(make_cfg("workers=2", "epochs=4", "eval_every=2", *SMALL_SYNTHETIC))
    assert record["status"] == "ok" and path.exists() and not list(path.parent.glob("*.tmp"))
    for key in REQUIRED["top"]:
        assert key in record, key
    for group in ("env", "graph", "partition", "summary"):
        for key in REQUIRED[group]:
            assert key in record[group], f"{group}.{key}"
    assert len(record["history"]) == 4
    for entry in record["history"]:
        assert set(REQUIRED["history"]) <= entry.keys()
    assert [h["test_acc"] is None for h in record["history"]] == [True, False, True, False]
    assert len(record["summary"]["per_rank"]) == 2
    assert set(record["summary"]) - {"per_rank"} == set(SUMMARY_FIELDS)  # what a bisection may bound
    for rank in record["summary"]["per_rank"]:
        assert set(REQUIRED["per_rank"]) <= rank.keys()
        assert rank["train_mem_delta_bytes"] >= 0 and rank["peak_rss_bytes"] > 0
        assert rank["comm_bytes_by_category"]["halo_fwd"] > 0
    assert record["partition"]["edge_cut"] > 0 and sum(record["partition"]["nodes_per_rank"]) == 1500
    assert record["config"]["workers"] == 2 and record["env"]["backend"] == "gloo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_machines_on_loopback_train_like_the_spawn_launcher(make_cfg, tmp_path):
    overrides = ["model=gcn", "workers=2", "epochs=3", "hidden=16", "dropout=0", "log_every=0", *SMALL_SYNTHETIC]
    _, spawned = run(make_cfg(*overrides))
    assert spawned["status"] == "ok"

    port = free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    results = tmp_path / "torchrun-results"
    machines = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
         "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "benchmarks", *overrides,
         f"results_dir={results}", f"cache_dir={tmp_path / 'torchrun-cache'}"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in range(2)]
    outputs = [m.communicate(timeout=300)[0] for m in machines]
    assert [m.returncode for m in machines] == [0, 0], outputs
    assert "record:" in outputs[0]
    (path,) = results.glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok" and record["env"]["launcher"] == "torchrun"
    assert [h["train_loss"] for h in record["history"]] == pytest.approx(
        [h["train_loss"] for h in spawned["history"]], rel=1e-6)
    assert record["comm"]["bytes_by_category"]["halo_fwd"] == spawned["comm"]["bytes_by_category"]["halo_fwd"]
