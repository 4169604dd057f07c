"""Published numbers beside measured ones: which records match, the paired worker counts, and
whether a reproduction is full or scaled-down."""
from __future__ import annotations

import pytest

from analysis import records as rec
from analysis import reference
from tests.analysis.handmade import record

pytestmark = pytest.mark.fast


def compare(records):
    for i, r in enumerate(records):
        r["_path"] = f"r{i}.json"
    runs = rec.runs(records)
    return reference.compare(rec.aggregate(runs), runs)


def test_the_reference_table_maps_to_our_names():
    ref = reference.load_reference()
    assert {"table", "source", "dataset", "model", "method", "workers", "metric", "value", "unit",
            "certainty", "note"} <= set(ref.columns)
    assert {"sar_papers", "llcg_table1", "planetoid_baselines"} <= set(ref["table"])
    assert reference.model_of("GraphSAGE 3x256 +BN") == "sage" and reference.model_of("GraphSAGE_res_incep") is None
    assert reference.shape_of("GAT 3x128 4 heads +BN") == {"layers": 3, "hidden": 128, "batch_norm": True}


def test_a_scaled_down_sweep_is_paired_with_the_paper_by_worker_rank():
    # SAR's papers100M figure at 32/64/128 machines, run here at 1/2/4 workers on a synthetic graph
    records = [record(m, w, peak=int(1e9 * f / w), train_mem=int(1e8 * f / w), epoch_time=8.0 / w,
                      reproduces="sar_papers", hidden=256, layers=3, batch_norm=True)
               for m, f in (("sar", 1.0), ("full_halo", 2.0)) for w in (1, 2, 4)]
    cmp = compare(records).set_index(["paper_method", "paper_workers", "metric"])
    sar32 = cmp.loc[("SAR", "32", "peak_memory_per_machine")]
    assert sar32["paper"] == 95 and sar32["measured"] == pytest.approx(1.0) and sar32["workers"] == 1
    assert sar32["reproduction"] == "scaled-down: dataset synthetic (paper ogbn-papers100M); workers 1 (paper 32)"
    ratio = cmp.loc[("SAR vs vanilla", "128", "memory_ratio_vanilla_over_sar")]
    assert ratio["measured"] == pytest.approx(2.0) and ratio["workers"] == 4
    scaling = cmp.loc[("SAR", "32->128", "memory_scaling_factor")]
    assert scaling["measured"] == pytest.approx(4.0) and scaling["workers"] == "1->4"
    assert cmp.loc[("SAR", "32->64", "runtime_scaling")]["measured"] == pytest.approx(2.0)


def test_same_dataset_model_and_workers_is_a_full_reproduction_and_failures_show():
    records = [record("single", 1, dataset="cora", model="gcn", val=(0.5, 0.815)),
               record("single", 1, dataset="citeseer", model="gat", status="failed"),
               record("single", 1, dataset="synthetic", model="gcn")]  # no reference, no preset: no match
    cmp = compare(records)
    cora = cmp[(cmp["dataset"] == "cora") & (cmp["source"].str.startswith("arXiv 1609.02907"))].iloc[0]
    assert cora["paper"] == 81.5 and cora["measured"] == pytest.approx(80.5) and cora["reproduction"] == "full"
    citeseer = cmp[cmp["dataset"] == "citeseer"]
    assert len(citeseer) and (citeseer["status"] == "failed").all()
    assert not (cmp["dataset"] == "synthetic").any()


def test_a_paper_preset_on_one_of_its_own_datasets_is_compared_with_that_dataset_only():
    cmp = compare([record("single", 1, dataset="cora", model="gcn", reproduces="planetoid_baselines")])
    assert len(cmp) and set(cmp["paper_dataset"]) == {"Cora"}
