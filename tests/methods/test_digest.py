"""DIGEST, DIGEST-A, PSGD-PA and LLCG held to their definitions: what is fresh, what is stale, what
is dropped, and exactly which bytes move."""
from __future__ import annotations

import pytest

from benchmarks.base.errors import UserError
from benchmarks.run.runner import run
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
from benchmarks.core.aggregation import HaloAggregator
from methods import digest


class Method(digest.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.exact = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, categories=("probe", "probe"), recompute=ctx.recompute)
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


# A DIGEST that watches its own sync from outside the method: it records every `Comm.all_to_all`
# (blocking) and `all_to_all_start` (posted) call and whether a forward was running, the layer inputs
# each step's forward computed (forward pre-hooks on the layers, exchanged after the step through a
# separate blocking `probe` exchange: the exact halo rows of that step), and the halo table each
# hidden layer aggregated. After every step it finds, for each hidden layer, the age a >= 0 with
# table(t) == exact halo rows of step t - a, bit for bit.
AGE_PLUGIN = """
import torch
from benchmarks.core.aggregation import exchange_rows
from methods import digest


class Method(digest.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.in_forward, self.step, self.calls, self.depth = False, 0, [], 0
        self.inputs, self.fresh, self.used, self.ages = {}, {}, {}, []
        comm = ctx.comm
        for name in ("all_to_all", "all_to_all_start"):
            original = getattr(comm, name)

            def watched(*args, _original=original, _name=name, **kwargs):
                if not self.depth:  # all_to_all posts through all_to_all_start: count the outer call
                    category = args[3] if len(args) > 3 else kwargs.get("category")
                    self.calls.append((self.step, self.in_forward, _name, category))
                self.depth += 1
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.depth -= 1
            setattr(comm, name, watched)
        ctx.model.register_forward_pre_hook(lambda m, a: setattr(self, "in_forward", m.training))  # not evaluation
        ctx.model.register_forward_hook(lambda m, a, o: setattr(self, "in_forward", False))
        for i, layer in enumerate(ctx.model.layers):
            layer.register_forward_pre_hook(lambda m, a, i=i: self.inputs.__setitem__(i, a[0].detach().clone()))
        stale = self.aggregator.sampled  # layers >= 1 (layer 0: layer0_aggregator)
        halo = stale.halo

        def recording(h, layer):
            table = halo(h, layer)
            self.used[layer] = table.clone()
            return table
        stale.halo = recording

    def train_epoch(self, epoch):
        self.step = epoch
        loss = super().train_epoch(epoch)
        self.fresh[epoch] = {i: exchange_rows(h, self.ctx.plan, self.ctx.comm, "probe", i)
                             for i, h in self.inputs.items() if i > 0}
        ages = []
        for layer, table in self.used.items():
            if layer > 0:
                match = [a for a in range(epoch + 1) if torch.equal(table, self.fresh[epoch - a][layer])]
                ages.append(match[0] if match else None)
        self.ages.append(ages)
        return loss

    def probes(self):
        return {**super().probes(), "seen_ages": self.ages, "calls": self.calls}
"""


@pytest.fixture
def probe_plugin(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "digest_probe.py").write_text(PROBE_PLUGIN)
    (folder / "digest_ages.py").write_text(AGE_PLUGIN)
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
    cfg = make_cfg("method=digest", "method.sync=blocking", "method.sync_every=3", f"model={model}", "workers=3",
                   "epochs=7", *DATASETS["synthetic"])
    cfg["method"]["name"] = "digest_probe"
    _, record = run_ok(cfg)
    for rank in record["summary"]["per_rank"]:
        assert len(rank["sync_diffs"]) == 3  # steps 0, 3, 6
        assert max(rank["sync_diffs"]) < 1e-5
        assert rank["stale_tables_kept"] == [True] * 4


@pytest.mark.parametrize("model, dropout", [("gcn", 0.0), ("sage", 0.5), ("gat", 0.0)])
def test_digest_overlapped_uses_rows_aged_1_to_I_and_never_blocks_a_forward(make_cfg, probe_plugin, model, dropout):
    """sync=overlapped: the rows a sync step computes are posted, not waited for, and serve the next
    I steps (age 1..I, checked bit for bit against that step's exact halo rows); after the cold
    start no forward starts a blocking exchange, and the only exchanges a forward starts are the
    posts of sync steps. sync=blocking, watched the same way, does block (age 0 at syncs)."""
    epochs, every = 8, 3
    common = ["method.sync_every=3", f"model={model}", "workers=3", f"epochs={epochs}", f"dropout={dropout}",
              *DATASETS["synthetic"]]
    for sync, ages in [("overlapped", [0, 1, 2, 3, 1, 2, 3, 1]), ("blocking", [0, 1, 2, 0, 1, 2, 0, 1])]:
        cfg = make_cfg("method=digest", f"method.sync={sync}", *common)
        cfg["method"]["name"] = "digest_ages"
        hidden_layers = cfg["layers"] - 1  # one stale table each
        _, record = run_ok(cfg)
        for rank in record["summary"]["per_rank"]:
            assert rank["seen_ages"] == [[a] * hidden_layers for a in ages], sync
            assert rank["halo_age"]["by_step"] == ages  # the method's own record agrees
            assert rank["halo_age"]["by_layer"]["1"]["min"] == (1 if sync == "overlapped" else 0)
            assert rank["halo_age"]["by_layer"]["1"]["max"] == (every if sync == "overlapped" else every - 1)
            in_forward = [(step, name, cat) for step, fwd, name, cat in rank["calls"] if fwd]
            blocking = [(step, cat) for step, name, cat in in_forward if name == "all_to_all" and step > 0]
            posted = [(step, cat) for step, name, cat in in_forward if name == "all_to_all_start"]
            assert sorted({(step, cat) for step, name, cat in in_forward if step == 0}) == [
                (0, "halo_inputs"), (0, "stale_sync")]  # the cold start
            if sync == "overlapped":
                assert blocking == []
                assert posted == [(3, "stale_sync")] * hidden_layers + [(6, "stale_sync")] * hidden_layers
                assert rank["sync"]["waits"] == 2 * hidden_layers and rank["sync"]["blocking_exchanges"] == 0
                assert rank["sync"]["critical_path_s"] == pytest.approx(rank["sync"]["wait_s"])
            else:
                assert blocking == [(3, "stale_sync")] * hidden_layers + [(6, "stale_sync")] * hidden_layers
                assert posted == []
                assert rank["sync"]["waits"] == 0 and rank["sync"]["blocking_exchanges"] == 2 * hidden_layers


def test_digest_sync_modes_send_the_same_bytes_at_the_same_steps(make_cfg):
    common = ["method=digest", "method.sync_every=2", "model=sage", "workers=3", "epochs=6", *DATASETS["synthetic"]]
    _, blocking = run_ok(make_cfg(*common, "method.sync=blocking"))
    _, overlapped = run_ok(make_cfg(*common, "method.sync=overlapped"))
    assert [h["comm_bytes"] for h in overlapped["history"]] == [h["comm_bytes"] for h in blocking["history"]]
    for b, o in zip(blocking["summary"]["per_rank"], overlapped["summary"]["per_rank"]):
        assert o["comm_bytes_by_category"] == b["comm_bytes_by_category"]
        assert o["comm_bytes_by_layer"] == b["comm_bytes_by_layer"]


def test_digest_sync_every_1_overlapped_is_one_step_stale(make_cfg):
    _, record = run_ok(make_cfg("method=digest", "method.sync_every=1", "workers=2", "epochs=5", *SMALL_SYNTHETIC))
    for rank in record["summary"]["per_rank"]:
        assert rank["halo_age"]["by_step"] == [0, 1, 1, 1, 1]
        assert rank["sync"]["mode"] == "overlapped"


def test_digest_drops_out_halo_inputs_like_local_rows(make_cfg):
    """With dropout, halo input rows are dropped out too (layer0=cached, the default): the training
    differs from the run whose halo inputs enter undropped (cached_undropped); without dropout nothing
    does."""
    common = ["method=digest", "method.sync=blocking", "workers=2", "epochs=3", *SMALL_SYNTHETIC]
    losses = {}
    for p in ("0", "0.5"):
        for layer0 in ("cached", "cached_undropped"):
            _, record = run_ok(make_cfg(*common, f"dropout={p}", f"method.layer0={layer0}"))
            losses[p, layer0] = [h["train_loss"] for h in record["history"]]
    assert losses["0", "cached"] == losses["0", "cached_undropped"]
    assert losses["0.5", "cached"][0] != losses["0.5", "cached_undropped"][0]


@pytest.mark.parametrize("model, sync", [("gcn", "overlapped"), ("sage", "overlapped"), ("gcn", "blocking")])
def test_digest_bytes_are_the_stale_sync_volume_and_nothing_between_syncs(make_cfg, model, sync):
    cfg = make_cfg("method=digest", f"method.sync={sync}", "method.sync_every=4", f"model={model}", "workers=3",
                   "epochs=9", *DATASETS["synthetic"])
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
        # A rank pulls from the store at its own refresh steps after the cold start (steps 2, 4, ...):
        # a worker slowed enough to make only its first sync_every steps has pulled nothing.
        pulled = r["steps"] > 2
        assert set(st["halo_rows_by_layer"]) == ({"1", "2"} if pulled else set())
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
    (["method=digest", "method.sync=eager"], "unknown method.sync 'eager'; choose one of: blocking, overlapped"),
    (["method=digest", "method.asynchronous=true", "method.sync=blocking"],
     "method.sync=blocking does not apply to method.asynchronous=true"),
    (["method=digest", "method.layer0=maybe"],
     "unknown method.layer0 'maybe'; choose one of: cached, cached_undropped, "
     "exchanged, precomputed"),
    (["method=digest", "method.asynchronous=true", "method.layer0=exchanged"],
     "method.layer0=exchanged exchanges layer 0 with every peer every step"),
    (["method=psgd_pa", "method.avg_every=null"], "method.avg_every=None must be a positive integer"),
    (["method=llcg", "method.correction_steps=-1"], "method.correction_steps=-1 must be an integer >= 0"),
    (["method=digest", "method.avg_weighting=equal"], "unknown method.avg_weighting 'equal'"),
    (["method=full_halo", "straggler_delay_s=[-1]"], "straggler_delay_s must be a list of seconds"),
])
def test_bad_options_are_named(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        run(make_cfg(*overrides, *SMALL_SYNTHETIC))
