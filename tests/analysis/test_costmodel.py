"""The cost model (analysis/costmodel.py) on hand-made records: they project to the hand-computed
time and memory; overlap, targets, proxies, fitting in memory and bad input behave as documented.
tests/analysis/test_traffic_counts.py holds the model's traffic to what real runs count."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from analysis import costmodel, projection

pytestmark = pytest.mark.fast

# Round rates, so the expected time can be worked by hand.
PROFILE = SimpleNamespace(name="hand", device="cuda", units_per_node=2, ranks_per_node=2, memory_bytes=1e9,
                          memory_bandwidth=1000.0, gather_bandwidth=100.0, dense_flops={"fp32": 1000.0},
                          intra_node={"bandwidth": 100.0, "latency": 0.01},
                          inter_node={"bandwidth": 10.0, "latency": 0.1})


def hand_record(method="full_halo", measured=40.0) -> dict:
    """GCN 4 -> 8 -> 2 on two ranks of 10 nodes, 30 in-edges and 5 halo rows from one peer each."""
    return {"status": "ok", "method": method, "variant": method, "dataset": "hand", "model": "gcn", "workers": 2,
            "seed": 0, "config": {"method": {}, "model": {"name": "gcn"}, "hidden": 8, "layers": 2, "dropout": 0.0,
                                  "kernel": "spmm"},
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
    assert t["dropout"] == 0
    assert t["optimizer_step"] == pytest.approx(58 * 88 / 1000)  # Adam: 88 bytes a parameter
    # halo: 5 rows x (8 + 2) x 4 bytes forward and backward = 400 bytes at 100 B/s, 4 messages of 10 ms
    assert t["exchange"] == pytest.approx(4.04)
    # ring all-reduce of 58 parameters (32 + 8 + 16 + 2) x 4 bytes: 2 steps of 10 ms + 232 / 100 s
    assert t["allreduce"] == pytest.approx(2.34)
    assert t["overlap"] == 0 and t["hidden_exchange"] == 0
    assert row["projected_epoch_s"] == pytest.approx(2.24 + 24 + 5.6 + 5.104 + 4.04 + 2.34)
    assert row["measured_epoch_s"] == 40.0 and skipped == []
    m = row["memory_terms"]
    # kept for backward: layer 0's ReLU output (10 x 8 x 4); without dropout each layer's input is the
    # features (static) or that output, no other tensor
    assert m["activations"] == 320
    # backward's largest step: layer 0's output gradient (10 x 8 x 4) and sources' (15 x 8 x 4)
    assert m["backward_transient"] == 320 + 480
    assert m["optimizer"] == 3 * 58 * 4 and m["stale_tables"] == 0
    assert row["projected_train_mem_bytes"] == 320 + 800 + 696
    assert projection.errors([row])["epoch_time"]["median"] == pytest.approx(3.324 / 40)


def test_overlapped_traffic_costs_only_what_compute_does_not_hide():
    (plain,), _ = projection.project_records([hand_record("pipegcn")], PROFILE, [], None)
    # PipeGCN sends layer 1's input rows (8 wide: the receiver projects them) and their gradients
    # without waiting (layer 0's inputs were fetched once): 5 x 8 x 4 bytes each way
    t = plain["time_terms"]
    assert t["exchange"] == 0 and t["hidden_exchange"] == pytest.approx(2 * 0.01 + 2 * 5 * 8 * 4 / 100)
    assert t["overlap"] == -t["hidden_exchange"]  # compute (about 37 s) hides it whole


def test_off_the_model_records_are_named_not_projected():
    record = hand_record("pyg_plain")
    rows, skipped = projection.project_records([record, {**hand_record(), "status": "failed"}], PROFILE, [], None)
    assert rows == [] and [why for _, why in skipped] == [costmodel.why_not_modelled("pyg_plain"), "failed run"]
    assert skipped[0][1].startswith("pyg_plain is not modelled: ")


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


def test_a_gemm_narrower_than_the_calibrated_widths_runs_at_the_narrow_rate():
    profile = SimpleNamespace(dense_width_efficiency={64: 0.5, 256: 1.0})
    assert [costmodel.width_efficiency(profile, w) for w in (8, 64, 128, 256, 1024)] == [0.5, 0.5, 0.75, 1.0, 1.0]
    assert costmodel.width_efficiency(PROFILE, 8) == 1.0  # no table: every width at dense_flops


def test_each_gemm_of_a_layer_runs_at_the_rate_of_the_width_it_sums_over():
    """The forward product sums over the input width, the weight's gradient over the rows, the
    input's gradient over the output width: a layer of 3703 features into 64 columns runs its forward
    at the full rate, and only the input's gradient (past layer 0) at the narrow one."""
    profile = SimpleNamespace(dense_width_efficiency={64: 0.5, 256: 1.0})
    assert costmodel.gemm_time_factor(profile, 3703, 64, 3327, input_gradient=False) == 2.0
    assert costmodel.gemm_time_factor(profile, 3703, 64, 3327, input_gradient=True) == 4.0
    assert costmodel.gemm_time_factor(profile, 64, 3703, 3327, input_gradient=True) == 2 + 1 + 1
    assert costmodel.gemm_time_factor(profile, 64, 64, 100_000, input_gradient=True) == 2 + 1 + 2
    assert costmodel.gemm_time_factor(PROFILE, 64, 64, 100, input_gradient=True) == 3.0  # no table


def test_a_rank_fits_when_its_peak_fits_its_share_of_the_unit():
    assert costmodel.fits(PROFILE, 2, 1e9) and not costmodel.fits(PROFILE, 2, 1.01e9)
    cpu = SimpleNamespace(**{**vars(PROFILE), "device": "cpu", "units_per_node": 1, "ranks_per_node": 8})
    assert costmodel.fits(cpu, 4, 0.25e9) and not costmodel.fits(cpu, 4, 0.26e9)  # 4 ranks share the node


def test_a_graph_too_large_to_load_gets_labelled_proxy_statistics():
    measured = {"graph": {"name": "small", "nodes": 1000, "edges": 21000},
                "by_workers": {str(p): {"fractions": {"halo_mean_frac": 0.1 / p ** 0.5,
                                                      "halo_max_frac": 0.12 / p ** 0.5,
                                                      "peers_mean_share": 1.0, "peers_max_share": 1.0,
                                                      "edge_cut_frac": 0.2, "node_imbalance": 1.0,
                                                      "edge_imbalance": 1.0}} for p in (2, 4, 8)}}
    stats = projection.proxy_stats([measured], "big", 10 ** 6, 3 * 10 ** 7, 128, 10, [16])
    assert "PROXY" in stats["proxy"] and "average degree 21 against 30" in stats["proxy"]
    s = stats["by_workers"]["16"]["summary"]
    assert s["nodes_max"] == pytest.approx(10 ** 6 / 16) and s["halo_max"] == pytest.approx(0.12 / 4 * 10 ** 6)
    (rank,) = projection.ranks_of(stats["by_workers"]["16"], 16)
    assert rank == costmodel.Rank(62500, 1875000, 30000, 15, 16)


def test_bad_input_is_one_line(tmp_path, capsys):
    from analysis.__main__ import main
    for argv, message in ((["project", str(tmp_path), "--hardware", "nope"], "unknown hardware profile 'nope'"),
                          (["project", str(tmp_path), "--hardware", "a100-dgx", "--workers", "8"], "with --graph"),
                          (["project", str(tmp_path), "--hardware", "a100-dgx", "--workers", "8", "--graph", "x.json"],
                           "not a partition-statistics file")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and message in err and "\n" not in err, err


def test_an_alias_is_projected_through_its_plugin_and_a_plugin_without_traffic_is_named():
    """PipeGCN-GF (`pipegcn_gf`, an alias of `pipegcn`) projects as its plugin states it, with its own
    options; a plugin without a `traffic` hook is left out as not modelled, whatever its family."""
    (alias,), skipped = projection.project_records([hand_record("pipegcn_gf")], PROFILE, [], None)
    (plugin,), _ = projection.project_records([hand_record("pipegcn")], PROFILE, [], None)
    assert skipped == [] and alias["time_terms"] == plugin["time_terms"]
    (_, why), = projection.project_records([hand_record("pyg_plain")], PROFILE, [], None)[1]
    assert why.startswith("pyg_plain is not modelled: ")


def test_a_process_peak_adds_the_process_and_what_the_allocator_keeps_of_small_blocks():
    """A rank process's peak: its memory terms, the process's own and, where a layer's rows are blocks
    below glibc's mmap threshold, what the heap keeps of them over the run; none where they are
    above it (they go back to the system when freed)."""
    from benchmarks.base.traffic import Rank
    model = projection.build_model("sage", 64, 128, 8, 3)

    def terms(nodes):
        return costmodel.process_peak_terms("full_halo", {}, model, Rank(nodes, nodes * 10, nodes // 4, 1), 2,
                                            in_process=False)
    small, large = terms(20_000), terms(2_000_000)  # rows of 128 floats: 10 MB, 1 GB
    assert small["process"] == large["process"] == costmodel.PROCESS_BYTES["spawned"]
    assert small["allocator"] == pytest.approx(small["activations"] + small["backward_transient"]
                                               + small["stale_tables"])
    assert large["allocator"] == 0
    ranks = [Rank(20_000, 200_000, 5000, 1), Rank(10_000, 100_000, 5000, 1)]
    assert costmodel.process_peak("full_halo", {}, model, ranks, 2, in_process=True) == \
        sum(costmodel.process_peak_terms("full_halo", {}, model, ranks[0], 2, in_process=True).values())


def test_the_kernel_sets_what_dropout_and_attention_keep_and_messages_transient():
    """`native` keeps no dropout mask and one float per edge and head in GAT (its fused softmax), where
    `spmm` keeps the mask and four; `messages` adds GCN/SAGE's gathered E x width messages to the
    transient and keeps GAT's."""
    from benchmarks.base.traffic import Rank
    rank = Rank(nodes=1000, edges=20000, halo=300, peers=1)
    terms = {}
    for name in ("sage", "gat"):
        for kernel in ("native", "spmm", "messages"):
            model = projection._model_of({"model": {"name": name, "heads": 4}, "hidden": 64, "layers": 3,
                                          "dropout": 0.5, "kernel": kernel}, 32, 5)
            terms[name, kernel] = costmodel.memory_terms("full_halo", {}, model, rank, 2)
    sage, gat = (lambda k: terms["sage", k]), (lambda k: terms["gat", k])
    assert sage("native")["activations"] < sage("spmm")["activations"] == sage("messages")["activations"]
    assert sage("messages")["backward_transient"] > sage("spmm")["backward_transient"] + 2 * 20000 * 32 * 4 * 0.9
    assert gat("native")["activations"] < gat("spmm")["activations"] < gat("messages")["activations"]


@pytest.mark.parametrize("overrides", [["model=gat", "dropout=0.3", "kernel=spmm", "model.heads=2", "hidden=32",
                                        "batch_norm=true"], ["model=sage"]])
def test_the_projection_models_the_run_its_configuration_starts(make_cfg, overrides):
    """The cost model's model of a record (`projection._model_of`, what every projection of a record
    builds from its `config`) is the model the run built (`benchmarks.run.train.model_for`, from the
    typed `RunConfig`), key for key, and the pre-flight check projects that very model
    (`projection.run_inputs`); a configuration without a key takes the schema's default."""
    from benchmarks.run.config import check
    from benchmarks.run.train import model_for
    run = check(make_cfg(*overrides))
    built = model_for(run, 12, 5)
    graph = {"features": 12, "classes": 5, "nodes": 100, "edges": 400}
    partition = {"nodes_per_rank": [100], "edges_per_rank": [400], "halo_nodes_per_rank": [0]}
    preflight, _ = projection.run_inputs(run, graph, partition, 1)
    for projected in (projection._model_of(run.as_dict(), 12, 5), preflight):
        assert projected.kernel == run.kernel and projected.dropout == run.dropout
        assert [type(m) for m in projected.modules()] == [type(m) for m in built.modules()]
        assert [p.shape for p in projected.parameters()] == [p.shape for p in built.parameters()]
    bare = projection._model_of({"model": {"name": run.model_name}, "hidden": 16, "layers": 2}, 12, 5)
    assert (bare.dropout, bare.kernel) == (0.5, "native")  # conf/config.yaml's and the schema's defaults
