"""Published numbers beside measured ones: which records match, the paired worker counts, and
what kind of comparison each pair is (full, unconfirmed, scaled-down, shape, not comparable).
Matching must never over-claim: another dataset's or unit's absolute value is never set beside a
record, a record differing in a recorded key is never `full`, a stand-in dataset gets shapes."""
from __future__ import annotations

import math
import re

import pytest

from analysis import records as rec
from analysis import reference
from tests.analysis.handmade import record

pytestmark = pytest.mark.fast

# arXiv 1609.02907's regime, with hidden 16, 2 layers and 200 epochs
GCN_PAPER = {"dropout": 0.5, "lr": 0.01, "weight_decay": 0.0005}


def compare(records):
    for i, r in enumerate(records):
        r["_path"] = f"r{i}.json"
    runs = rec.runs(records)
    return reference.compare(rec.aggregate(runs), runs)


def assert_never_over_claims(cmp):
    """The rules every report keeps, whatever the records."""
    ref = reference.load_reference()
    for _, r in cmp.iterrows():
        if r["reproduction"] in ("full", "unconfirmed", "scaled-down"):  # an absolute value beside a record
            assert r["paper_dataset"].lower() == r["dataset"].lower(), r.to_dict()
            row = ref[(ref["source"] == r["source"]) & (ref["dataset"] == r["paper_dataset"])
                      & (ref["model"] == r["paper_model"]) & (ref["method"] == r["paper_method"])
                      & (ref["metric"] == r["metric"]) & (ref["workers"] == r["paper_workers"])]
            assert (row["family"] == r["model"]).all()
        if r["reproduction"] == "full":
            assert r["differs"] == "" and r["unknown"] == ""
        if r["per"] == "round" and r["reproduction"] != "not comparable":
            assert "round" in r["measured_as"]  # never bytes per epoch


def test_the_reference_table_maps_to_our_names_and_records_each_rows_configuration():
    ref = reference.load_reference()
    assert {"table", "source", "dataset", "model", "family", "method", "workers", "metric", "value", "unit", "per",
            "certainty", "config", "config_source", "note"} <= set(ref.columns)
    assert {"sar_papers", "llcg_table1", "planetoid_baselines"} <= set(ref["table"])
    assert set(ref["per"]) <= {"epoch", "round", "run"}
    assert (ref.loc[ref["metric"] == "comm_per_round", "per"] == "round").all()
    # the OGB leaderboard's ClusterGCN and GraphSAINT entries are "SAGE aggr", not GCN
    ogb = ref[(ref["dataset"] == "ogbn-products") & ref["method"].isin(["Cluster-GCN", "GraphSAINT"])]
    assert len(ogb) == 2 and (ogb["family"] == "sage").all()
    for text in ref["config"]:  # every cell parses, and its keys are record config paths
        assert all(re.fullmatch(r"[a-z_]+(\.[a-z_]+)?", k) for k in reference.parse_config(text)), text
    assert reference.parse_config("lr=0.001; method.fanouts=[15, 10, 5]; batch_norm=true") == {
        "lr": 0.001, "method.fanouts": [15, 10, 5], "batch_norm": True}
    assert reference.load_tables()["llcg_table1"] == "PSGD-PA"
    assert reference.model_of("GraphSAGE 3x256 +BN") == "sage" and reference.model_of("GraphSAGE_res_incep") is None
    assert reference.shape_of("GAT 3x128 4 heads +BN") == {"layers": 3, "hidden": 128, "batch_norm": True}


def test_a_stand_in_for_papers100m_gets_shapes_relative_to_vanilla_paired_by_worker_rank():
    # SAR's papers100M figure at 32/64/128 machines, run here at 1/2/4 workers on a synthetic graph
    records = [record(m, w, peak=int(1e9 * f / w), train_mem=int(1e8 * f / w), epoch_time=8.0 / w,
                      reproduces="sar_papers", hidden=256, layers=3, batch_norm=True)
               for m, f in (("sar", 1.0), ("full_halo", 2.0)) for w in (1, 2, 4)]
    cmp = compare(records)
    assert_never_over_claims(cmp)
    assert set(cmp["reproduction"]) == {"shape"}  # never 95 GB beside a 20k-node graph's RSS
    cmp = cmp.set_index(["paper_method", "paper_workers", "metric"])
    sar32 = cmp.loc[("SAR", "32", "peak_memory_per_machine")]
    assert sar32["paper"] == pytest.approx(95 / 150) and sar32["measured"] == pytest.approx(0.5)
    assert sar32["workers"] == 1 and sar32["relative_to"] == "vanilla domain-parallel (no SR)" and sar32["unit"] == "x"
    assert "dataset synthetic≠ogbn-papers100M (stand-in)" in sar32["differs"] and "workers 1≠32" in sar32["differs"]
    ratio = cmp.loc[("SAR vs vanilla", "128", "memory_ratio_vanilla_over_sar")]
    assert ratio["measured"] == pytest.approx(2.0) and ratio["workers"] == 4
    scaling = cmp.loc[("SAR", "32->128", "memory_scaling_factor")]
    assert scaling["measured"] == pytest.approx(4.0) and scaling["workers"] == "1->4"
    assert cmp.loc[("SAR", "32->64", "runtime_scaling")]["measured"] == pytest.approx(2.0)
    assert ("SAR", "32", "epoch_time") not in cmp.index  # no vanilla epoch time to set it against


def test_each_pair_has_a_verdict_and_a_time_with_more_ranks_than_cores_is_not_a_finding():
    """The verdict column on known rows (handmade records on a 2-core machine at 1, 2, 4 workers): a
    shape of the paper's sign and size agrees; one of the paper's sign at under half its size is the
    same direction, smaller; no effect where the paper has one disagrees; epoch-time scaling to 4
    ranks on 2 cores is not a finding here (time-slicing), to 2 ranks it is."""
    records = [record(m, w, peak=int(1e9 * f / w), train_mem=int(1e8 * (f if w < 4 else 1 + 0.2 * (f - 1)) / w),
                      epoch_time=8.0 / w, reproduces="sar_papers", hidden=256, layers=3, batch_norm=True)
               for m, f in (("sar", 1.0), ("full_halo", 2.0)) for w in (1, 2, 4)]
    cmp = compare(records).set_index(["paper_method", "paper_workers", "metric"])
    peak = cmp.loc[("SAR", "32", "peak_memory_per_machine")]  # 0.5 x against 0.633 x
    assert peak["verdict"] == reference.AGREES and "0.5 x against 0.633 x" in peak["why"]
    ratio = cmp.loc[("SAR vs vanilla", "128", "memory_ratio_vanilla_over_sar")]  # 1.2 x against 2.0 x
    assert ratio["verdict"] == reference.SMALLER
    assert cmp.loc[("SAR", "32->64", "runtime_scaling")]["verdict"] == reference.AGREES  # 1 -> 2 ranks
    sliced = cmp.loc[("SAR", "32->128", "runtime_scaling")]  # 1 -> 4 ranks on 2 cores
    assert sliced["time_sliced"] and sliced["verdict"] == reference.NOT_A_FINDING
    assert sliced["why"].startswith("4 ranks on 2 cores")
    # the rule on rows alone: no effect here against the paper's, the opposite sign, an absolute accuracy
    row = {"reproduction": "shape", "metric": "memory_ratio_vanilla_over_sar", "unit": "x", "time_sliced": False}
    assert reference.verdict({**row, "paper": 1.6, "measured": 1.005})[0] == reference.DISAGREES
    assert reference.verdict({**row, "paper": 1.6, "measured": 0.8})[1].startswith("opposite direction")
    accuracy = {"reproduction": "scaled-down", "metric": "test_accuracy", "unit": "%", "time_sliced": False}
    assert reference.verdict({**accuracy, "paper": 81.5, "measured": 80.9})[0] == reference.AGREES
    assert reference.verdict({**accuracy, "paper": 81.5, "measured": 78.0})[0] == reference.DISAGREES
    time = {"reproduction": "scaled-down", "metric": "epoch_time", "unit": "s", "time_sliced": False}
    assert reference.verdict({**time, "paper": 1.2, "measured": 3.4})[0] == reference.NOT_A_FINDING
    assert reference.verdict({**row, "paper": 1.6, "measured": math.nan})[0] == reference.NOT_A_FINDING


def test_full_only_when_every_recorded_key_matches_and_the_differing_keys_are_listed():
    paper = dict(hidden=16, layers=2, epochs=200, extra={**GCN_PAPER, "weight_decay_layers": "first",
                                                         "stopping": "window",
                                                         "patience": 10, "dataset": {"name": "cora",
                                                                                     "transform": "row_normalize"},
                                                         "model": {"name": "gcn", "bias": False}})
    records = [record("single", 1, dataset="cora", model="gcn", val=(0.5, 0.815), **paper),
               record("single", 1, dataset="citeseer", model="gcn", hidden=64, layers=2, epochs=100,
                      extra={**GCN_PAPER, "lr": 0.001}),
               record("single", 1, dataset="pubmed", model="gat", status="failed"),
               record("single", 1, dataset="synthetic", model="gcn")]  # no reference, no preset: no match
    cmp = compare(records)
    assert_never_over_claims(cmp)
    cora = cmp[(cmp["dataset"] == "cora") & cmp["source"].str.startswith("arXiv 1609.02907")].iloc[0]
    assert cora["paper"] == 81.5 and cora["measured"] == pytest.approx(80.5) and cora["reproduction"] == "full"
    # DGL's README states no settings: nothing differs, but it is not a full reproduction either
    dgl = cmp[(cmp["dataset"] == "cora") & (cmp["source"] == "dmlc/dgl:examples/pytorch/gcn/README.md")].iloc[0]
    assert dgl["reproduction"] == "unconfirmed" and "lr" in dgl["unknown"]
    assert set(cmp.loc[cmp["reproduction"] == "full", "source"]) == {cora["source"]}
    citeseer = cmp[(cmp["dataset"] == "citeseer") & cmp["source"].str.startswith("arXiv 1609.02907")].iloc[0]
    assert citeseer["reproduction"] == "scaled-down"
    assert citeseer["differs"] == ("hidden 64≠16, lr 0.001≠0.01, weight_decay_layers ?≠first, "
                                   "dataset.transform ?≠row_normalize, "
                                   "epochs 100≠200, stopping ?≠window, patience ?≠10, model.bias ?≠false")
    pubmed = cmp[cmp["dataset"] == "pubmed"]
    assert len(pubmed) and (pubmed["status"] == "failed").all() and (pubmed["reproduction"] != "full").all()
    assert not (cmp["dataset"] == "synthetic").any()


def test_a_gpu_epoch_time_is_never_a_full_reproduction_of_another_machines_figure():
    # DGL's GAT example: 0.0076 s per epoch on a V100, after 300 epochs; nothing else stated
    cmp = compare([record("single", 1, dataset="cora", model="gat", epochs=300, extra={"device": "cuda"})])
    t = cmp[cmp["metric"] == "epoch_time"].iloc[0]
    assert t["reproduction"] == "scaled-down" and "hardware ?≠V100" in t["differs"]


def test_a_paper_preset_on_one_of_its_own_datasets_is_compared_with_that_dataset_only():
    cmp = compare([record("single", 1, dataset="cora", model="gcn", reproduces="planetoid_baselines")])
    assert len(cmp) and set(cmp["paper_dataset"]) == {"Cora"}
    assert_never_over_claims(cmp)


def llcg_runs(dataset, reproduces="llcg_table1", **kw):
    # psgd_pa 60 %, ggs 65 %, llcg 63 % best validation (test = val - 1 point); 8 workers
    return [record(m, 8, dataset=dataset, model="sage", val=(0.3, v), comm=c, reproduces=reproduces,
                   **kw)
            for m, v, c in (("psgd_pa", 0.60, 1_000_000), ("ggs", 0.65, 50_000_000), ("llcg", 0.63, 3_000_000))]


def test_a_stand_in_dataset_gets_shapes_relative_to_the_tables_reference_method():
    cmp = compare(llcg_runs("citeseer"))  # llcg_table1_mini: CiteSeer is not in LLCG's Table 1
    assert_never_over_claims(cmp)
    assert len(cmp) and set(cmp["reproduction"]) <= {"shape", "not comparable"}
    assert not (cmp["paper_method"] == "PSGD-PA").any()  # the origin of every shape
    acc = cmp[(cmp["metric"] == "test_micro_f1")].set_index(["paper_dataset", "paper_method"])
    ggs = acc.loc[("Flickr", "GGS")]
    assert ggs["paper"] == pytest.approx(51.22 - 49.08) and ggs["measured"] == pytest.approx(5.0)
    assert ggs["unit"] == "pp" and ggs["relative_to"] == "PSGD-PA"
    assert acc.loc[("Reddit", "LLCG")]["paper"] == pytest.approx(94.67 - 71.17)
    assert acc.loc[("Reddit", "LLCG")]["measured"] == pytest.approx(3.0)
    assert not cmp["paper_dataset"].str.lower().eq("citeseer").any()
    # LLCG's MB per round against bytes per epoch: never, not even as a shape
    comm = cmp[cmp["metric"] == "comm_per_round"]
    assert len(comm) and (comm["reproduction"] == "not comparable").all() and comm["measured"].isna().all()
    assert comm["differs"].str.contains("unit").all()


def test_a_method_run_with_the_papers_options_still_stands_for_it():
    """llcg_table1_mini sets the paper's batch size, so its variants are `psgd_pa batch_size=64`...:
    each is the one variant of its method here, matched, its options compared like any key."""
    runs = llcg_runs("citeseer", options={"batch_size": 64})
    assert {r["variant"] for r in runs} == {"psgd_pa batch_size=64", "ggs batch_size=64", "llcg batch_size=64"}
    cmp = compare(runs)
    assert_never_over_claims(cmp)
    acc = cmp[(cmp["metric"] == "test_micro_f1")].set_index(["paper_dataset", "paper_method"])
    assert acc.loc[("Flickr", "GGS")]["measured"] == pytest.approx(5.0)
    # two variants of one method and no plain one: neither is chosen
    two = runs + [record("psgd_pa", 8, dataset="citeseer", model="sage", val=(0.3, 0.5), reproduces="llcg_table1",
                         options={"batch_size": 32})]
    assert not len(compare(two).query("reproduction == 'shape'"))


def test_the_synthetic_stand_in_for_ogbn_products_is_set_beside_shapes_not_leaderboard_values():
    runs = [record(m, 1, dataset="synthetic", model="sage", val=(0.3, v), reproduces="ogb_baselines", epoch_time=t)
            for m, v, t in (("single", 0.80, 2.0), ("neighbor_sampling", 0.82, 1.0), ("cluster_gcn", 0.79, 0.5))]
    cmp = compare(runs)
    assert_never_over_claims(cmp)
    assert set(cmp["reproduction"]) == {"shape"} and set(cmp["paper_dataset"]) == {"ogbn-products"}
    ns = cmp.set_index("paper_method").loc["neighbour sampling"]
    assert ns["paper"] == pytest.approx(78.7 - 78.5) and ns["measured"] == pytest.approx(2.0)
    assert cmp.set_index("paper_method").loc["Cluster-GCN"]["measured"] == pytest.approx(-1.0)


def test_per_round_rows_are_never_set_beside_bytes_per_epoch():
    # on Flickr itself (llcg_table1_full): the accuracy is compared, the MB per round is not ...
    cmp = compare(llcg_runs("flickr"))
    assert_never_over_claims(cmp)
    comm = cmp[cmp["metric"] == "comm_per_round"]
    assert len(comm) and (comm["reproduction"] == "not comparable").all() and comm["measured"].isna().all()
    acc = cmp[(cmp["metric"] == "test_micro_f1") & (cmp["paper_method"] == "PSGD-PA")].iloc[0]
    assert acc["paper"] == 49.08 and acc["measured"] == pytest.approx(59.0) and acc["reproduction"] == "scaled-down"
    assert "rounds 3≠50" in acc["differs"] and "method.fanouts ?≠[10]" in acc["differs"]
    # ... unless the record states bytes per round
    cmp = compare(llcg_runs("flickr", summary={"comm_bytes_per_round": 12.57e6}))
    comm = cmp[(cmp["metric"] == "comm_per_round") & (cmp["paper_method"] == "PSGD-PA")].iloc[0]
    assert comm["reproduction"] == "scaled-down" and comm["measured"] == pytest.approx(12.57)
    assert_never_over_claims(cmp)


def test_records_of_a_preset_and_of_none_in_one_folder_are_each_matched_by_their_own_rule():
    cmp = compare([*llcg_runs("citeseer"), record("single", 1, dataset="cora", model="gcn")])
    assert set(cmp.loc[cmp["dataset"] == "citeseer", "reproduction"]) <= {"shape", "not comparable"}
    assert set(cmp.loc[cmp["dataset"] == "cora", "paper_dataset"]) == {"Cora"}
    assert_never_over_claims(cmp)


def test_another_model_family_or_dataset_never_meets_a_row():
    cmp = compare([record("single", 1, dataset="cora", model="mlp"), record("psgd_pa", 8, dataset="reddit",
                                                                             model="gcn")])
    assert not len(cmp) or not ((cmp["dataset"] == "reddit") & (cmp["table"] == "llcg_table1")).any()
    assert math.isnan(float("nan"))


def preset_records(preset: str, **kw) -> list[dict]:
    """One hand-made record per run of a preset's sweep, carrying the configuration the preset
    composes for that run (what the runtime writes into `config`)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from benchmarks.base.registry import CONF
    from benchmarks.commands.sweep import expand

    runs, _ = expand([f"experiment={preset}"])
    out = []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for overrides in runs:
            cfg = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
            workers = 1 if cfg["method"]["name"] == "single" else cfg["workers"]
            r = record(cfg["method"]["name"], workers, dataset=cfg["dataset"]["name"], model=cfg["model"]["name"],
                       reproduces=cfg["reproduces"], **kw)
            r["config"] = {**cfg, "workers": workers}
            out.append(r)
    return out


def test_a_stand_in_for_a_table_without_its_reference_method_says_why_nothing_is_compared():
    # The PipeGCN README has PipeGCN's Reddit run and no vanilla row: a synthetic stand-in gets no shape.
    line = reference.why_unmatched("pipegcn_readme", ["synthetic"])
    assert "`pipegcn_readme` (rows on Reddit; methods PipeGCN)" in line
    assert "its reference method (vanilla partition-parallel) has no row" in line and "\n" not in line
    runs = rec.runs([record("pipegcn", 2, reproduces="pipegcn_readme")])
    assert not len(reference.compare(rec.aggregate(runs), runs))
