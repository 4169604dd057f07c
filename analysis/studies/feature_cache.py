"""Study `feature_cache` (experiment=feature_cache): neighbour sampling's cache of other ranks' input
features (`method.feature_cache`, `method.cache_policy`; docs/sampling.md, "Feature cache").

Per dataset, policy and cache size (a fraction of the graph's nodes): the rows each rank caches (the
largest rank's, and its MB), the hit rate (remote input rows served from the cache / remote input
rows, summed over ranks and training steps), the feature bytes fetched per epoch (`feature_request` +
`feature_fetch`, all ranks) and their ratio to the same dataset's run without a cache, and the
one-time bytes of filling the cache and of the pre-sampling (`cache_fill`, `presample`: setup,
outside every epoch). Counts, not timings: one seed says it all (sampling draws the same blocks
whatever the cache)."""
from __future__ import annotations

from pathlib import Path

from analysis.markdown import fmt, md_table

FEATURE = ("feature_request", "feature_fetch")


def row(record: dict) -> dict:
    method = record["config"]["method"]
    ranks = record["summary"]["per_rank"]
    by_cat, per_epoch = record["comm"]["bytes_by_category"], record["comm"]["bytes_per_epoch_by_category"]
    hits = sum(r.get("cache_hits", 0) for r in ranks)
    misses = sum(r.get("cache_misses", 0) for r in ranks)
    fraction = float(method.get("feature_cache", 0.0))
    return {"dataset": record["dataset"], "policy": method.get("cache_policy", "degree") if fraction else "none",
            "fraction": fraction, "rows": max(r.get("cache_rows", 0) for r in ranks),
            "cache_bytes": max(r.get("cache_bytes", 0) for r in ranks),
            "hit_rate": hits / (hits + misses) if hits + misses else float("nan"),
            "feature_bytes": sum(per_epoch.get(c, 0) for c in FEATURE),
            "fill_bytes": by_cat.get("cache_fill", 0), "presample_bytes": by_cat.get("presample", 0)}


def table(recs: list[dict]) -> list[dict]:
    """One row per ok record (one seed per point), with `ratio`: feature bytes per epoch against the
    same dataset's run without a cache (None where that run is missing)."""
    rows = [row(r) for r in recs if r["status"] == "ok"]
    base = {r["dataset"]: r["feature_bytes"] for r in rows if r["fraction"] == 0}
    for r in rows:
        b = base.get(r["dataset"])
        r["ratio"] = r["feature_bytes"] / b if b else None
    return sorted(rows, key=lambda r: (r["dataset"], r["fraction"] > 0, r["policy"], r["fraction"]))


def section(recs: list[dict], out_dir: Path) -> list[str]:
    rows = table(recs)
    head = ["dataset", "policy", "cache fraction", "cached rows (largest rank)", "cache MB (largest rank)", "hit rate",
            "feature MB / epoch", "vs no cache", "fill MB (once)", "pre-sampling MB (once)"]
    body = [[r["dataset"], r["policy"], fmt(r["fraction"], 2), r["rows"], fmt(r["cache_bytes"], 2, scale=1e6),
             fmt(r["hit_rate"], 3), fmt(r["feature_bytes"], 3, scale=1e6), fmt(r["ratio"], 3),
             fmt(r["fill_bytes"], 3, scale=1e6), fmt(r["presample_bytes"], 3, scale=1e6)] for r in rows]
    return ["## Study: feature cache for neighbour sampling", "",
            "`python -m benchmarks.commands.sweep experiment=feature_cache`: the partitioned store with each rank "
            "caching other ranks' input features (docs/sampling.md, \"Feature cache\"). Hit rate: remote input "
            "rows read from the cache over all remote input rows (every rank, every step); feature MB per epoch: "
            "`feature_request` + `feature_fetch`, all ranks; fill and pre-sampling: one-time, before training "
            "(the degree policy's fill includes every rank's degrees). Blocks and losses are those of the run "
            "without a cache (the same seed).", "",
            md_table(head, body), ""]
