"""The runtime's pieces for methods that change the halo: `keep_halo` (any subset of the halo
columns, sender and receiver agreeing through the halo-order rule), an empty exchange that issues no
operation, and what `edge_scale` does to each aggregation."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core.aggregation import HaloPlan, LocalAdjacency, keep_halo, keep_with_probability
from benchmarks.core.comm import Comm, flatten, unflatten_into
from benchmarks.core.datasets import synthetic
from benchmarks.core.graph import permute
from benchmarks.core.partition import assign, build_parts, own_edges, order_by_part

GRAPH = synthetic(nodes=600, avg_degree=8, classes=4, features=8, homophily=0.8, feature_noise=1.0,
                  degree_skew=1.0, train_frac=0.2, val_frac=0.2, test_frac=0.5, seed=3)


def rank_views(parts_count: int = 3):
    """Per rank: (part, adjacency, plan), as `train.make_context` builds them."""
    perm, offsets = order_by_part(assign(GRAPH, "random", parts_count, 0), parts_count)
    out = []
    for part in build_parts(permute(GRAPH, perm), offsets):
        adj = LocalAdjacency(part.indptr, part.indices, part.deg[:part.num_local], part.deg)
        out.append((part, adj, HaloPlan(part.send_idx, part.send_counts.tolist(), part.recv_counts.tolist())))
    return out


def simulated_exchange(views, plans, x_global):
    """What each rank receives when every rank sends the rows of its plan, placed by position only
    (as `Comm.all_to_all` does): rank p's received rows, in p's halo order."""
    received = []
    for p, (part_p, _, _) in enumerate(views):
        rows = []
        for q, (part_q, _, _) in enumerate(views):
            plan = plans[q]
            start = sum(plan.send_counts[:p])
            sent = plan.send_idx[start:start + plan.send_counts[p]] + int(part_q.offsets[q])
            rows.append(x_global[sent])
        received.append(torch.cat(rows))
    return received


def test_keeping_every_halo_node_gives_the_adjacency_and_plan_back():
    for part, adj, plan in rank_views():
        kept_adj, kept_plan = keep_halo(part, adj, plan, lambda ids: torch.ones_like(ids, dtype=torch.bool))
        assert torch.equal(kept_adj.indptr, adj.indptr) and torch.equal(kept_adj.src, adj.src)
        assert torch.equal(kept_adj.edge_weights("gcn"), adj.edge_weights("gcn"))
        assert torch.equal(kept_plan.send_idx, plan.send_idx)
        assert (kept_plan.send_counts, kept_plan.recv_counts) == (plan.send_counts, plan.recv_counts)


def test_keeping_no_halo_node_drops_the_cut_edges_on_global_degrees_and_sends_nothing():
    for part, adj, plan in rank_views():
        kept_adj, kept_plan = keep_halo(part, adj, plan, lambda ids: torch.zeros_like(ids, dtype=torch.bool))
        indptr, indices = own_edges(part)
        deg = part.deg[:part.num_local].float()
        assert torch.equal(kept_adj.indptr, indptr) and torch.equal(kept_adj.src, indices)
        assert kept_adj.num_cols == part.num_local and torch.equal(kept_adj.col_deg, deg)
        assert sum(kept_plan.send_counts) == sum(kept_plan.recv_counts) == kept_plan.send_idx.numel() == 0


@pytest.mark.parametrize("p", [0.3, 0.7])
def test_senders_and_receivers_agree_on_a_sampled_halo_without_communicating(p):
    views = rank_views()
    x = torch.randn(GRAPH.num_nodes, 5, dtype=torch.float64)  # rows indexed by (relabelled) global id
    for epoch in range(3):
        keep = keep_with_probability(p, seed=11, epoch=epoch)
        restricted = [keep_halo(part, adj, plan, keep, edge_scale=torch.full((adj.nnz,), 2.0))
                      for part, adj, plan in views]
        received = simulated_exchange(views, [plan for _, plan in restricted], x)
        for (part, adj, _), (kept_adj, kept_plan), rows in zip(views, restricted, received):
            kept_ids = part.halo_ids[keep(part.halo_ids)]
            # The halo-order rule: rows arrive in the receiver's (kept) halo order.
            assert torch.equal(rows, x[kept_ids])
            assert sum(kept_plan.recv_counts) == kept_ids.numel() == kept_adj.num_cols - part.num_local
            # Aggregating over [local | kept halo] is the full aggregation restricted to kept sources,
            # on global degrees, with the caller's edge scale on the kept edges.
            lo = int(part.offsets[part.rank])
            cols = torch.cat([torch.arange(lo, lo + part.num_local), part.halo_ids])
            kept_src = torch.cat([torch.ones(part.num_local, dtype=torch.bool), keep(part.halo_ids)])[adj.src]
            A = adj.with_values(torch.where(kept_src, 2 * adj.edge_weights("gcn"), 0.0).double())
            want = A @ x[cols]
            got = kept_adj.with_values(kept_adj.edge_weights("gcn").double()) @ torch.cat([x[lo:lo + part.num_local],
                                                                                           rows])
            torch.testing.assert_close(got, want)


def test_keep_with_probability_keeps_about_p_and_draws_anew_each_epoch():
    ids = torch.arange(100_000)
    first, second = keep_with_probability(0.3, 0, 0)(ids), keep_with_probability(0.3, 0, 1)(ids)
    assert first.float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert (first & second).float().mean().item() == pytest.approx(0.09, abs=0.01)  # independent draws
    assert torch.equal(first, keep_with_probability(0.3, 0, 0)(ids))
    assert keep_with_probability(1.0, 0, 0)(ids).all() and not keep_with_probability(0.0, 0, 0)(ids).any()


def test_an_empty_exchange_issues_no_operation():
    # No process group exists here: any collective or point-to-point call would raise.
    comm = Comm(rank=1, world=3)
    out = comm.all_to_all(torch.empty(0, 4), [0, 0, 0], [0, 0, 0], "halo_fwd", 0)
    assert out.shape == (0, 4) and comm.training_bytes() == 0


def test_edge_scale_applies_to_linear_aggregation_and_attention_refuses_it_unless_told():
    part, adj, _ = rank_views(1)[0]
    scale = torch.rand(adj.nnz, generator=torch.Generator().manual_seed(0)) + 0.5
    scaled = LocalAdjacency(part.indptr, part.indices, adj.row_deg, adj.col_deg, edge_scale=scale)
    torch.testing.assert_close(scaled.edge_weights("mean"), adj.edge_weights("mean") * scale)
    z = torch.randn(adj.num_cols, 2, 3)
    att_src, att_dst = torch.randn(1, 2, 3), torch.randn(1, 2, 3)
    with pytest.raises(ValueError, match="attention_ignores_scale"):
        scaled.attention(z, z, att_src, att_dst, 0.2)
    # Samplers say the softmax runs over the edges present, unscaled: attention is then the unscaled one.
    unscaled = LocalAdjacency(part.indptr, part.indices, adj.row_deg, adj.col_deg, edge_scale=scale,
                              attention_ignores_scale=True)
    want = adj.attention(z, z, att_src, att_dst, 0.2)
    torch.testing.assert_close(unscaled.attention(z, z, att_src, att_dst, 0.2), want)


def test_flatten_and_unflatten_into_round_trip():
    tensors = [torch.randn(3, 2), torch.randn(4), torch.randn(1, 1, 2)]
    flat = flatten(tensors)
    assert flat.shape == (12,)
    copies = [torch.empty_like(t) for t in tensors]
    unflatten_into(flat, copies)
    assert all(torch.equal(a, b) for a, b in zip(tensors, copies))
