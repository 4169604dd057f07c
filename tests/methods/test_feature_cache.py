"""Neighbour sampling's feature cache (`method.feature_cache`, docs/sampling.md "Feature cache"): it
changes where input rows come from and nothing else. With the same seed the blocks, the input rows
and the losses are those of the run without a cache, whatever the policy (the pre-sampling leaves
training's random streams alone); the fetched feature bytes are exactly the misses' rows; every remote
node cached fetches nothing. Its bad options are tests/methods/test_neighbor_sampling.py's."""
from __future__ import annotations

import pytest

from tests.methods.exactness import DATASETS, run_ok

# A neighbour-sampling run that records a digest of every step's blocks and input nodes (`sample`)
# and of the input rows the model gets (`fetch`).
DIGEST_PLUGIN = """
import hashlib
from methods import neighbor_sampling as ns


def digest(h, *tensors):
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())


class Method(ns.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.blocks_digest, self.rows_digest = hashlib.sha256(), hashlib.sha256()

    def sample(self, step):
        sampled = super().sample(step)
        local_seeds, blocks, inputs, edges, weight = sampled
        digest(self.blocks_digest, local_seeds, inputs, *[t for b in blocks for t in (b.indptr, b.src, b.col_deg)])
        return sampled

    def fetch(self, sampled):
        batch = super().fetch(sampled)
        digest(self.rows_digest, batch.x)
        return batch

    def probes(self):
        return {**super().probes(), "blocks_digest": self.blocks_digest.hexdigest(),
                "rows_digest": self.rows_digest.hexdigest()}
"""

EPOCHS = 2
COMMON = ["method=neighbor_sampling", "layers=2", "method.fanouts=[4,3]", "method.batch_size=64", "workers=2",
          f"epochs={EPOCHS}", "dropout=0.5", *DATASETS["synthetic"]]


@pytest.fixture
def digest_plugin(write_plugins):
    write_plugins({"ns_digest": DIGEST_PLUGIN})


def cached_run(make_cfg, *overrides, plugin=True):
    cfg = make_cfg(*COMMON, *overrides)
    if plugin:
        cfg["method"]["name"] = "ns_digest"
    return cfg, run_ok(cfg)[1]


def by_category(record) -> dict:
    return {c: b for c, b in record["comm"]["bytes_by_category"].items() if b}


def total(record, key) -> int:
    return sum(r[key] for r in record["summary"]["per_rank"])


def test_cache_changes_only_where_rows_come_from(make_cfg, digest_plugin):
    """Same seed, dropout on: without a cache, with the degree policy and with the pre-sampling one,
    every step's blocks and input rows and every epoch's loss are identical; the sampling traffic
    too (the pre-sampling's is its own category); only feature bytes fall, and the cache's fill is
    outside every epoch's bytes."""
    _, plain = cached_run(make_cfg)
    for policy in ("degree", "presample"):
        cfg, cached = cached_run(make_cfg, "method.feature_cache=0.3", f"method.cache_policy={policy}")
        for a, b in zip(plain["summary"]["per_rank"], cached["summary"]["per_rank"]):
            assert a["blocks_digest"] == b["blocks_digest"], policy
            assert a["rows_digest"] == b["rows_digest"], policy
        assert [h["train_loss"] for h in plain["history"]] == [h["train_loss"] for h in cached["history"]], policy
        assert [h["val_acc"] for h in plain["history"]] == [h["val_acc"] for h in cached["history"]], policy
        p, c = by_category(plain), by_category(cached)
        for cat in ("sample_request", "sample_response", "grad_allreduce"):
            assert p[cat] == c[cat], (policy, cat)
        assert c["feature_fetch"] < p["feature_fetch"] and c["feature_request"] < p["feature_request"], policy
        assert c["cache_fill"] > 0 and ("presample" in c) == (policy == "presample"), policy
        # The fill and the pre-sampling are setup: the epochs' bytes differ by the feature bytes only.
        saved = (p["feature_fetch"] + p["feature_request"]) - (c["feature_fetch"] + c["feature_request"])
        assert sum(h["comm_bytes"] for h in plain["history"]) - sum(h["comm_bytes"] for h in cached["history"]) == saved
        assert "cache_fill" not in cached["comm"]["bytes_per_epoch_by_category"]
        # What the remote inputs were does not depend on the cache; hits and misses split them.
        assert total(plain, "cache_hits") == 0
        assert total(cached, "cache_hits") + total(cached, "cache_misses") == total(plain, "cache_misses")
        assert total(cached, "cache_hits") > 0


def test_fetched_rows_are_the_misses(make_cfg):
    """Every byte once at its sender: the feature rows sent are the misses' rows (fp32), the ids sent
    the misses' ids, plus each variable-size all-to-all's size header ((P - 1) x 8 bytes a rank and
    call, one call per step and direction). The cache holds what it says, filled once."""
    for fraction in (0.0, 0.1, 0.3):
        cfg, record = cached_run(make_cfg, f"method.feature_cache={fraction}", plugin=False)
        ranks = record["summary"]["per_rank"]
        workers, features = record["workers"], record["graph"]["features"]
        headers = sum(r["steps"] for r in ranks) * (workers - 1) * 8
        misses = total(record, "cache_misses")
        got = by_category(record)
        assert got["feature_fetch"] == misses * features * 4 + headers, fraction
        assert got["feature_request"] == misses * 8 + headers, fraction
        nodes = record["graph"]["nodes"]
        for r in ranks:
            assert r["cache_rows"] == min(int(fraction * nodes), nodes - r["nodes"])
            assert r["cache_bytes"] == r["cache_rows"] * (features * 4 + 8)
        if fraction:
            assert got["cache_fill"] >= total(record, "cache_rows") * (features * 4 + 8)


@pytest.mark.parametrize("policy", ["degree", "presample"])
def test_every_remote_node_cached_fetches_nothing(make_cfg, policy):
    cfg, record = cached_run(make_cfg, "method.feature_cache=1.0", f"method.cache_policy={policy}", plugin=False)
    got = by_category(record)
    assert "feature_fetch" not in got and "feature_request" not in got
    assert total(record, "cache_misses") == 0 and total(record, "cache_hits") > 0
    nodes = record["graph"]["nodes"]
    assert [r["cache_rows"] for r in record["summary"]["per_rank"]] == [
        nodes - r["nodes"] for r in record["summary"]["per_rank"]]

