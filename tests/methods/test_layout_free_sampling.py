"""The sampled families' draws are keyed by what they draw for and by the node's dataset id, never
by the rank (benchmarks/core/draws.py): the same seed and epoch give the same samples whatever P is, where
the method's definition allows it. Real gloo runs at 1, 2 and 4 workers over random partitions (each
P numbers and splits the nodes differently), dropout on.

- neighbour sampling: a node's sampled in-edges at (epoch, layer) are the same in every batch, on
  every rank, at every P; each rank takes its training nodes in one global order (the 1-worker
  run's, restricted to them). Which seeds share a rank's batch depends on the partition by
  definition (each rank draws from its own training nodes), so batches themselves are not compared.
- LLCG's sampled correction: the server's batches (seeds and blocks, over the whole graph) are the
  same at every P. Its local steps sample the rank's own part (cut edges dropped): partition-bound.
"""
from __future__ import annotations

import pytest

from tests.methods.exactness import DATASETS, run_ok

NS_PLUGIN = """
import torch
from methods import neighbor_sampling as ns


class Method(ns.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.order, self.neighbors = {}, {}

    def sample(self, step):
        sampled = super().sample(step)
        local_seeds, blocks, inputs, _, _ = sampled
        epoch = self.ctx.draws.epoch
        ids = self.store.dataset_ids(inputs)
        self.order.setdefault(str(epoch), []).extend(ids[:local_seeds.numel()].tolist())
        for layer, b in enumerate(blocks):
            src, dst = ids[b.src].tolist(), ids[b.dst].tolist()
            got = {}
            for s, d in zip(src, dst):
                got.setdefault(d, []).append(s)
            for d, s in got.items():
                key = f"{epoch}:{layer}:{d}"
                assert self.neighbors.setdefault(key, sorted(s)) == sorted(s), key  # the epoch's, every step
        return sampled

    def probes(self):
        return {**super().probes(), "order": self.order, "neighbors": self.neighbors}
"""

LLCG_PLUGIN = """
from methods import llcg


class Method(llcg.Method):
    def correction_batch(self, j):
        batch = super().correction_batch(j)
        seeds, blocks, inputs, _ = batch
        ids = self.server_store.dataset_ids(inputs)
        edges = [sorted(zip(ids[b.src].tolist(), ids[b.dst].tolist())) for b in blocks]
        self.__dict__.setdefault("batches", {})[f"{self.ctx.draws.epoch}:{j}"] = {
            "seeds": sorted(ids[:seeds.numel()].tolist()), "edges": edges}
        return batch

    def probes(self):
        return {**super().probes(), "batches": self.__dict__.get("batches", {})}
"""

COMMON = ["layers=2", "epochs=2", "dropout=0.5", *DATASETS["synthetic"]]


@pytest.fixture
def plugins(write_plugins):
    write_plugins({"ns_record": NS_PLUGIN, "llcg_record": LLCG_PLUGIN})


def test_neighbour_samples_and_seed_order_do_not_depend_on_p(make_cfg, plugins):
    runs = {}
    for workers in (1, 2, 4):
        cfg = make_cfg("method=neighbor_sampling", "method.fanouts=[3,2]", "method.batch_size=64",
                       f"workers={workers}", *COMMON)
        cfg["method"]["name"] = "ns_record"
        runs[workers] = run_ok(cfg)[1]["summary"]["per_rank"]
    whole = runs[1][0]["order"]
    train = set(whole["0"])
    neighbors = {}
    for workers, ranks in runs.items():
        for epoch, order in whole.items():
            assert sorted(s for r in ranks for s in r["order"][epoch]) == sorted(order)  # each node once an epoch
            for r in ranks:  # a rank's order: the one global order, restricted to its nodes
                mine = set(r["order"][epoch])
                assert r["order"][epoch] == [v for v in order if v in mine], (workers, epoch)
        for r in ranks:
            for key, sources in r["neighbors"].items():
                assert neighbors.setdefault(key, sources) == sources, (workers, key)
    # every training node's sampled neighbours at the seeds' layer, both epochs, seen at every P
    top = {f"{e}:1:{v}" for e in whole for v in train}
    for ranks in runs.values():
        assert top <= {k for r in ranks for k in r["neighbors"]}
    assert whole["0"] != whole["1"]  # each epoch its own order and samples
    assert any(neighbors[f"0:1:{v}"] != neighbors[f"1:1:{v}"] for v in train)


def test_llcg_correction_batches_do_not_depend_on_p(make_cfg, plugins):
    batches = {}
    for workers in (2, 4):
        cfg = make_cfg("method=llcg", "method.server_batch_size=32", "method.server_fanouts=[3,2]",
                       "method.correction_steps=2", "method.local_steps=2", f"workers={workers}", *COMMON)
        cfg["method"]["name"] = "llcg_record"
        ranks = run_ok(cfg)[1]["summary"]["per_rank"]
        assert all(not r["batches"] for r in ranks[1:])  # rank 0 is the server
        batches[workers] = ranks[0]["batches"]
    assert sorted(batches[2]) == [f"{e}:{j}" for e in range(2) for j in range(2)]
    assert batches[2] == batches[4]
    assert batches[2]["0:0"]["seeds"] != batches[2]["0:1"]["seeds"] != batches[2]["1:0"]["seeds"]
