"""PipeGCN held to its definition (the authors' feature buffer): without pipelining it is the exact
method; pipelined, every halo block a layer uses (rows forward, gradients backward) is bit for bit the
one its owner sent one epoch earlier (zeros at epoch 0, or epoch 0's own with epoch0=sync), the
forward rows are the owner's undropped layer input of that epoch, and the layer projects them with
its weights of this epoch; smoothing follows its recursion; the bytes are the layer inputs' for
layers >= 1 and layer 0's inputs cross once."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core.comm import Pending
from benchmarks.base.errors import UserError
from benchmarks.run.config import check
from benchmarks.run.method import method_defaults
from benchmarks.core.models import build_model
from methods.pipegcn import StaleBlock
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_without_pipelining_it_is_the_oracle(make_cfg, data_root, model):
    """pipeline=false (smoothing off): same per-epoch losses and epoch-0 gradients as `single` with
    1-3 workers across the two datasets (layer 0 from the cached halo inputs, exact too)."""
    for dataset, worker_counts in (("citeseer", (1, 3)), ("synthetic", (2, 3))):
        common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3"]
        single, single_grads = oracle(make_cfg, common)
        for workers in worker_counts:
            path, record = run_ok(make_cfg("method=pipegcn", "method.pipeline=false", f"workers={workers}", *common,
                                           "probe_grads=true"))
            assert record["workers"] == workers
            assert_matches(record, path, single, single_grads, f"{dataset}, {workers} workers")


# A pipegcn that watches its own traffic: a digest of every block each rank posts to each peer
# (`Comm.all_to_all_start`, the bytes that leave), and of every block from each peer that a layer
# uses (what `StaleBlock.swap` hands the aggregation forward or the boundary rows backward).
WATCH_PLUGIN = """
import hashlib
import torch.nn.functional as F
from methods import pipegcn


def digest(t):
    return "zeros" if not t.any() else hashlib.sha1(t.detach().cpu().numpy().tobytes()).hexdigest()


def digests(t, counts):
    return [None if not b.numel() else digest(b) for b in t.split(counts)]


class Method(pipegcn.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.epoch, self.sent, self.used, self.inputs, self.weights, self.projected = 0, [], [], [], [], []
        comm, plan, agg = ctx.comm, ctx.plan, self.pipelined
        post = comm.all_to_all_start

        def watched(send, send_counts, recv_counts, category, layer=None, tag=0, **keywords):
            if category.startswith("halo_"):
                self.sent.append((self.epoch, f"{category}/{layer}", digests(send, send_counts)))
            return post(send, send_counts, recv_counts, category, layer, tag, **keywords)
        comm.all_to_all_start = watched
        for block in (b for pair in agg.blocks.values() for b in pair):
            counts = plan.recv_counts if block.name.startswith("halo_fwd") else plan.send_counts

            def use(outgoing, epoch, _swap=block.swap, _name=block.name, _counts=counts):
                got = _swap(outgoing, epoch)
                self.used.append((epoch, _name, digests(got, _counts)))
                return got
            block.swap = use

        dropout, halo_rows, projected_sources = agg.dropout, agg.halo_rows, agg.projected_sources

        def watched_dropout(h, p, training, layer):  # the layer's undropped input, the rows each peer needs
            if training:
                self.inputs.append((self.epoch, f"halo_fwd/{layer}", digests(h.index_select(0, plan.send_idx),
                                                                              plan.send_counts)))
            return dropout(h, p, training, layer)

        def watched_halo_rows(h, layer):
            agg.last_halo = halo_rows(h, layer)
            return agg.last_halo

        def watched_projection(h, weight, layer):  # [local | halo] projected: by which weights?
            out = projected_sources(h, weight, layer)
            exact = out[h.shape[0]:].equal(F.linear(agg.last_halo, weight))
            self.projected.append((self.epoch, layer, digest(weight), exact))
            return out
        agg.dropout, agg.halo_rows, agg.projected_sources = watched_dropout, watched_halo_rows, watched_projection

    def train_epoch(self, epoch):
        self.epoch = epoch
        self.weights.append([digest(layer.weight if hasattr(layer, "weight") else layer.lin_l.weight)
                             for layer in self.ctx.model.layers])
        return super().train_epoch(epoch)

    def probes(self):
        return {**super().probes(), "sent": self.sent, "used": self.used, "inputs": self.inputs,
                "weights": self.weights, "projected": self.projected}
"""


@pytest.mark.parametrize("model, epoch0", [("sage", "zeros"), ("gat", "sync")])
def test_pipelined_blocks_are_their_owners_inputs_from_one_epoch_before_projected_with_this_epochs_weights(
        make_cfg, write_plugins, model, epoch0):
    write_plugins({"pipegcn_watch": WATCH_PLUGIN})
    epochs, workers = 4, 3
    cfg = make_cfg("method=pipegcn", f"method.epoch0={epoch0}", f"model={model}", f"workers={workers}",
                   f"epochs={epochs}", "layers=3", "dropout=0.5", *DATASETS["synthetic"])
    cfg["method"]["name"] = "pipegcn_watch"
    _, record = run_ok(cfg)
    ranks = record["summary"]["per_rank"]
    sent = {(r["rank"], epoch, name): blocks for r in ranks for epoch, name, blocks in r["sent"]}
    names = [f"halo_{d}/{layer}" for layer in (1, 2) for d in ("fwd", "bwd")]
    checked = 0
    for r in ranks:
        q = r["rank"]
        assert sorted((epoch, name) for epoch, name, _ in r["used"]) == sorted(
            (epoch, name) for epoch in range(epochs) for name in names)
        for epoch, name, blocks in r["used"]:
            for p, block in enumerate(blocks):
                if block is None:  # nothing from p (itself, or no halo rows of p)
                    continue
                if epoch == 0 and epoch0 == "zeros":
                    assert block == "zeros", (q, p, name)
                else:  # epoch t uses what p sent at t - 1 (epoch 0 with sync: its own exchange)
                    assert block == sent[p, max(epoch - 1, 0), name][q] != "zeros", (q, p, epoch, name)
                    checked += 1
        ages = [None if epoch0 == "zeros" else 0] + [1] * (epochs - 1)
        assert r["staleness"]["by_epoch"] == ages
        # a wait per block and epoch after epoch 0; with sync, epoch 1 uses epoch 0's block, already there
        assert r["sync"]["waits"] == len(names) * (epochs - 1 - (epoch0 == "sync")) and r["sync"]["critical_path_s"] > 0
        assert {"halo_fwd", "halo_bwd", "halo_inputs"} <= r["comm_blocked_s_by_category"].keys()
    assert checked > 0
    # The rows moved on between epochs: an equal digest above is staleness, not a constant.
    assert sent[0, 1, "halo_fwd/1"] != sent[0, 2, "halo_fwd/1"]

    # What is sent forward is the owner's layer input of that epoch, undropped (the receiver drops it
    # out: halo_dropout=receiver); so a block used at t is its owner's input of t - 1.
    for r in ranks:
        inputs = {(epoch, name): blocks for epoch, name, blocks in r["inputs"]}
        for (rank, epoch, name), blocks in sent.items():
            if rank == r["rank"] and name.startswith("halo_fwd"):
                assert blocks == inputs[epoch, name], (rank, epoch, name)
    # ... and a layer projects it with the weights of the epoch that uses it, not those of t - 1.
    projections = 0
    for r in ranks:
        weights = r["weights"]  # per epoch, each layer's weight at the start of its step
        for epoch, layer, weight, exact in r["projected"]:
            assert exact and weight == weights[epoch][layer], (r["rank"], epoch, layer)
            if epoch:
                assert weight != weights[epoch - 1][layer]
            projections += 1
    assert projections >= len(ranks) * epochs * (1 if model == "sage" else 2)

    # Bytes (all ranks): the layer inputs' rows and gradients for layers >= 1 every epoch (wider than
    # full_halo's where a layer projects first); layer 0's input rows once, never its projected rows.
    g, halo = record["graph"], sum(record["partition"]["halo_nodes_per_rank"])
    net = build_model(model, g["features"], cfg["hidden"], g["classes"], 3, 0.0, cfg["seed"])
    by_layer = {}
    for r in ranks:
        for key, b in r["comm_bytes_by_layer"].items():
            by_layer[key] = by_layer.get(key, 0) + b
    want = {f"halo_{d}/{layer}": epochs * halo * cfg["hidden"] * 4
            for layer in range(1, len(net.exchanges())) for d in ("fwd", "bwd")}
    assert {k: b for k, b in by_layer.items() if k.startswith("halo")} == {
        **want, "halo_inputs/0": halo * g["features"] * 4}
    params = sum(t.numel() for t in net.parameters()) * 4
    per_epoch = sum(want.values()) // epochs + workers * params
    assert [h["comm_bytes"] for h in record["history"]] == [per_epoch + halo * g["features"] * 4] + [per_epoch] * 3


def loopback(t: torch.Tensor) -> Pending:
    """A post whose wait returns what was posted (one rank talking to itself)."""
    return Pending(t.clone(), [])


def test_smoothing_follows_its_recursion():
    """A constant block x: after k receipts the smoothed block is (1 - gamma^k) x (S_0 = 0, no bias
    correction). gamma = 0 is the unsmoothed block. Pipelined, receipt k is used at swap k + 1;
    not pipelined, at swap k."""
    x, gamma = torch.tensor([[1.0, -2.0], [4.0, 0.5]]), 0.9
    for pipeline, receipts in ((True, 0), (False, 1)):
        block = StaleBlock(loopback, 2, "halo_fwd/1", pipeline=pipeline, smooth=True, gamma=gamma)
        for k in range(receipts, receipts + 6):
            torch.testing.assert_close(block.swap(x, k), (1 - gamma ** k) * x)
    plain, zero_gamma = (StaleBlock(loopback, 2, "halo_bwd/1", smooth=s, gamma=0.0) for s in (False, True))
    for epoch in range(4):
        y = torch.randn(2, 2)
        assert torch.equal(plain.swap(y, epoch), zero_gamma.swap(y, epoch))


def test_options_aliases_and_a_bad_gamma(make_cfg):
    assert method_defaults("pipegcn") == {"pipeline": True, "smooth_features": False, "smooth_grads": False,
                                          "gamma": 0.95, "epoch0": "zeros", "halo_dropout": "receiver",
                                          "layer0": "precomputed"}
    for alias, smoothing in (("pipegcn_f", (True, False)), ("pipegcn_g", (False, True)),
                             ("pipegcn_gf", (True, True))):
        options = check(make_cfg(f"method={alias}")).method
        assert (options.smooth_features, options.smooth_grads) == smoothing and options.pipeline
    with pytest.raises(UserError,
                       match=r"^method.gamma=1 must be a number in \[0, 1\) \(the smoothing.s decay\)$") as error:
        check(make_cfg("method=pipegcn", "method.gamma=1"))
    assert "\n" not in str(error.value)
