"""A method that resamples its halo every epoch (BNS-GCN's boundary sampling) is a few lines on the
runtime: `FullGraphMethod.aggregator_for(epoch)` gives each step its own aggregator, `keep_halo`
restricts the adjacency and plan, and an exchange with nothing to send sends nothing. Real gloo
ranks through `benchmarks.run.runner.run`, with throwaway plugins."""
from __future__ import annotations

import time

import pytest

from benchmarks.core.models import build_model
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC

# BNS-GCN's step with keep probability KEEP: a fresh halo sample every epoch, the same on all ranks.
RESAMPLING_PLUGIN = """
from benchmarks.core.aggregation import HaloAggregator, keep_halo, keep_with_probability
from benchmarks.families.full_graph import FullGraphMethod

KEEP = {keep}


class Method(FullGraphMethod):
    kept = None

    def aggregator_for(self, epoch):
        ctx = self.ctx
        adj, plan = keep_halo(ctx.part, ctx.adj, ctx.plan, keep_with_probability(KEEP, ctx.cfg.seed, epoch))
        self.kept = (self.kept or []) + [sum(plan.recv_counts)]
        return HaloAggregator(adj, plan, ctx.comm, recompute=ctx.recompute)

    def probes(self):
        return {{"kept_halo_per_epoch": self.kept}}
"""

# The definition of keeping no halo node: each part's own edges, on the global degrees.
CUT_EDGES_DROPPED_PLUGIN = """
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import LocalAggregator
from benchmarks.core.partition import own_edges


class Method(FullGraphMethod):
    def make_aggregator(self):
        part = self.ctx.part
        deg = part.deg[:part.num_local]
        return LocalAggregator(LocalAdjacency(*own_edges(part), deg, deg), self.ctx.comm, recompute=self.ctx.recompute)
"""

PLUGINS = {"halo_keep_all": RESAMPLING_PLUGIN.format(keep=1.0), "halo_keep_none": RESAMPLING_PLUGIN.format(keep=0.0),
           "halo_keep_half": RESAMPLING_PLUGIN.format(keep=0.5), "cut_edges_dropped": CUT_EDGES_DROPPED_PLUGIN}


@pytest.fixture
def plugins(write_plugins):
    return write_plugins(PLUGINS)


COMMON = ["model=gcn", "workers=3", "epochs=3", "partitioner=random", "dist_timeout_s=120", *SMALL_SYNTHETIC]


def run_plugin(make_cfg, name):
    cfg = make_cfg("method=full_halo", *COMMON)
    cfg["method"] = {"name": name}  # full_halo's options (layer0) are not the plugin's
    start = time.monotonic()
    _, record = run(cfg)
    assert record["status"] == "ok", record.get("traceback")
    assert time.monotonic() - start < 100  # nothing waited for the collective timeout
    return cfg, record


def losses(record):
    return [h["train_loss"] for h in record["history"]]


def assert_halo_bytes(cfg, record):
    """Each kept halo row crosses once per layer forward, and back on layers whose rows need a gradient."""
    g = record["graph"]
    model = build_model("gcn", g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0, cfg["seed"])
    kept = sum(sum(r["kept_halo_per_epoch"]) for r in record["summary"]["per_rank"])
    got = record["comm"]["bytes_by_category"]
    assert got.get("halo_fwd", 0) == kept * sum(width * 4 for width, _ in model.exchanges())
    assert got.get("halo_bwd", 0) == kept * sum(width * 4 for width, grad in model.exchanges() if grad)


def test_resampling_with_every_halo_node_kept_is_full_halo(make_cfg, plugins):
    _, exact = run(make_cfg("method=full_halo", *COMMON))
    cfg, record = run_plugin(make_cfg, "halo_keep_all")
    assert losses(record) == pytest.approx(losses(exact), rel=1e-6)
    for category in ("halo_fwd", "halo_bwd"):
        assert record["comm"]["bytes_by_category"][category] == exact["comm"]["bytes_by_category"][category]
    assert_halo_bytes(cfg, record)


def test_resampling_with_no_halo_node_kept_sends_no_halo_and_drops_the_cut_edges(make_cfg, plugins):
    cfg, record = run_plugin(make_cfg, "halo_keep_none")
    assert not {"halo_fwd", "halo_bwd"} & record["comm"]["bytes_by_category"].keys()
    assert_halo_bytes(cfg, record)
    _, dropped = run_plugin(make_cfg, "cut_edges_dropped")
    assert losses(record) == pytest.approx(losses(dropped), rel=1e-6)


def test_resampling_half_the_halo_sends_exactly_the_kept_rows(make_cfg, plugins):
    cfg, record = run_plugin(make_cfg, "halo_keep_half")
    per_rank = [r["kept_halo_per_epoch"] for r in record["summary"]["per_rank"]]
    assert len({tuple(k) for k in per_rank}) > 1 or len(set(per_rank[0])) > 1  # a new draw, rank by rank
    assert_halo_bytes(cfg, record)
