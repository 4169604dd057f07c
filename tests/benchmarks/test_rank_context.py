"""RankContext: the launcher's facts and the store services plugins use instead of the environment
and the partition cache."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from benchmarks.core import stores
from benchmarks.core.comm import Comm
from benchmarks.core.datasets import load_dataset
from benchmarks.base.errors import UserError
from benchmarks.base.leftovers import start_time
from benchmarks.core.partition import build_parts
from benchmarks.core.stores import SharedMemory
from benchmarks.run.config import check
from benchmarks.run.train import make_context
from tests.conftest import SMALL_SYNTHETIC


@pytest.fixture
def ctx(make_cfg):
    cfg = make_cfg("method=full_halo", *SMALL_SYNTHETIC)
    graph = load_dataset(cfg["dataset"])
    return make_context(check(cfg), 0, 1, build_parts(graph, torch.tensor([0, graph.num_nodes]))[0],
                        torch.device("cpu"))


def test_local_rank_and_world_default_to_one_machine(ctx):
    assert (ctx.local_rank, ctx.local_world) == (ctx.rank, ctx.world) == (0, 1)


def test_both_graph_stores_serve_the_whole_graph_to_one_rank(ctx):
    nodes = torch.arange(0, ctx.part.num_local, 7)
    for kind in ("replicated", "partitioned"):
        store = ctx.graph_store(kind)
        assert torch.equal(store.features(nodes, 0), ctx.part.x[nodes])
        counts, neighbors, _, deg = store.hop(nodes, -1, 0)  # every neighbour: nothing drawn, no draws
        assert torch.equal(counts, deg) and neighbors.numel() == int(deg.sum())
        with pytest.raises(ValueError, match="draws"):
            store.hop(nodes, 2, 0)  # a sample needs its draws
    with pytest.raises(UserError, match="graph store"):
        ctx.graph_store("sharded")


def test_shared_memory_refuses_ranks_on_several_machines(ctx):
    assert isinstance(ctx.shared_memory({"t": ((3,), torch.float32)}, "method.x=true"), SharedMemory)
    two_machines = dataclasses.replace(ctx, world=2, local_world=1)
    with pytest.raises(UserError, match="^method.x=true keeps its store in shared memory") as error:
        two_machines.shared_memory({"t": ((3,), torch.float32)}, "method.x=true")
    assert "\n" not in str(error.value)


def test_leftover_shared_memory_of_a_dead_run_is_removed_and_a_live_runs_kept(tmp_path, monkeypatch):
    """Files named for a creator that no longer runs (a dead pid, or a reused one that started at
    another time) are removed when shared memory is next created; a live creator's, and names the
    suite did not make, are kept."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    names = {"dead": f"gnnbench-{dead.pid}-{start_time(me)}-abc-rows1",
             "reused": f"gnnbench-{me}-{start_time(me) + 1}-abc.lock",
             "live": f"gnnbench-{me}-{start_time(me)}-abc-rows1",
             "other": "gnnbench-notmine", "old": "gnnbench-1a2b-rows1"}
    for name in names.values():
        (tmp_path / name).write_bytes(b"x" * 100)
    monkeypatch.setattr(stores, "SHM_FOLDER", str(tmp_path))
    shm = SharedMemory(Comm(), {"t": ((3,), torch.float32)})
    assert shm["t"].tolist() == [0.0, 0.0, 0.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[k] for k in ("live", "other", "old"))
