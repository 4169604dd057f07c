"""full_halo against the single-process oracle: same losses and gradients, and exactly the analytic
halo volume, on CiteSeer and on a synthetic graph, for GCN, SAGE and GAT with 1-3 workers
(3: every rank has several peers, and on CiteSeer one part has no halo), and with 8 on CiteSeer: at
dropout 0.5, since every mask is keyed by node, never by rank (benchmarks/draws.py)."""
from __future__ import annotations

import pytest

from tests.methods.exactness import AT_DROPOUT, DATASETS, analytic_bytes, assert_comm, assert_matches, oracle, run_ok


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_full_halo_matches_single(make_cfg, data_root, dataset, model):
    common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3", AT_DROPOUT]
    single, single_grads = oracle(make_cfg, common)
    for workers in (1, 2, 3, 8) if dataset == "citeseer" else (1, 2, 3):
        cfg = make_cfg("method=full_halo", f"workers={workers}", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert record["workers"] == workers
        assert_matches(record, path, single, single_grads, f"{workers} workers")
        assert_comm(record, cfg, analytic_bytes(record, cfg), f"{workers} workers")


def test_batch_norm_statistics_span_all_ranks(make_cfg, data_root):
    common = [*DATASETS["citeseer"], "model=sage", f"data_root={data_root}", "batch_norm=true"]
    single, single_grads = oracle(make_cfg, common)
    cfg = make_cfg("method=full_halo", "workers=3", *common, "probe_grads=true")
    path, record = run_ok(cfg)
    assert_matches(record, path, single, single_grads, "batch norm, 3 workers")
    # Two layers of float64 statistics (sums, squares, count) and their gradients, every epoch, rank.
    hidden = cfg["hidden"]
    assert record["comm"]["bytes_by_category"]["norm"] == cfg["epochs"] * 3 * 2 * 2 * (2 * hidden + 1) * 8
