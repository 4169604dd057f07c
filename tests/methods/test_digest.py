"""DIGEST, DIGEST-A, PSGD-PA and LLCG held to their definitions: what is fresh, what is stale, what
is dropped, and exactly which bytes move."""
from __future__ import annotations

import pytest

from benchmarks.errors import UserError
from benchmarks.runner import run
from tests.conftest import SMALL_SYNTHETIC
from tests.methods.exactness import DATASETS, assert_matches, oracle, param_bytes, run_ok

# PSGD-PA's and LLCG's former regime: one full-partition step per round (tests/methods/test_llcg.py
# holds the neighbour-sampled default).
FULL_PARTITION = ["method.local=full", "method.local_steps=1"]

# A DIGEST whose every step also checks itself: at a sync step its forward must equal the exact
# halo forward (same parameters, computed beside it through the shared HaloAggregator); between
# syncs its halo tables must be exactly the rows of the last sync.
PROBE_PLUGIN = """
import torch
from benchmarks.aggregation import HaloAggregator
from methods import digest


class Method(digest.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.exact = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, categories=("probe", "probe"))
        self.sync_diffs, self.stale_tables_kept, self.saved = [], [], None

    def before_forward(self, step):
        super().before_forward(step)
        model, x = self.ctx.model, self.ctx.part.x
        with torch.no_grad():
            if self.halo.refresh:
                got, want = model(x, self.aggregator), model(x, self.exact)
                self.sync_diffs.append((got - want).abs().max().item())
                self.saved = {k: v.clone() for k, v in self.halo.tables.items()}
            else:
                model(x, self.aggregator)
                self.stale_tables_kept.append(all(torch.equal(self.halo.tables[k], v) for k, v in self.saved.items()))

    def probes(self):
        return {**super().probes(), "sync_diffs": self.sync_diffs, "stale_tables_kept": self.stale_tables_kept}
"""


@pytest.fixture
def probe_plugin(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "digest_probe.py").write_text(PROBE_PLUGIN)
    monkeypatch.setenv("GNNBENCH_METHODS_PATH", str(folder))


def training_categories(record) -> dict[str, int]:
    return {c: b for c, b in record["comm"]["bytes_by_category"].items() if c not in ("setup", "eval", "probe")}


def test_digest_with_one_worker_is_single(make_cfg, data_root):
    common = [*DATASETS["citeseer"], "model=gcn", f"data_root={data_root}"]
    single, single_grads = oracle(make_cfg, common)
    path, record = run_ok(make_cfg("method=digest", "method.sync_every=1", "workers=1", *common, "probe_grads=true"))
    assert_matches(record, path, single, single_grads, "digest, 1 worker")


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_digest_forward_is_exact_at_syncs_and_stale_between(make_cfg, probe_plugin, model):
    cfg = make_cfg("method=digest", "method.sync_every=3", f"model={model}", "workers=3", "epochs=7",
                   *DATASETS["synthetic"])
    cfg["method"]["name"] = "digest_probe"
    _, record = run_ok(cfg)
    for rank in record["summary"]["per_rank"]:
        assert len(rank["sync_diffs"]) == 3  # steps 0, 3, 6
        assert max(rank["sync_diffs"]) < 1e-5
        assert rank["stale_tables_kept"] == [True] * 4


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_digest_bytes_are_the_stale_sync_volume_and_nothing_between_syncs(make_cfg, model):
    cfg = make_cfg("method=digest", "method.sync_every=4", f"model={model}", "workers=4", "epochs=9",
                   *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    halo = sum(record["partition"]["halo_nodes_per_rank"])
    grads = record["workers"] * param_bytes(record, cfg)
    syncs = 3  # steps 0, 4, 8
    inputs = halo * record["graph"]["features"] * 4  # layer 0, once
    hidden = halo * cfg["hidden"] * 4 * (cfg["layers"] - 1)  # deeper layers, every sync
    assert training_categories(record) == {"halo_inputs": inputs, "stale_sync": syncs * hidden,
                                           "grad_allreduce": 9 * grads}
    per_epoch = [h["comm_bytes"] for h in record["history"]]
    assert per_epoch == [grads + inputs + hidden, grads, grads, grads, grads + hidden, grads, grads, grads,
                         grads + hidden]


def test_psgd_pa_sends_only_parameters(make_cfg):
    cfg = make_cfg("method=psgd_pa", "method.avg_every=2", "workers=3", "epochs=6", *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    assert training_categories(record) == {"param_avg": 3 * record["workers"] * param_bytes(record, cfg)}


def test_psgd_pa_with_one_worker_is_single(make_cfg, data_root):
    common = [*DATASETS["citeseer"], "model=sage", f"data_root={data_root}"]
    single, single_grads = oracle(make_cfg, common)
    path, record = run_ok(make_cfg("method=psgd_pa", *FULL_PARTITION, "workers=1", *common, "probe_grads=true"))
    assert_matches(record, path, single, single_grads, "psgd_pa, 1 worker")


def test_evaluating_between_averaging_rounds_leaves_training_alone(make_cfg):
    common = ["method=psgd_pa", "method.avg_every=3", "workers=2", "epochs=5", *SMALL_SYNTHETIC]
    _, every = run_ok(make_cfg(*common, "eval_every=1"))
    _, last = run_ok(make_cfg(*common, "eval_every=5"))
    assert [h["train_loss"] for h in every["history"]] == [h["train_loss"] for h in last["history"]]
    assert every["history"][-1]["test_acc"] == last["history"][-1]["test_acc"]


def test_llcg_is_psgd_pa_plus_counted_full_graph_corrections(make_cfg):
    common = ["workers=3", "epochs=4", "method.avg_every=2", *DATASETS["synthetic"]]
    _, psgd = run_ok(make_cfg("method=psgd_pa", *FULL_PARTITION, *common))
    _, none = run_ok(make_cfg("method=llcg", *FULL_PARTITION, "method.correction_steps=0", *common))
    assert [h["train_loss"] for h in none["history"]] == [h["train_loss"] for h in psgd["history"]]
    cfg = make_cfg("method=llcg", *FULL_PARTITION, "method.correction=full", "method.correction_steps=2", *common)
    _, llcg = run_ok(cfg)
    got = training_categories(llcg)
    rounds, steps = 2, 2
    assert got["correction_grad"] == rounds * steps * llcg["workers"] * param_bytes(llcg, cfg)
    assert got["correction_fwd"] > 0 and got["correction_bwd"] > 0
    assert [h["train_loss"] for h in llcg["history"]][2:] != [h["train_loss"] for h in psgd["history"]][2:]


def test_digest_a_with_stragglers_completes_and_records_staleness(make_cfg):
    cfg = make_cfg("method=digest", "method.asynchronous=true", "method.sync_every=2", "workers=3", "epochs=8",
                   "eval_every=4", "straggler_delay_s=[0,0.15,0.03]", "dist_timeout_s=120", *SMALL_SYNTHETIC)
    _, record = run_ok(cfg)
    assert [h["epoch"] for h in record["history"]] == list(range(8))
    assert record["history"][-1]["test_acc"] is not None
    ranks = record["summary"]["per_rank"]
    steps = [r["steps"] for r in ranks]
    assert sum(steps) >= 8 * 3  # an epoch is P updates of the shared model, whoever makes them
    assert steps[0] > steps[1]  # the unslowed worker contributed more than the slowest
    for r in ranks:
        st = r["staleness"]
        assert set(st["halo_rows_by_layer"]) == {"1", "2"}
        assert all(0 <= v["mean"] <= v["max"] for v in st["halo_rows_by_layer"].values())
    assert max(r["staleness"]["model_max"] for r in ranks) > 0  # others updated while a rank computed
    got = training_categories(record)
    assert {"halo_inputs", "stale_push", "param_push", "stale_sync"} <= set(got)
    assert not {"grad_allreduce", "stale_pull", "param_pull"} & set(got)


def test_digest_a_counts_what_digest_counts_for_the_same_exchange(make_cfg):
    """Every byte once, at its sender: a DIGEST-A rank's push into the store is what it sends (its
    boundary rows, once; with 2 ranks exactly the rows DIGEST's sync sends its peer) and a pull is
    what it receives (not counted); its gradient pushed to the parameter server is DIGEST's
    all-reduce share. Per step and rank the bytes agree; DIGEST-A's cold start also pushes (the
    store's first fill) beside the exact exchange both make."""
    common = ["method=digest", "method.sync_every=2", "workers=2", "epochs=6", *DATASETS["synthetic"]]
    _, sync = run_ok(make_cfg(*common))
    _, asyn = run_ok(make_cfg(*common, "method.asynchronous=true"))
    for d, a in zip(sync["summary"]["per_rank"], asyn["summary"]["per_rank"]):
        d_bytes, a_bytes = d["comm_bytes_by_category"], a["comm_bytes_by_category"]
        per_sync, per_step = d_bytes["stale_sync"] // 3, d_bytes["grad_allreduce"] // 6  # syncs at steps 0, 2, 4
        steps = a["steps"]
        assert {c: b for c, b in a_bytes.items() if c not in ("setup", "eval", "probe")} == {
            "halo_inputs": d_bytes["halo_inputs"], "stale_sync": per_sync, "stale_push": -(-steps // 2) * per_sync,
            "param_push": steps * per_step}
    assert sum(a["steps"] for a in asyn["summary"]["per_rank"]) >= 6 * 2  # P updates of the shared model an epoch


@pytest.mark.parametrize("overrides, message", [
    (["method=digest", "method.sync_every=0"], "method.sync_every=0 must be a positive integer"),
    (["method=digest", "method.asynchronous=true", "method.avg_every=2"], "set method.avg_every=null"),
    (["method=psgd_pa", "method.avg_every=null"], "method.avg_every=None must be a positive integer"),
    (["method=llcg", "method.correction_steps=-1"], "method.correction_steps=-1 must be an integer >= 0"),
    (["method=digest", "method.avg_weighting=equal"], "unknown method.avg_weighting 'equal'"),
    (["method=full_halo", "straggler_delay_s=[-1]"], "straggler_delay_s must be a list of seconds"),
])
def test_bad_options_are_named(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        run(make_cfg(*overrides, *SMALL_SYNTHETIC))
