"""The paper presets run the regimes their published rows record (`reference.compare` over each preset's runs,
composed and checked, not run). In the full tier only: composing every run of two paper presets takes about
15 s, a quarter of `make test-fast`'s minute (tests/analysis/test_reference.py holds the rest, fast)."""
from __future__ import annotations

from tests.analysis.test_reference import assert_never_over_claims, compare, preset_records


def test_the_paper_presets_run_the_regimes_their_rows_record():
    cmp = compare(preset_records("planetoid_baselines_full"))
    assert_never_over_claims(cmp)
    gcn = cmp[cmp["source"].str.startswith("arXiv 1609.02907")].set_index("paper_dataset")
    for dataset in ("Cora", "CiteSeer", "PubMed"):  # the paper's whole regime, but for the layers' bias
        assert gcn.loc[dataset, "reproduction"] == "scaled-down"
        assert gcn.loc[dataset, "differs"] == "model.bias ?≠false"
    gat = cmp[cmp["source"] == "arXiv 1710.10903 (GAT paper)"].set_index("paper_dataset")
    assert gat.loc["Cora", "differs"] == "model.projection_dropout ?≠0.6"
    assert gat.loc["PubMed", "differs"] == "model.out_heads ?≠8, model.projection_dropout ?≠0.6"
    assert (gat["unknown"] == "").all()
    sage = cmp[cmp["source"].str.contains("graphsage")].iloc[0]
    assert sage["differs"] == "model.aggregator ?≠gcn"

    cmp = compare(preset_records("ogb_products_full"))
    assert_never_over_claims(cmp)
    one = cmp[cmp["workers"] == 1].set_index(["paper_model", "paper_method"])["reproduction"]
    for row in [("GraphSAGE", "full-batch single machine"), ("GCN", "full-batch single machine"),
                ("GraphSAGE", "neighbour sampling"), ("GraphSAGE (ClusterGCN, SAGE aggr)", "Cluster-GCN")]:
        assert one[row] == "full", row
    saint = cmp[(cmp["workers"] == 1) & (cmp["paper_method"] == "GraphSAINT")].iloc[0]
    assert saint["reproduction"] == "scaled-down" and saint["differs"] == "method.steps_per_epoch ?≠30"
    # a row is set beside the run at its own worker count; without one, the 4-worker run is scaled-down
    four = compare([r for r in preset_records("ogb_products_full")
                    if r["workers"] == 4 and r["method"] == "cluster_gcn"])
    assert list(four["reproduction"]) == ["scaled-down"]
    assert four["differs"].iloc[0] == "workers 4≠1, method.num_parts 3750≠15000"
