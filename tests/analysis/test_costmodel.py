"""The cost model (analysis/costmodel.py): a hand-made record projects to the hand-computed time,
and every modelled method's analytic traffic equals what its runs count (bytes, calls and
point-to-point messages per epoch, summed over ranks)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from analysis import costmodel, projection
from tests.methods.exactness import DATASETS, run_ok

# Round rates, so the expected time can be worked by hand.
PROFILE = SimpleNamespace(name="hand", device="cuda", units_per_node=2, ranks_per_node=2, memory_bytes=1e9,
                          memory_bandwidth=1000.0, gather_bandwidth=100.0, dense_flops={"fp32": 1000.0},
                          intra_node={"bandwidth": 100.0, "latency": 0.01},
                          inter_node={"bandwidth": 10.0, "latency": 0.1})


def hand_record(method="full_halo", measured=40.0) -> dict:
    """GCN 4 -> 8 -> 2 on two ranks of 10 nodes, 30 in-edges and 5 halo rows from one peer each."""
    return {"status": "ok", "method": method, "variant": method, "dataset": "hand", "model": "gcn", "workers": 2,
            "seed": 0, "config": {"method": {}, "model": {"name": "gcn"}, "hidden": 8, "layers": 2},
            "graph": {"nodes": 20, "features": 4, "classes": 2},
            "partition": {"nodes_per_rank": [10, 10], "edges_per_rank": [30, 30], "halo_nodes_per_rank": [5, 5],
                          "peers_per_rank": [1, 1]},
            "summary": {"epoch_time_s_median": measured, "train_mem_delta_bytes_max": None}}


def test_a_hand_made_record_projects_to_the_hand_computed_time():
    (row,), skipped = projection.project_records([hand_record()], PROFILE, [], None)
    t = row["time_terms"]
    # dense: layer 0 forward 2*10*4*8 = 640 FLOPs, backward once more (no input gradient); layer 1
    # forward 2*10*8*2 = 320, backward twice: 2240 FLOPs at 1000 FLOP/s
    assert t["dense"] == pytest.approx(2.24)
    # aggregation: 30 edges x (8 + 2) features x 4 bytes, forward and backward, at 100 B/s
    assert t["aggregate"] == pytest.approx(24.0)
    # elementwise (no dropout here): bias and activation 32 bytes per output element, the
    # [local | halo] copy 8 bytes per source element and again for its gradient:
    # 10 x 8 x 32 + 15 x 8 x 16 + 10 x 2 x 32 + 15 x 2 x 16 = 5600 bytes at 1000 B/s
    assert t["elementwise"] == pytest.approx(5.6)
    assert t["dropout_draws"] == 0
    assert t["optimizer_step"] == pytest.approx(58 * 88 / 1000)  # Adam: 88 bytes a parameter
    # halo: 5 rows x (8 + 2) x 4 bytes forward and backward = 400 bytes at 100 B/s, 4 messages of 10 ms
    assert t["exchange"] == pytest.approx(4.04)
    # ring all-reduce of 58 parameters (32 + 8 + 16 + 2) x 4 bytes: 2 steps of 10 ms + 232 / 100 s
    assert t["allreduce"] == pytest.approx(2.34)
    assert t["overlap"] == 0 and t["hidden_exchange"] == 0
    assert row["projected_epoch_s"] == pytest.approx(2.24 + 24 + 5.6 + 5.104 + 4.04 + 2.34)
    assert row["measured_epoch_s"] == 40.0 and skipped == []
    m = row["memory_terms"]
    # kept for backward: layer 0 its dropped-out input (10 x 4 x 4 bytes) and ReLU output (10 x 8 x 4);
    # layer 1 its input (10 x 8 x 4) and dropout mask (10 x 8 x 1)
    assert m["activations"] == 160 + 320 + 320 + 80
    # backward's largest step: layer 0's output gradient (10 x 8 x 4) and sources' (15 x 8 x 4)
    assert m["backward_transient"] == 320 + 480
    assert m["optimizer"] == 3 * 58 * 4 and m["stale_tables"] == 0
    assert row["projected_train_mem_bytes"] == 880 + 800 + 696
    assert projection.errors([row])["epoch_time"]["median"] == pytest.approx(3.324 / 40)


def test_overlapped_traffic_costs_only_what_compute_does_not_hide():
    (plain,), _ = projection.project_records([hand_record("pipegcn")], PROFILE, [], None)
    # PipeGCN sends layer 1's rows and gradients without waiting (layer 0's inputs were fetched once)
    t = plain["time_terms"]
    assert t["exchange"] == 0 and t["hidden_exchange"] == pytest.approx(2 * 0.01 + 2 * 40 / 100)
    assert t["overlap"] == -t["hidden_exchange"]  # compute (about 37 s) hides it whole


def test_off_the_model_records_are_named_not_projected():
    record = hand_record("cluster_gcn")
    rows, skipped = projection.project_records([record, {**hand_record(), "status": "failed"}], PROFILE, [], None)
    assert rows == [] and [why.split(" ")[0] for _, why in skipped] == ["no", "failed"]


def test_projecting_to_more_workers_uses_the_target_graphs_statistics():
    stats = {"graph": {"name": "big", "nodes": 400, "features": 4, "classes": 2}, "source": "extrapolated",
             "by_workers": {"4": {"nodes_per_rank": [100] * 4, "edges_per_rank": [300] * 4,
                                  "halo_nodes_per_rank": [50] * 4, "peers_per_rank": [3] * 4}}}
    rows, skipped = projection.project_records([hand_record()], PROFILE, [4, 8], stats)
    target = [r for r in rows if r["workers"] == 4]
    assert len(target) == 1 and target[0]["dataset"] == "big" and target[0]["partition_source"] == "extrapolated"
    assert target[0]["measured_epoch_s"] is None
    assert any("P=8" in what for what, _ in skipped)
    # 4 ranks on 2-rank nodes: 2 of each rank's 3 peers are on the other node, over the slower link
    halo = [t for t in costmodel.traffic("full_halo", {}, projection.build_model("gcn", 4, 8, 2, 2),
                                         costmodel.Rank(100, 300, 50, 3)) if not t.collective]
    links = costmodel.Links(PROFILE, 4)
    assert links.remote == pytest.approx(2 / 3)
    assert target[0]["time_terms"]["exchange"] == pytest.approx(sum(links.transfer(t.bytes, t.messages) for t in halo))


METHODS = [("full_halo", "sage", []), ("sar", "sage", []), ("sar", "gat", []), ("pipegcn", "sage", []),
           ("bns_gcn", "gat", []), ("digest", "sage", ["method.sync_every=1"]),
           ("sancus", "sage", ["method.max_staleness=0"]), ("adaqp", "sage", [])]


@pytest.mark.parametrize("method,model,extra", METHODS, ids=[f"{m}-{g}" for m, g, _ in METHODS])
def test_analytic_traffic_equals_the_counted_traffic(make_cfg, method, model, extra):
    """Per epoch and category, summed over ranks. On the randomly partitioned graph every pair of
    parts shares halo nodes, so every rank has P - 1 peers. BNS-GCN keeps floor(p |B_ij|) rows of
    each pair, the model p |B_ij|: within 1 %."""
    cfg = make_cfg(f"method={method}", "workers=3", *DATASETS["synthetic"], f"model={model}", "epochs=2", *extra)
    _, record = run_ok(cfg)
    epochs = len(record["history"])
    counted = {}
    for r in record["summary"]["per_rank"]:
        for i, field in enumerate(("comm_bytes_by_category", "comm_calls_by_category", "comm_messages_by_category")):
            for category, n in r[field].items():
                if category not in ("setup", "eval", "probe", "halo_inputs"):  # not per-epoch training traffic
                    counted.setdefault(category, [0.0, 0.0, 0.0])[i] += n / epochs
    g = record["graph"]
    model_ = projection.build_model(model, g["features"], cfg["hidden"], g["classes"], cfg["layers"])
    analytic = {}
    for rank in projection.ranks_of(record["partition"], record["workers"]):
        for t in costmodel.traffic(method, record["config"]["method"], model_, rank):
            a = analytic.setdefault(t.category, [0.0, 0.0, 0.0])
            a[0], a[1], a[2] = a[0] + t.bytes, a[1] + t.calls, a[2] + t.messages
    assert counted.keys() == analytic.keys()
    for category, (nbytes, calls, messages) in counted.items():
        assert analytic[category][1:] == [calls, messages], category
        assert analytic[category][0] == pytest.approx(nbytes, rel=0.01 if method == "bns_gcn" else 1e-9), category
