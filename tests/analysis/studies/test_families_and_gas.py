"""Studies `families` and `gas` on hand-made records with known answers: who is paired with whom,
the ratios, and what a record without the projection's inputs gives (no number, no error)."""
from __future__ import annotations

import math

import pytest

from analysis import records
from analysis.studies import families, gas
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast


def _families(tmp_path):
    out = []
    for seed in range(3):
        def run(method, workers=2, mem=100, comm=10 ** 6, by_cat=None, shift=0.0):
            out.append(record(method, workers=workers, seed=seed, train_mem=mem, comm=comm, by_cat=by_cat,
                              dataset="cora", extra={"study": "families"}, val=(0.3, 0.8 + 0.01 * seed + shift)))
        run("single", workers=1, mem=200, comm=0)
        run("full_halo")
        run("cagnet", comm=3 * 10 ** 6, mem=80, by_cat={"bcast_fwd": 4 * 10 ** 6, "grad_allreduce": 2 * 10 ** 6})
        run("full_halo", workers=4, mem=50)
    return records.load(write(tmp_path / "families", out))


def test_families_pairs_every_method_with_single_and_sets_bytes_against_full_halo(tmp_path):
    t = families.table(_families(tmp_path)).set_index(["workers", "variant"])
    # single (one process) is set beside every worker count its partners ran at
    assert {("2", "single"), ("4", "single")} <= {(str(w), v) for w, v in t.index}
    cagnet = t.loc[(2, "cagnet")]
    assert cagnet["seeds"] == 3 and cagnet["effect"].n == 3 and cagnet["effect"].mean == pytest.approx(0.0)
    assert cagnet["bytes_vs_full_halo"] == pytest.approx(3.0) and cagnet["ws_vs_single"] == pytest.approx(0.4)
    assert cagnet["categories"] == "bcast_fwd 67%, grad_allreduce 33%"
    # hand-made records carry no partition: no cost-model number, and no error
    assert math.isnan(cagnet["bytes_vs_model"]) and math.isnan(t.loc[(4, "full_halo")]["bytes_vs_full_halo"])
    text = "\n".join(families.section(_families(tmp_path / "again"), tmp_path))
    assert "every exact method is equivalent to `single` within ±1 pt (TOST), as exactness requires" in text
    assert "equivalent within ±1 pt: +0.0 [-0.1, +0.1] (3 seeds)" in text and "within noise" not in text
    assert "`cagnet` moves, per epoch, cora P=2 3.00x `full_halo`'s bytes" in text


def test_gas_is_paired_with_single_and_with_cluster_gcn_on_the_same_seeds(tmp_path):
    out = []
    for seed in range(3):
        common = dict(workers=1, seed=seed, dataset="cora", model="gcn", extra={"study": "gas"})
        out.append(record("single", train_mem=200, val=(0.3, 0.81 + 0.01 * seed), **common))
        out.append(record("gas", train_mem=150, val=(0.3, 0.80 + 0.01 * seed), comm=300,
                          by_cat={"history_pull": 600, "history_push": 300, "history_fill": 900},
                          summary={"per_rank": [{"history_bytes": 4000}]}, **common))
        out.append(record("cluster_gcn", train_mem=120, val=(0.3, 0.78 + 0.01 * seed), **common))
    t = gas.table(records.load(write(tmp_path / "gas", out))).set_index("method")
    g = t.loc["gas"]
    # each verdict reads its own row's Holm flag (rows without an effect hold a place in the family)
    assert sum(g["d_single"]) / 3 == pytest.approx(-0.01) and g["vs_single"].n == 3
    assert g["vs_single"].word == "costs"
    assert sum(g["d_nearest"]) / 3 == pytest.approx(0.02) and g["vs_nearest"].word == "gains"
    assert g["ws_vs_single"] == pytest.approx(0.75) and g["history_bytes"] == 4000
    assert g["copied_per_epoch"] == pytest.approx(450) and g["fill_per_epoch"] == pytest.approx(450)  # 2 epochs
    assert t.loc["single"]["vs_single"] is None and t.loc["cluster_gcn"]["vs_nearest"] is None
    lines = gas.section(records.load(tmp_path / "gas"), tmp_path)
    assert any("`gas` minus `cluster_gcn` (histories over dropped edges): gains 2.0" in line for line in lines)
    assert not any("within noise" in line for line in lines)  # the verdict's words, not the old reading's
