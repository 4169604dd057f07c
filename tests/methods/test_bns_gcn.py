"""bns_gcn against its definition: p = 1 is the single-process oracle (losses, gradients); each pair
sends exactly floor(p |B_ij|) distinct rows per layer >= 1, the same set on both ends without any id
sent, a fresh set every epoch; the scaled sampled aggregation is unbiased; p = 0 sends no halo row
in layers >= 1; a bad fraction is a one-line error."""
from __future__ import annotations

import math

import pytest
import torch

from benchmarks.core.aggregation import keep_halo_rows
from benchmarks.base.errors import UserError
from benchmarks.core.models import build_model
from benchmarks.run.runner import run
from methods.bns_gcn import boundary_sample, inverse_ratio_scale, kept_count
from tests.benchmarks.test_halo_subsets import GRAPH, rank_views, simulated_exchange
from tests.conftest import SMALL_SYNTHETIC
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok


def assert_bns_bytes(record, cfg, p: float):
    """Every rank sends each peer floor(p |B_ij|) rows per layer >= 1 and epoch (and returns the
    gradients of the rows it received), and the halo's input features once (layer 0 is exact);
    nothing else moves but the gradient all-reduce (and the evaluation, kept apart)."""
    ranks = record["summary"]["per_rank"]
    boundary = [r["boundary_rows_kept"]["boundary_by_owner"] for r in ranks]  # boundary[j][i] = |B_ij|
    epochs, g = cfg["epochs"], record["graph"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], heads=cfg["model"].get("heads", 4))
    for i, r in enumerate(ranks):
        kept = r["boundary_rows_kept"]
        assert kept["by_owner_epoch0"] == [kept_count(p, b) for b in kept["boundary_by_owner"]]
        assert kept["total_all_epochs"] == epochs * sum(kept["by_owner_epoch0"])
        sent = sum(kept_count(p, boundary[j][i]) for j in range(len(ranks)))
        received = sum(kept["by_owner_epoch0"])
        want = {"halo_inputs/0": sum(boundary[j][i] for j in range(len(ranks))) * g["features"] * 4}
        for layer, (width, needs_grad) in enumerate(model.exchanges()):
            if layer:
                want[f"halo_fwd/{layer}"] = epochs * sent * width * 4
                want[f"halo_bwd/{layer}"] = epochs * received * width * 4 if needs_grad else 0
        got = {k: v for k, v in r["comm_bytes_by_layer"].items() if k.split("/")[0] not in ("eval", "probe", "setup")}
        assert got == {k: v for k, v in want.items() if v}, f"rank {i}"
    assert set(record["comm"]["bytes_by_category"]) <= {"halo_inputs", "halo_fwd", "halo_bwd", "grad_allreduce",
                                                        "eval", "probe", "setup"}


# Each model runs two worker counts per dataset, so that every count 1-3 meets every model (3: a
# rank with several peers, each pair its own boundary set; a fourth rank adds no other case).
WORKERS = {("citeseer", "gcn"): (1, 3), ("synthetic", "gcn"): (2, 3), ("citeseer", "sage"): (2, 3),
           ("synthetic", "sage"): (1, 3), ("citeseer", "gat"): (1, 3), ("synthetic", "gat"): (2, 3)}


@pytest.mark.parametrize("dataset, model", list(WORKERS))
def test_keeping_every_boundary_row_is_the_oracle(make_cfg, data_root, dataset, model):
    common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3"]
    single, single_grads = oracle(make_cfg, common)
    for workers in WORKERS[dataset, model]:
        cfg = make_cfg("method=bns_gcn", "method.boundary_fraction=1", f"workers={workers}", *common,
                       "probe_grads=true")
        path, record = run_ok(cfg)
        assert_matches(record, path, single, single_grads, f"{workers} workers")
        if workers > 1:
            assert_bns_bytes(record, cfg, 1.0)


@pytest.mark.parametrize("p", [0.3, 0.0])
def test_each_pair_sends_exactly_floor_p_boundary_rows_per_layer(make_cfg, p):
    cfg = make_cfg("method=bns_gcn", f"method.boundary_fraction={p}", "model=gat", "workers=3", "layers=3",
                   "partitioner=random", *SMALL_SYNTHETIC)
    _, record = run_ok(cfg)
    assert_bns_bytes(record, cfg, p)
    categories = record["comm"]["bytes_by_category"]
    if p == 0:
        assert not {"halo_fwd", "halo_bwd"} & categories.keys()
    else:
        assert categories["halo_fwd"] > 0


def sampled_views(views, p: float, epoch: int, scale: bool = True):
    """Per rank: (kept halo mask, kept sent mask, sampled adjacency, sampled plan), as the method builds them."""
    out = []
    for part, adj, plan in views:
        kept_halo, kept_sent = boundary_sample(part, plan, p, 5, epoch)
        edge_scale = inverse_ratio_scale(part, adj, plan, p) if scale else None
        out.append((kept_halo, kept_sent, *keep_halo_rows(part, adj, plan, kept_halo, kept_sent, edge_scale)))
    return out


def test_both_ends_of_a_pair_draw_the_same_fresh_sample_of_exactly_floor_p_rows():
    views, p = rank_views(3), 0.3
    x = torch.randn(GRAPH.num_nodes, 4, dtype=torch.float64)
    previous = None
    for epoch in range(3):
        sampled = sampled_views(views, p, epoch)
        received = simulated_exchange(views, [s[3] for s in sampled], x)
        halos = []
        for (part, _, plan), (kept_halo, _, _, kept_plan), rows in zip(views, sampled, received):
            kept_ids = part.halo_ids[kept_halo]
            assert torch.equal(rows, x[kept_ids])  # what the owners sent is what this rank sampled
            by_owner = [int(k.sum()) for k in kept_halo.split(plan.recv_counts)]
            assert by_owner == kept_plan.recv_counts == [kept_count(p, b) for b in plan.recv_counts]
            halos.append(kept_halo)
        assert sum(kept_count(p, b) for _, _, plan in views for b in plan.recv_counts) > 20
        if previous is not None:
            assert any(not torch.equal(a, b) for a, b in zip(halos, previous))  # a fresh sample
        previous = halos


def test_the_scaled_sampled_aggregation_is_unbiased_and_includes_each_row_at_rate_s_over_b():
    views, p, K = rank_views(2), 0.25, 300
    x = torch.randn(GRAPH.num_nodes, 3, dtype=torch.float64)
    for part, adj, plan in views:
        lo = int(part.offsets[part.rank])
        local = x[lo:lo + part.num_local]
        exact = adj.with_values(adj.edge_weights("gcn").double()) @ torch.cat([local, x[part.halo_ids]])
        estimates, included = [], torch.zeros(part.num_halo)
        for epoch in range(K):
            kept_halo, _, kept_adj, _ = sampled_views([(part, adj, plan)], p, epoch)[0]
            included += kept_halo
            sources = torch.cat([local, x[part.halo_ids[kept_halo]]])
            estimates.append(kept_adj.with_values(kept_adj.edge_weights("gcn").double()) @ sources)
        estimates = torch.stack(estimates)
        # The mean of K samples is within a few standard errors std / sqrt(K) of the exact aggregation.
        error = estimates.mean(0) - exact
        sem = estimates.std(0) / math.sqrt(K)
        varies = sem > 1e-12
        assert varies.sum() > 100
        z = error[varies] / sem[varies]
        assert z.pow(2).mean() < 1.5 and z.abs().max() < 6
        torch.testing.assert_close(error[~varies], torch.zeros_like(error[~varies]))
        # Inclusion frequency of each boundary row -> r_ij = s_ij / |B_ij|.
        ratio = torch.repeat_interleave(torch.tensor([kept_count(p, b) / b if b else 0.0 for b in plan.recv_counts]),
                                        torch.tensor(plan.recv_counts))
        assert (included / K - ratio).abs().max() < 5 * math.sqrt(p * (1 - p) / K)
        # Without the 1 / r scaling the estimate is biased (the check above would catch it).
        kept_halo, _, unscaled, _ = sampled_views([(part, adj, plan)], p, 0, scale=False)[0]
        biased = (unscaled.with_values(unscaled.edge_weights("gcn").double())
                  @ torch.cat([local, x[part.halo_ids[kept_halo]]]))
        assert not torch.allclose(biased, estimates[0])


def test_a_fraction_above_one_is_a_one_line_error(make_cfg):
    with pytest.raises(UserError, match=r"^method.boundary_fraction=1.5 must be a number in \[0, 1\]") as e:
        run(make_cfg("method=bns_gcn", "method.boundary_fraction=1.5", *SMALL_SYNTHETIC))
    assert "\n" not in str(e.value)
