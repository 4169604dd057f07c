"""Cluster-GCN and GraphSAINT held to their definitions: the induced subgraph (checked against brute
force), what a batch holds, GraphSAINT's walks and the unbiasedness of its normalisation, exactness
against `single` where the method is exact (Cluster-GCN with one batch of every cluster), and
that only gradients cross ranks."""
from __future__ import annotations

import math

import pytest
import torch

from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.datasets import load_dataset
from benchmarks.base.errors import UserError
from benchmarks.run.method import method_class
from benchmarks.core.models import build_model
from benchmarks.core.partition import build_parts
from benchmarks.run.runner import run
from benchmarks.run.train import make_context
from benchmarks.run.config import check
from benchmarks.families.minibatch import PHASES
from benchmarks.core.partition import own_edges
from benchmarks.core.sampling import induced_subgraph
from methods.graphsaint import normalisation
from tests.conftest import SMALL_SYNTHETIC
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok

SMALL = ["dataset=synthetic", "dataset.nodes=400", "dataset.avg_degree=8", "dataset.features=12", "dataset.classes=4"]


def rank_method(make_cfg, *overrides):
    """Rank 0's method on the first half of a small synthetic graph (nodes are in random order, so
    the half has many edges to the other half), without a process group."""
    cfg = make_cfg(*SMALL, *overrides)
    graph = load_dataset(cfg["dataset"])
    n = graph.num_nodes
    part = build_parts(graph, torch.tensor([0, n // 2, n]))[0]
    assert part.num_halo > 0
    ctx = make_context(check(cfg), 0, 1, part, torch.device("cpu"))
    return method_class(cfg["method"]["name"])(ctx)


def edge_set(indptr, indices, ids=None):
    """{(source, destination)} of a CSR, columns and rows mapped through `ids` if given."""
    dst = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    src = indices
    if ids is not None:
        src, dst = ids[src], ids[dst]
    return set(zip(src.tolist(), dst.tolist()))


# --------------------------------------------------------------------------- the subgraph
def test_own_edges_and_induced_subgraph_match_brute_force(make_cfg):
    part = rank_method(make_cfg, "method=cluster_gcn").ctx.part
    indptr, indices = own_edges(part)
    local = {(u, v) for u, v in edge_set(part.indptr, part.indices) if u < part.num_local}
    assert edge_set(indptr, indices) == local and len(local) == indices.numel()
    g = torch.Generator().manual_seed(0)
    for size in (0, 1, 37, part.num_local):
        nodes = torch.randperm(part.num_local, generator=g)[:size]
        sub_indptr, sub_indices, positions = induced_subgraph(indptr, indices, nodes)
        chosen = set(nodes.tolist())
        want = {(u, v) for u, v in local if u in chosen and v in chosen}
        assert sub_indptr.numel() == size + 1
        assert edge_set(sub_indptr, sub_indices, nodes) == want and sub_indices.numel() == len(want)
        # positions point at the same edges in the original CSR
        rows = torch.repeat_interleave(torch.arange(size), sub_indptr[1:] - sub_indptr[:-1])
        orig_dst = torch.repeat_interleave(torch.arange(part.num_local), indptr[1:] - indptr[:-1])
        assert torch.equal(indices[positions], nodes[sub_indices]) and torch.equal(orig_dst[positions], nodes[rows])


def test_cluster_gcn_batch_is_the_union_of_its_clusters_with_every_edge_among_them(make_cfg):
    method = rank_method(make_cfg, "method=cluster_gcn", "method.num_parts=8", "method.clusters_per_batch=3",
                         "method.diag_lambda=0.5")
    part = method.ctx.part
    local = {(u, v) for u, v in edge_set(*own_edges(part))}
    cluster = torch.empty(part.num_local, dtype=torch.long)
    for c in range(8):  # the cluster of every node, from the method's own table
        cluster[method.members[method.start[c]:method.start[c] + method.size[c]]] = c
    assert (method.size > 0).all()
    method.begin_epoch(0)
    assert method.steps_per_epoch() == 3
    seen = []
    for step in range(3):
        chosen = method.order[step * 3:(step + 1) * 3]
        sub = method.sample(step)
        nodes = sub.nodes
        assert set(nodes.tolist()) == set(torch.isin(cluster, chosen).nonzero().flatten().tolist())
        assert nodes.numel() == len(set(nodes.tolist()))
        chosen_nodes = set(nodes.tolist())
        want = {(u, v) for u, v in local if u in chosen_nodes and v in chosen_nodes}
        adj = sub.adj
        assert edge_set(adj.indptr, adj.src, nodes) == want and adj.nnz == len(want)
        # degrees within the batch subgraph; self-loops (1 + lambda) / deg
        deg = torch.tensor([sum(1 for _, v in want if v == int(w)) for w in nodes], dtype=torch.float32)
        assert torch.equal(adj.row_deg, deg) and torch.equal(adj.col_deg, deg)
        w = adj.edge_weights("mean")
        self_loop = adj.src == adj.dst
        assert int(self_loop.sum()) == nodes.numel()
        torch.testing.assert_close(w[self_loop], 1.5 / deg)
        torch.testing.assert_close(w[~self_loop], 1 / deg[adj.dst[~self_loop]])
        assert torch.equal(nodes[sub.rows], nodes[part.train_mask[nodes]])
        assert sub.weights == pytest.approx(8 / (chosen.numel() * part.num_train_global))
        seen.append(nodes)
    # one epoch visits every node exactly once
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(part.num_local))


# --------------------------------------------------------------------------- GraphSAINT
def test_graphsaint_walks_follow_edges_from_training_nodes(make_cfg):
    from methods.graphsaint import random_walks

    method = rank_method(make_cfg, "method=graphsaint", "method.roots=50", "method.walk_length=4")
    part = method.ctx.part
    indptr, indices = own_edges(part)
    local = edge_set(indptr, indices)
    train = part.train_mask.nonzero().flatten()
    generator = method.ctx.draws.generator("cpu", "test")
    roots = train[torch.randint(train.numel(), (500,), generator=generator)]
    walks = random_walks(indptr, indices, roots, 4, generator)
    assert walks.shape == (5, 500) and torch.equal(walks[0], roots)
    # each step goes from v to one of v's in-neighbours u: (u, v) is an edge of the part's own subgraph
    assert all((u, v) in local for v, u in zip(walks[:-1].flatten().tolist(), walks[1:].flatten().tolist()))
    assert (walks[1:] != walks[:-1]).any() and (walks[1:] == walks[:-1]).any()  # moves, self-loops too
    sub = method.sample(0)
    assert sub.nodes.numel() > 50 and torch.equal(sub.nodes, sub.nodes.unique())
    assert sub.adj.nnz == len({(u, v) for u, v in local if u in set(sub.nodes.tolist())
                               and v in set(sub.nodes.tolist())})


@pytest.mark.parametrize("norm", ["gcn", "mean"])
def test_graphsaint_normalisation_is_unbiased_over_the_presampled_subgraphs(make_cfg, norm):
    method = rank_method(make_cfg, "method=graphsaint", "method.roots=20", "method.walk_length=2",
                         "method.sample_coverage=5")
    part = method.ctx.part
    assert method.presample_subgraphs > 1
    subgraphs = []
    C_v, C_uv, S = method.presample(5, record=lambda nodes, sub: subgraphs.append((nodes, sub)))
    assert len(subgraphs) == S and (C_uv > 0).any() and (C_uv == 0).any()
    method.edge_scale, method.node_weight = normalisation(method.indptr, method.indices, C_v, C_uv, S,
                                                         part.num_train_global)
    x = torch.randn(part.num_local, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    losses = torch.rand(part.num_local, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    total, loss_total = torch.zeros_like(x), 0.0
    for nodes, sub in subgraphs:
        batch = method.subgraph_batch(nodes, sub)
        A = batch.adj.with_values(batch.adj.edge_weights(norm).double())
        total[nodes] += A @ x[nodes]
        loss_total += float((batch.weights.double() * losses[nodes[batch.rows]]).sum())
    # the full local aggregation (global degrees) over the edges that were ever sampled
    indptr, indices = own_edges(part)
    deg = part.deg[:part.num_local]
    full = LocalAdjacency(indptr, indices, deg, deg, edge_scale=(C_uv > 0).float())
    want = full.with_values(full.edge_weights(norm).double()) @ x
    seen = C_v > 0
    torch.testing.assert_close(total[seen] / C_v[seen, None].double(), want[seen])
    train_seen = part.train_mask & seen
    want_loss = float(losses[train_seen].sum()) / part.num_train_global
    assert loss_total / S == pytest.approx(want_loss, rel=1e-6)  # float32 weights


# --------------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_cluster_gcn_with_every_cluster_in_one_batch_is_single(make_cfg, data_root, model):
    common = [*DATASETS["citeseer"], f"model={model}", f"data_root={data_root}", "layers=2"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=cluster_gcn", "method.num_parts=6", "method.clusters_per_batch=6", "workers=1",
                   *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert record["summary"]["per_rank"][0]["steps"] == cfg["epochs"]
    assert_matches(record, path, single, single_grads, f"cluster_gcn {model}, one batch")


RUNS = {
    "cluster_gcn-synthetic": ["method=cluster_gcn", *DATASETS["synthetic"], "model=gat", "batch_norm=true",
                              "method.diag_lambda=1.0"],
    "graphsaint-synthetic": ["method=graphsaint", *DATASETS["synthetic"], "model=sage", "method.roots=100"],
    "cluster_gcn-citeseer": ["method=cluster_gcn", *DATASETS["citeseer"], "model=gcn"],
    "graphsaint-citeseer": ["method=graphsaint", *DATASETS["citeseer"], "model=gcn", "method.use_norm=false"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_two_workers_move_only_gradients(make_cfg, data_root, name):
    cfg = make_cfg(*RUNS[name], "workers=2", f"data_root={data_root}")
    _, record = run_ok(cfg)
    m, epochs = cfg["method"], cfg["epochs"]
    per_rank = record["summary"]["per_rank"]
    if m["name"] == "cluster_gcn":
        steps = math.ceil(m["num_parts"] / m["clusters_per_batch"])
    else:
        steps = math.ceil(max(record["partition"]["train_nodes_per_rank"]) / m["roots"])
        assert all(r["presample_subgraphs"] >= (1 if m["use_norm"] else 0) for r in per_rank)
    for r in per_rank:
        assert set(r["phase_time_s"]) == set(PHASES) and all(t > 0 for t in r["phase_time_s"].values())
        assert r["steps"] == epochs * steps and r["sampled_edges"] > 0
    g = record["graph"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], batch_norm=cfg["batch_norm"])
    params = sum(t.numel() for t in model.parameters())
    got = record["comm"]["bytes_by_category"]
    assert got["grad_allreduce"] == epochs * steps * 2 * params * 4
    assert set(got) <= {"grad_allreduce", "setup", "eval", "probe"}
    assert all(h["comm_bytes"] == steps * 2 * params * 4 for h in record["history"])
    assert all(math.isfinite(h["train_loss"]) for h in record["history"])


@pytest.mark.parametrize("overrides, message", [
    (["method=cluster_gcn", "method.num_parts=0"], "method.num_parts=0 must be a positive integer"),
    (["method=cluster_gcn", "method.clusters_per_batch=x"], "method.clusters_per_batch='x' must be a positive integer"),
    (["method=cluster_gcn", "method.num_parts=4", "method.clusters_per_batch=5"],
     "method.clusters_per_batch=5 exceeds method.num_parts=4; use at most 4"),
    (["method=cluster_gcn", "method.diag_lambda=-1"], "method.diag_lambda=-1 must be a number >= 0"),
    (["method=graphsaint", "method.roots=0"], "method.roots=0 must be a positive integer"),
    (["method=graphsaint", "method.walk_length=-2"], "method.walk_length=-2 must be a non-negative integer"),
    (["method=graphsaint", "method.sample_coverage=-1"], "method.sample_coverage=-1 must be a number >= 0"),
    (["method=graphsaint", "method.use_norm=maybe"], "method.use_norm='maybe' must be true or false"),
])
def test_bad_options_are_named(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")) as e:
        run(make_cfg(*overrides, *SMALL_SYNTHETIC))
    assert len(str(e.value).splitlines()) == 1


def test_more_clusters_than_part_nodes_names_the_rank_node_count(make_cfg):
    # Checked once the partition is prepared, before any rank starts: bad input, not a failed run.
    with pytest.raises(UserError, match="method.num_parts=64 exceeds the 30 nodes of rank 0's part; use at most 30"):
        run(make_cfg("method=cluster_gcn", "method.num_parts=64", "method.clusters_per_batch=4",
                     "workers=1", "dataset.nodes=30", "dataset.classes=3"))
