"""SAR in every mode against the single-process oracle: same losses and gradients for GCN, SAGE and
GAT with 1-3 workers on CiteSeer and a synthetic graph, and its mode's analytic volume. Four workers
run where they change what SAR does: P = 4 is the smallest ring with both kinds of round (r = P/2,
whose send and receive peers coincide, and rounds whose peers differ), run in every mode for GAT
(the attention refetch) on the synthetic graph; and the smallest where `prefetch=2` leaves a shard
waiting."""
from __future__ import annotations

import pytest

from tests.methods.exactness import AT_DROPOUT, DATASETS, analytic_bytes, assert_comm, assert_matches, oracle, run_ok


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_sar_matches_single_in_every_mode(make_cfg, data_root, dataset, model):
    common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3", AT_DROPOUT]
    single, single_grads = oracle(make_cfg, common)
    for mode in ("sar", "sa", "one_shot"):
        for workers in (1, 2, 3, 4) if (dataset, model) == ("synthetic", "gat") else (1, 2, 3):
            label = f"mode={mode}, {workers} workers"
            cfg = make_cfg("method=sar", f"method.mode={mode}", f"workers={workers}", *common, "probe_grads=true")
            path, record = run_ok(cfg)
            assert_matches(record, path, single, single_grads, label)
            assert_comm(record, cfg, analytic_bytes(record, cfg, refetch_attention=mode == "sar"), label)
            if dataset == "citeseer" and workers == 3:
                assert 0 in record["partition"]["halo_nodes_per_rank"]  # a part with no halo at all


@pytest.mark.parametrize("prefetch", [0, 2])
def test_prefetch_depth_does_not_change_the_result(make_cfg, prefetch):
    common = [*DATASETS["synthetic"], "model=gat", "layers=2"]
    single, single_grads = oracle(make_cfg, common)
    # 4 workers: three remote shards, one more than the deepest prefetch
    cfg = make_cfg("method=sar", f"method.prefetch={prefetch}", "workers=4", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, f"prefetch={prefetch}")
    assert_comm(record, cfg, analytic_bytes(record, cfg, refetch_attention=True), f"prefetch={prefetch}")


@pytest.mark.parametrize("kernel", ["native", "messages"])
def test_gat_attention_dropout_matches_single_in_every_mode(make_cfg, kernel):
    """GAT's dropout of the normalised coefficients, keyed by the edge's dataset ids: SAR's fused
    kernel drops them from the weighted sum (not the softmax's sum) and draws the same mask again in
    its rematerialising backward, so every mode equals the oracle; 3 workers on the random partition,
    where most edges cross shards."""
    common = [*DATASETS["synthetic"], "model=gat", "layers=2", AT_DROPOUT, "model.attention_dropout=0.6",
              f"kernel={kernel}"]
    single, single_grads = oracle(make_cfg, common)
    for mode in ("sar", "sa", "one_shot"):
        cfg = make_cfg("method=sar", f"method.mode={mode}", "workers=3", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert_matches(record, path, single, single_grads, f"mode={mode}, kernel={kernel}")
