"""gas (GNNAutoScale) against its definition: with every cluster in one batch it is full-batch
`single` (losses, epoch-0 gradients and accuracies, dropout on); in a multi-batch step an
out-of-batch neighbour contributes at layer l exactly its history row (what was last pushed), no
gradient reaches the history, and the pushed rows are the batch's computed layer inputs; the
history bytes counted are the analytic ones; it runs one process whatever `workers` says."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.comm import Comm
from benchmarks.run.config import check
from benchmarks.base.errors import UserError
from benchmarks.core.graph import from_edge_index
from benchmarks.core.models import build_model
from methods.gas import GasAggregator, Histories, batch_adjacency
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_one_batch_of_every_cluster_is_single(make_cfg, model):
    """batch_size=-1: B is every node (ascending), O empty; dropout 0.5 draws single's masks."""
    common = [*DATASETS["synthetic"], f"model={model}", "layers=3", "workers=1", "dropout=0.5"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=gas", "method.num_parts=4", "method.batch_size=-1", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, f"gas, one batch, {model}")
    assert record["comm"]["bytes_by_category"].get("history_pull", 0) == 0  # nothing outside the batch


def _graph():
    """A path 0-1-2-3-4-5 plus the chord 1-4, undirected, with self-loops (the suite's graph policy)."""
    pairs = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (1, 4)]
    src = [a for a, b in pairs] + [b for a, b in pairs] + list(range(6))
    dst = [b for a, b in pairs] + [a for a, b in pairs] + list(range(6))
    g = from_edge_index("g", torch.tensor([src, dst]), 6, torch.randn(6, 3), torch.zeros(6),
                        *[torch.zeros(6, dtype=torch.bool)] * 3, 2)
    return g, g.in_degree()


@pytest.mark.fast
@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_out_of_batch_rows_are_the_history(name):
    """Batch B = {0, 1, 2}: O = {3, 4} (2-3 and 1-4). Layer 1 reads O's rows from the table, detached;
    B's layer-1 inputs are pushed; the outputs equal the whole graph's adjacency applied to
    [fresh B rows | history rows of O]."""
    torch.manual_seed(0)
    g, deg = _graph()
    nodes = torch.tensor([0, 1, 2])
    adj, outside = batch_adjacency(g.indptr, g.indices, deg, nodes, "spmm")
    assert outside.tolist() == [3, 4]
    model = build_model(name, 3, 4, 2, 2, 0.0, seed=0)
    comm = Comm()
    hist = Histories(6, {1: 4}, torch.device("cpu"), comm)
    stale = torch.randn(6, 4)
    hist.tables[1].copy_(stale)
    x = g.x[torch.cat([nodes, outside])].requires_grad_(True)
    agg = GasAggregator(adj, nodes, outside, comm, hist)
    out = model(x, agg)
    assert out.shape == (3, 2)
    # what layer 1 aggregated for O is the table's rows as they were (the push touched only B)
    torch.testing.assert_close(agg.pulled[1], stale[outside])
    assert not agg.pulled[1].requires_grad
    # the pushed rows: layer 0's outputs for B (after the activation), recomputed on the whole graph
    whole = LocalAdjacency(g.indptr, g.indices, deg, deg, kernel="spmm")
    full = GasAggregator(whole, torch.arange(6), torch.arange(0), comm)
    h1 = torch.relu(model.layers[0](g.x, full, 0))
    torch.testing.assert_close(hist.tables[1][nodes], h1[nodes].detach())
    torch.testing.assert_close(hist.tables[1][outside], stale[outside])
    # layer 1 over the whole graph with O's rows replaced by the history = the batch's output
    mixed = h1.detach().clone()
    mixed[outside] = stale[outside]
    mixed[nodes] = h1[nodes]
    want = model.layers[1](mixed, full, 1)[nodes]
    torch.testing.assert_close(out, want)
    # no gradient reaches the history, and O's features reach only layer 0 (as inputs, not parameters)
    out.sum().backward()
    assert hist.tables[1].grad is None
    counted = comm.by_category()
    assert counted == {"history_pull": 2 * 4 * 4, "history_push": 3 * 4 * 4}


@pytest.mark.parametrize("fill", ["epoch", "none"])
def test_history_bytes_are_counted(make_cfg, fill):
    """One cluster per batch: every node is pushed once an epoch per layer >= 1, pulls are the
    clusters' out-of-cluster in-neighbours (the probe `pulled_rows`; what a batch's O is, the unit test above holds),
    and the fill pass pulls every batch's [B | O] rows of layers >= 1 it reads and pushes N rows."""
    layers, hidden, parts = 3, 16, 6
    cfg = make_cfg("method=gas", f"method.num_parts={parts}", "method.batch_size=1", f"method.fill_history={fill}",
                   *DATASETS["synthetic"], "model=sage", f"layers={layers}", "workers=1", f"hidden={hidden}")
    path, record = run_ok(cfg)
    n, epochs = record["graph"]["nodes"], cfg["epochs"]
    rank = record["summary"]["per_rank"][0]
    row = hidden * 4
    got = record["comm"]["bytes_by_category"]
    assert got["history_push"] == epochs * n * (layers - 1) * row
    # every epoch walks every cluster once, so its pulled rows are the same every epoch
    assert rank["pulled_rows"] % epochs == 0
    per_epoch = rank["pulled_rows"] // epochs
    assert got["history_pull"] == epochs * per_epoch * (layers - 1) * row
    fills = epochs if fill == "epoch" else 0
    assert rank["history_fills"] == fills
    # fill: layer 0's outputs pushed (N rows), then layer 1 reads [B | O] of every batch and pushes N
    assert got.get("history_fill", 0) == fills * (2 * n + (n + per_epoch)) * row
    assert [h["comm_bytes"] for h in record["history"]] == [(n * (layers - 1) + per_epoch * (layers - 1)) * row
                                                            + (2 * n + n + per_epoch) * row * (fills > 0)] * epochs
    assert rank["history_bytes"] == n * (layers - 1) * row
    assert rank["history_on"] == "host"


@pytest.mark.fast
def test_one_process_whatever_workers_says_and_bad_batches_are_one_line(make_cfg):
    """pyg_autoscale trains on one device: workers=2 runs one process (as `single`), the record says 1."""
    from benchmarks.run.record import processes_of
    run = check(make_cfg("method=gas", "workers=2"))
    assert run.method_cls.single_process and processes_of(run) == 1
    with pytest.raises(UserError, match=r"method.batch_size=8 exceeds method.num_parts=4") as e:
        check(make_cfg("method=gas", "workers=1", "method.num_parts=4", "method.batch_size=8"))
    assert "\n" not in str(e.value)
