"""The launcher: a dying rank ends the run promptly with a failed record; torchrun gives the same
run as the spawn launcher; records carry every required field."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import psutil
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
        # Where the run's wall time went (benchmarks.tools.run_cost): the rank's moments, in order.
        t = rank["timeline"]
        moments = [t[k] for k in ("spawned", "entered", "group_up", "agreed", "part_loaded", "ready", "trained")]
        assert moments == sorted(moments) and 0 <= t["eval_s"] <= t["trained"] - t["ready"]
    assert record["partition"]["edge_cut"] > 0 and sum(record["partition"]["nodes_per_rank"]) == 1500
    assert record["config"]["workers"] == 2 and record["env"]["backend"] == "gloo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_machines(tmp_path, *per_node: list[str]) -> list[tuple[int, str]]:
    """Two torchrun "machines" on loopback, node n started with `per_node[n]`, each keeping its partition
    cache in its own folder (as machines without a shared file system do) and both writing records
    to `tmp_path / 'results'`; (exit status, output) per node, once both have ended."""
    port = free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    machines = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
         "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "benchmarks", *overrides,
         f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / f'cache{node}'}"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node, overrides in enumerate(per_node)]
    try:
        outputs = [m.communicate(timeout=300)[0] for m in machines]
    finally:
        for m in machines:
            m.kill()
    return [(m.returncode, out) for m, out in zip(machines, outputs)]


def test_two_torchrun_machines_on_loopback_train_like_the_spawn_launcher(make_cfg, tmp_path):
    overrides = ["model=gcn", "workers=2", "epochs=3", "hidden=16", "dropout=0", "log_every=0", *SMALL_SYNTHETIC]
    _, spawned = run(make_cfg(*overrides))
    assert spawned["status"] == "ok"

    (rc0, out0), (rc1, out1) = torchrun_machines(tmp_path, overrides, overrides)
    assert [rc0, rc1] == [0, 0], (out0, out1)
    assert "record:" in out0
    (path,) = (tmp_path / "results").glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok" and record["env"]["launcher"] == "torchrun"
    assert [h["train_loss"] for h in record["history"]] == pytest.approx(
        [h["train_loss"] for h in spawned["history"]], rel=1e-6)
    assert record["comm"]["bytes_by_category"]["halo_fwd"] == spawned["comm"]["bytes_by_category"]["halo_fwd"]


def test_torchrun_machines_with_different_overrides_are_refused_before_training(tmp_path):
    """Node 1 started with another learning rate, seed and epoch count: every rank says which keys
    differ in one line and exits non-zero, before an epoch; the record is rank 0's, failed; nothing
    is left running. (Without the check the ranks trained together and rank 0 wrote an ok record, or,
    with different epochs, waited for each other until `dist_timeout_s`.)"""
    common = ["workers=2", "epochs=2", "hidden=16", "log_every=1", "dist_timeout_s=60", *SMALL_SYNTHETIC]
    (rc0, out0), (rc1, out1) = torchrun_machines(tmp_path, common, [*common, "lr=0.5", "seed=1", "epochs=3"])
    line = ("error: the ranks' configurations differ: rank 1 has epochs=3, lr=0.5, seed=1 where rank 0 has "
            "epochs=2, lr=0.01, seed=0; start every torchrun node with the same overrides")
    for rc, out in ((rc0, out0), (rc1, out1)):
        assert rc != 0 and line in out.splitlines(), out
        assert not re.search(r"epoch +1/", out)  # refused before training
    (path,) = (tmp_path / "results").glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "failed" and record["history"] == []
    assert record["error"] == line.removeprefix("error: ") and record["config"]["lr"] == 0.01
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not left, [p.info["cmdline"] for p in left]
