"""cagnet (CAGNET's 1D algorithm) against the single-process oracle: same per-epoch losses, epoch-0
gradients and accuracies for GCN, SAGE and GAT with 1-4 workers, and exactly its analytic volume per
category: every rank's whole block broadcast to every other rank in every exchanged layer, forward
(`bcast_fwd`) and, where gradients flow, backward (`bcast_bwd`; GAT returns each block's source
gradients to its owner instead, `reduce_bwd`), whatever the halo."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.graph import from_edge_index
from benchmarks.core.models import build_model
from methods.cagnet import _TransposedWeights
from tests.methods.exactness import AT_DROPOUT, DATASETS, assert_comm, assert_matches, oracle, run_ok


def analytic_bytes(record, cfg) -> dict[str, int]:
    """Per epoch, all ranks: P - 1 copies of each of the N rows per exchanged layer and direction."""
    g, p = record["graph"], record["workers"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], heads=cfg["model"].get("heads", 4))
    n = sum(record["partition"]["nodes_per_rank"])
    assert n == g["nodes"]
    backward = "reduce_bwd" if cfg["model"]["name"] == "gat" else "bcast_bwd"
    out = {"bcast_fwd": 0, backward: 0,
           "grad_allreduce": p * sum(t.numel() for t in model.parameters()) * 4}
    for width, needs_grad in model.exchanges():
        out["bcast_fwd"] += (p - 1) * n * width * 4
        if needs_grad:
            out[backward] += (p - 1) * n * width * 4
    return out


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_cagnet_matches_single(make_cfg, model):
    """The synthetic graph, partitioned at random (every pair of parts shares edges). 4 workers: a
    stage whose root is neither neighbour of a rank in the reduce's rounds."""
    common = [*DATASETS["synthetic"], f"model={model}", "layers=3", AT_DROPOUT]
    single, single_grads = oracle(make_cfg, common)
    for workers in (1, 2, 3, 4):
        cfg = make_cfg("method=cagnet", f"workers={workers}", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert record["workers"] == workers
        assert_matches(record, path, single, single_grads, f"{model}, {workers} workers")
        assert_comm(record, cfg, analytic_bytes(record, cfg), f"{model}, {workers} workers")


def test_cagnet_on_a_metis_partition(make_cfg, data_root):
    """CiteSeer by METIS: with 3 parts one part has no halo at all, yet it broadcasts its block and
    receives every other (the volume does not depend on the cut)."""
    common = [*DATASETS["citeseer"], "model=sage", f"data_root={data_root}"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=cagnet", "workers=3", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert 0 in record["partition"]["halo_nodes_per_rank"]
    assert_matches(record, path, single, single_grads, "citeseer, 3 workers")
    assert_comm(record, cfg, analytic_bytes(record, cfg), "citeseer, 3 workers")


@pytest.mark.parametrize("setting", ["kernel=spmm", "kernel=messages", "memory.checkpoint=layer"])
def test_other_kernels_and_checkpointing(make_cfg, setting):
    """GAT and SAGE by torch's CSR kernels and by per-edge messages (the transposed blocks' weights
    come through every kernel), and with every layer recomputed in backward, which broadcasts again."""
    for model in ("sage", "gat"):
        common = [*DATASETS["synthetic"], f"model={model}", "layers=2", setting]
        single, single_grads = oracle(make_cfg, common)
        cfg = make_cfg("method=cagnet", "workers=3", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert_matches(record, path, single, single_grads, f"{model}, {setting}")
        if setting.startswith("memory"):
            assert record["comm"]["bytes_by_category"]["bcast_fwd_recompute"] > 0
        else:
            assert_comm(record, cfg, analytic_bytes(record, cfg), f"{model}, {setting}")


@pytest.mark.fast
@pytest.mark.parametrize("norm", ["gcn", "mean"])
def test_the_transposed_blocks_weights_are_the_reverse_edges(norm):
    """On an undirected graph, the block row's structure reweighted (`_TransposedWeights`) is A^T:
    the product CAGNET's broadcast-based backward needs, from the rank's own block."""
    edges = torch.tensor([[0, 1, 1, 2, 3, 4, 0], [1, 2, 3, 4, 4, 0, 3]])
    g = from_edge_index("g", edges, 5, torch.zeros(5, 1), torch.zeros(5), *[torch.zeros(5, dtype=torch.bool)] * 3, 2)
    deg = g.in_degree()
    adj = LocalAdjacency(g.indptr, g.indices, deg, deg, kernel="spmm")
    eye = torch.eye(5)
    dense = adj.spmm(norm, eye)  # A
    torch.testing.assert_close(_TransposedWeights(adj).spmm(norm, eye), dense.t())
    torch.testing.assert_close(adj.spmm(norm, eye), dense)  # its own weights untouched by the view


def test_gat_attention_dropout_matches_single(make_cfg):
    """GAT's dropout of the normalised coefficients, keyed by the edge's dataset ids: the whole block
    row drops what `single` drops (3 workers, random partition)."""
    common = [*DATASETS["synthetic"], "model=gat", "layers=2", AT_DROPOUT, "model.attention_dropout=0.6"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=cagnet", "workers=3", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, "attention dropout, 3 workers")
