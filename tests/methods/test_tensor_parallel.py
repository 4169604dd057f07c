"""tensor_parallel (generic GNN tensor parallelism, not NeutronTP's decoupled schedule) against the
single-process oracle: same per-epoch losses, epoch-0 gradients and accuracies for GCN, SAGE and GAT
with 1-4 workers, and exactly its analytic volume per category: in every exchanged layer two layout switches forward
(`layout_fwd`) and, where gradients flow, two backward (`layout_bwd`), each moving every rank's rows
less their own slice; GAT adds the logits' all-gather and its reverse (`logits_fwd`, `logits_bwd`)."""
from __future__ import annotations

import pytest

from analysis import costmodel
from benchmarks.core.models import build_model
from benchmarks.base.traffic import Rank
from methods.tensor_parallel import column_slices
from tests.methods.exactness import AT_DROPOUT, DATASETS, assert_comm, assert_matches, oracle, run_ok


def slices(width: int, world: int) -> list[int]:
    """Each rank's columns: equal, the first width mod P one wider (methods/tensor_parallel.py)."""
    return [width // world + (q < width % world) for q in range(world)]


def analytic_bytes(record, cfg) -> dict[str, int]:
    """Per epoch, all ranks. A switch rows -> columns sends n_i (d - d_i) from rank i, columns -> rows
    (N - n_i) d_i: both together, summed, 2 N d - 2 sum_i n_i d_i."""
    g, p = record["graph"], record["workers"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], heads=cfg["model"].get("heads", 4))
    nodes = record["partition"]["nodes_per_rank"]
    n = sum(nodes)
    out = {"layout_fwd": 0, "layout_bwd": 0, "grad_allreduce": p * sum(t.numel() for t in model.parameters()) * 4}
    for layer, (width, needs_grad) in zip(model.layers, model.exchanges()):
        pair = sum(n_i * (width - d_i) + (n - n_i) * d_i for n_i, d_i in zip(nodes, slices(width, p))) * 4
        out["layout_fwd"] += pair
        out["layout_bwd"] += pair if needs_grad else 0
        heads = getattr(layer, "heads", None)
        if heads:
            for category in ("logits_fwd", "logits_bwd"):
                out[category] = out.get(category, 0) + (p - 1) * n * 2 * heads * 4
    return out


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_tensor_parallel_matches_single(make_cfg, model):
    """The synthetic graph, partitioned at random. Hidden 16 over 3 ranks: slices of 6, 5 and 5
    columns, GAT's 4 heads of 4 channels cut across heads."""
    common = [*DATASETS["synthetic"], f"model={model}", "layers=3", AT_DROPOUT]
    single, single_grads = oracle(make_cfg, common)
    for workers in (1, 2, 3, 4):
        cfg = make_cfg("method=tensor_parallel", f"workers={workers}", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert record["workers"] == workers
        assert_matches(record, path, single, single_grads, f"{model}, {workers} workers")
        assert_comm(record, cfg, analytic_bytes(record, cfg), f"{model}, {workers} workers")


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_a_layer_narrower_than_the_ranks(make_cfg, model):
    """3 classes over 4 ranks: the output layer gives one rank no column; it still takes part in
    every switch (and sends nothing of its own slice)."""
    common = [*DATASETS["synthetic"], "dataset.classes=3", f"model={model}", "layers=2"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=tensor_parallel", "workers=4", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, f"{model}, 3 classes, 4 workers")
    assert_comm(record, cfg, analytic_bytes(record, cfg), f"{model}, 3 classes, 4 workers")


@pytest.mark.parametrize("setting", ["kernel=spmm", "kernel=messages", "memory.checkpoint=layer"])
def test_other_kernels_and_checkpointing(make_cfg, setting):
    """GAT's softmax by torch's path and by per-edge messages (not the fused native one), SAGE by
    both, and every layer recomputed in backward, which switches layouts again."""
    for model in ("sage", "gat"):
        common = [*DATASETS["synthetic"], f"model={model}", "layers=2", setting]
        single, single_grads = oracle(make_cfg, common)
        cfg = make_cfg("method=tensor_parallel", "workers=3", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert_matches(record, path, single, single_grads, f"{model}, {setting}")
        if setting.startswith("memory"):
            assert record["comm"]["bytes_by_category"]["layout_fwd_recompute"] > 0
        else:
            assert_comm(record, cfg, analytic_bytes(record, cfg), f"{model}, {setting}")


@pytest.mark.fast
def test_column_slices_cover_the_width_evenly():
    for width in (1, 3, 7, 16, 64):
        for world in (1, 2, 3, 4, 8):
            cuts = column_slices(width, world)
            assert cuts[0][0] == 0 and cuts[-1][1] == width
            assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
            assert [b - a for a, b in cuts] == slices(width, world)
            assert max(b - a for a, b in cuts) - min(b - a for a, b in cuts) <= 1


@pytest.mark.fast
def test_the_traffic_hook_states_the_switches_per_rank():
    """Equal parts, widths the ranks divide: the hook's bytes summed over ranks are the counted ones."""
    model = build_model("sage", 32, 16, 4, 3, 0.0, 0)
    ranks = [Rank(100, 1000, 40, 3, 4)] * 4
    stated = {}
    for rank in ranks:
        for t in costmodel.traffic("tensor_parallel", {}, model, rank):
            stated[t.category] = stated.get(t.category, 0) + t.bytes
    n, p = 400, 4
    widths = [(w, g) for w, g in model.exchanges()]
    assert stated["layout_fwd"] == sum(2 * n * w * (p - 1) / p * 4 for w, _ in widths)
    assert stated["layout_bwd"] == sum(2 * n * w * (p - 1) / p * 4 for w, g in widths if g)


def test_gat_attention_dropout_matches_single(make_cfg):
    """GAT's dropout of the normalised coefficients, keyed by the edge's dataset ids: every rank drops
    the same coefficients of the whole graph, those `single` drops (3 workers, random partition)."""
    common = [*DATASETS["synthetic"], "model=gat", "layers=2", AT_DROPOUT, "model.attention_dropout=0.6"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=tensor_parallel", "workers=3", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, "attention dropout, 3 workers")
