"""DistGNN cd-r held to its definition: at delay 0 the oracle (losses, gradients, evaluation) and
full_halo's volume moved as partial aggregates; at delay r the remote partial aggregates are sent
every r + 1 epochs (bytes / (r + 1)), and in between each layer reuses, bit for bit, the block it
received last (age 0..r); GAT is refused."""
from __future__ import annotations

import pytest

from benchmarks.run.config import check
from benchmarks.base.errors import UserError
from tests.methods.exactness import DATASETS, analytic_bytes, assert_comm, assert_matches, oracle, run_ok

RENAMED = {"halo_fwd": "partial_agg", "halo_bwd": "partial_agg_grad"}


def partial_bytes(record, cfg) -> dict[str, int]:
    """full_halo's analytic volume per epoch, under the partial aggregates' categories."""
    return {RENAMED.get(c, c): n for c, n in analytic_bytes(record, cfg).items()}


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_delay_zero_is_the_oracle(make_cfg, data_root, model):
    for dataset, worker_counts in (("citeseer", (1, 3)), ("synthetic", (2, 4))):
        common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3"]
        single, single_grads = oracle(make_cfg, common)
        for workers in worker_counts:
            label = f"{dataset}, {workers} workers"
            cfg = make_cfg("method=distgnn", "method.delay=0", f"workers={workers}", *common, "probe_grads=true")
            path, record = run_ok(cfg)
            assert record["workers"] == workers
            assert_matches(record, path, single, single_grads, label)
            assert_comm(record, cfg, partial_bytes(record, cfg), label)
            if dataset == "citeseer" and workers == 3:
                assert 0 in record["partition"]["halo_nodes_per_rank"]  # a part with no halo at all


WATCH_PLUGIN = """
import hashlib
from methods import distgnn


class Method(distgnn.Method):
    def make_aggregator(self):
        agg = super().make_aggregator()
        self.used, remote = [], agg.remote_aggregates

        def watched(h, norm, layer):
            got = remote(h, norm, layer)
            self.used.append((agg.epoch, layer, hashlib.sha1(got.detach().numpy().tobytes()).hexdigest()))
            return got
        agg.remote_aggregates = watched
        return agg

    def probes(self):
        return {**super().probes(), "used": self.used}
"""


def test_delayed_aggregates_are_sent_every_r_plus_one_epochs_and_reused_in_between(make_cfg, write_plugins):
    write_plugins({"distgnn_watch": WATCH_PLUGIN})
    delay, epochs, layers = 2, 6, 3
    common = [*DATASETS["synthetic"], "model=sage", "workers=3", f"epochs={epochs}", f"layers={layers}",
              "dropout=0.5"]
    cfg = make_cfg("method=distgnn", f"method.delay={delay}", *common)
    cfg["method"]["name"] = "distgnn_watch"
    _, record = run_ok(cfg)
    sending = [e for e in range(epochs) if e % (delay + 1) == 0]
    # Bytes: full_halo's volume at the sending epochs only; the gradient all-reduce every epoch.
    want = partial_bytes(record, cfg)
    got = record["comm"]["bytes_by_category"]
    for category in RENAMED.values():
        assert got[category] == len(sending) * want[category], category
    assert got["grad_allreduce"] == epochs * want["grad_allreduce"]
    per_epoch = [h["comm_bytes"] for h in record["history"]]
    assert per_epoch == [sum(want.values()) if e in sending else want["grad_allreduce"] for e in range(epochs)]
    # Staleness: ages 0..r, and a stale epoch's block is the one its sending epoch received.
    for r in record["summary"]["per_rank"]:
        assert r["staleness"]["by_epoch"] == [e % (delay + 1) for e in range(epochs)]
        assert r["staleness"]["max"] == delay
        used = {(epoch, layer): digest for epoch, layer, digest in r["used"]}
        assert sorted(used) == [(e, layer) for e in range(epochs) for layer in range(layers)]
        for (epoch, layer), digest in used.items():
            last_sent = epoch - epoch % (delay + 1)
            assert digest == used[(last_sent, layer)], (r["rank"], epoch, layer)
            if epoch in sending and epoch > 0:  # a fresh block, not the previous one resent
                assert digest != used[(epoch - delay - 1, layer)], (r["rank"], epoch, layer)


def test_delay_is_its_approximation_and_zero_its_control(make_cfg):
    """delay > 0 departs from the oracle after the first stale epoch; the exact control is delay=0."""
    common = [*DATASETS["synthetic"], "model=gcn", "layers=2", "workers=2", "epochs=3"]
    _, exact = run_ok(make_cfg("method=distgnn", "method.delay=0", *common))
    _, stale = run_ok(make_cfg("method=distgnn", "method.delay=1", *common))
    losses = [[h["train_loss"] for h in r["history"]] for r in (exact, stale)]
    assert losses[1][0] == pytest.approx(losses[0][0], rel=1e-6)  # epoch 0 sends: exact
    assert losses[1][1] != pytest.approx(losses[0][1], rel=1e-6)  # epoch 1 reuses epoch 0's aggregates
    from benchmarks.run.method import method_class
    assert method_class("distgnn").About.exact_control == {"delay": 0}


def test_attention_is_refused(make_cfg):
    with pytest.raises(UserError, match="GAT"):
        check(make_cfg("method=distgnn", "model=gat"))
