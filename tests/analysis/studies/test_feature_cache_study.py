"""The feature-cache study's table from handmade records: hit rate over every rank's remote input
rows, feature bytes per epoch over all ranks, and the ratio to the same dataset's run without a cache."""
from __future__ import annotations

from analysis.studies import feature_cache


def record(fraction, policy, hits, misses, feature_bytes, epochs=2, dataset="cora"):
    ranks = [{"cache_hits": h, "cache_misses": m, "cache_rows": 10 * i, "cache_bytes": 100 * i}
             for i, (h, m) in enumerate(zip(hits, misses))]
    totals = {"feature_request": feature_bytes // 4, "feature_fetch": feature_bytes * 3 // 4,
              "cache_fill": 7 if fraction else 0, "grad_allreduce": 5}
    return {"status": "ok", "dataset": dataset, "history": [{}] * epochs,
            "config": {"study": "feature_cache",
                       "method": {"name": "neighbor_sampling", "feature_cache": fraction, "cache_policy": policy}},
            "summary": {"per_rank": ranks},
            "comm": {"bytes_by_category": totals,
                     "bytes_per_epoch_by_category": {c: b / epochs for c, b in totals.items() if c != "cache_fill"}}}


def test_hit_rate_bytes_per_epoch_and_ratio(tmp_path):
    recs = [record(0.0, "degree", [0, 0], [50, 50], 4000), record(0.1, "presample", [30, 20], [20, 30], 2000),
            {"status": "failed", "dataset": "cora", "config": {"method": {}}}]
    rows = feature_cache.table(recs)
    assert [(r["policy"], r["fraction"]) for r in rows] == [("none", 0.0), ("presample", 0.1)]
    none, cached = rows
    assert none["hit_rate"] == 0 and none["feature_bytes"] == 2000 and none["ratio"] == 1
    assert cached["hit_rate"] == 0.5 and cached["feature_bytes"] == 1000 and cached["ratio"] == 0.5
    assert cached["rows"] == 10 and cached["fill_bytes"] == 7
    lines = feature_cache.section(recs, tmp_path)
    assert lines[0] == "## Study: feature cache for neighbour sampling"
    assert any("| cora | presample | 0.10 |" in line for line in lines)
