import json

import numpy as np
import pytest
import torch

from benchmarks.core.datasets import synthetic
from benchmarks.core.graph import permute
from benchmarks.core.partition import assign, build_parts, load_manifest, load_part, prepare_parts, order_by_part

pytestmark = pytest.mark.fast

GRAPH = synthetic(nodes=2000, avg_degree=8, classes=4, features=8, homophily=0.8, feature_noise=1.0,
                  degree_skew=1.0, train_frac=0.2, val_frac=0.2, test_frac=0.5, seed=3)


def split(partitioner, parts, seed=0):
    perm, offsets = order_by_part(assign(GRAPH, partitioner, parts, seed), parts)
    g = permute(GRAPH, perm)
    return g, offsets, build_parts(g, offsets)


@pytest.mark.parametrize("partitioner", ["metis", "random", "contiguous"])
def test_parts_cover_every_in_edge_with_a_consistent_halo_and_plan(partitioner):
    g, offsets, parts = split(partitioner, 4)
    assert sum(p.num_local for p in parts) == g.num_nodes
    assert sum(p.indices.numel() for p in parts) == g.num_edges
    for p in parts:
        lo = int(offsets[p.rank])
        # Map every column back to a global id: the local edges are exactly the graph's in-edges.
        global_cols = torch.cat([torch.arange(lo, lo + p.num_local), p.halo_ids])
        dst = torch.repeat_interleave(torch.arange(p.num_local), p.indptr[1:] - p.indptr[:-1]) + lo
        got = set(zip(global_cols[p.indices].tolist(), dst.tolist()))
        start, end = int(g.indptr[lo]), int(g.indptr[lo + p.num_local])
        want = set(zip(g.indices[start:end].tolist(), g.dst_index()[start:end].tolist()))
        assert got == want
        assert not ((p.halo_ids >= lo) & (p.halo_ids < lo + p.num_local)).any()
        assert torch.equal(p.deg, g.in_degree()[global_cols])
        # What peer q sends me is what I expect from q, row for row.
        for q in parts:
            sent = q.send_idx[q.send_counts[:p.rank].sum():q.send_counts[:p.rank + 1].sum()] + int(offsets[q.rank])
            mine = p.halo_ids[p.recv_counts[:q.rank].sum():p.recv_counts[:q.rank + 1].sum()]
            assert torch.equal(sent, mine)


def test_metis_cuts_far_fewer_edges_than_random_and_balances_training_nodes():
    def cut(parts):
        return sum(int((p.indices >= p.num_local).sum()) for p in parts)

    _, _, metis = split("metis", 4)
    _, _, rand = split("random", 4)
    assert cut(metis) < 0.6 * cut(rand)
    train = [int(p.train_mask.sum()) for p in metis]
    assert max(train) <= 1.25 * (sum(train) / 4)  # METIS balances the second constraint loosely


def test_cache_is_reused_and_a_damaged_one_is_rebuilt(tmp_path):
    messages = []
    folder = prepare_parts(GRAPH, "metis", 3, 0, tmp_path, log=messages.append)
    manifest = load_manifest(folder)
    assert manifest["stats"]["parts"] == 3 and len(manifest["checksums"]) == 3
    assert manifest["stats"]["halo_nodes_per_rank"] == [load_part(folder, r).num_halo for r in range(3)]
    mtime = (folder / "part_0.pt").stat().st_mtime_ns
    assert prepare_parts(GRAPH, "metis", 3, 0, tmp_path, log=messages.append) == folder
    assert (folder / "part_0.pt").stat().st_mtime_ns == mtime and messages == []

    (folder / "part_1.pt").write_bytes(b"truncated")
    prepare_parts(GRAPH, "metis", 3, 0, tmp_path, log=messages.append)
    assert len(messages) == 1 and "damaged (part_1.pt fails its checksum); rebuilding" in messages[0]
    assert load_part(folder, 1).num_local > 0

    (folder / "manifest.json").write_text("{not json")
    prepare_parts(GRAPH, "metis", 3, 0, tmp_path, log=messages.append)
    assert "unreadable manifest" in messages[-1]

    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["key"]["seed"] = 99
    (folder / "manifest.json").write_text(json.dumps(manifest))
    prepare_parts(GRAPH, "metis", 3, 0, tmp_path, log=messages.append)
    assert "stale" in messages[-1]
    assert load_manifest(folder)["key"]["seed"] == 0


def test_metis_is_given_the_adjacency_it_was_always_given(monkeypatch):
    # METIS's input as built before its temporaries were dropped early (commit 949f6ef): the same
    # input, the same parts, the same partition caches.
    from benchmarks.core import partition

    graph = GRAPH
    seen = {}
    monkeypatch.setattr(partition, "_in_child", lambda fn, parts, xadj, adjncy, weights, seed:
                        seen.update(xadj=xadj, adjncy=adjncy) or np.zeros(graph.num_nodes, dtype=np.int64))
    partition.metis(graph.indptr, graph.indices, 2, 0)
    n = graph.num_nodes
    dst = torch.repeat_interleave(torch.arange(n), graph.indptr[1:] - graph.indptr[:-1])
    keep = graph.indices != dst
    xadj = np.concatenate([[0], np.cumsum(torch.bincount(dst[keep], minlength=n).numpy())])
    assert seen["xadj"].dtype == xadj.dtype and np.array_equal(seen["xadj"], xadj)
    assert seen["adjncy"].dtype == np.int64 and np.array_equal(seen["adjncy"], graph.indices[keep].numpy())
