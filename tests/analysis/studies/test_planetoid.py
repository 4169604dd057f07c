"""Study `planetoid`: the oracle in each paper's regime beside raw features and the published rows, on
hand-made records with known answers."""
from __future__ import annotations

import pytest

from analysis import paired
from analysis.studies import planetoid
from tests.analysis.handmade import record

pytestmark = pytest.mark.fast

GCN_REGIME = {"dropout": 0.5, "lr": 0.01, "weight_decay": 0.0005, "weight_decay_layers": "first", "stopping": "window",
              "patience": 10, "study": "planetoid", "reproduces": "planetoid_baselines"}


def run(seed, test, transform):
    """A GCN run on Cora whose reported model has test accuracy `test` (val - 0.01 in `record`)."""
    r = record("single", 1, seed=seed, dataset="cora", model="gcn", hidden=16, layers=2, epochs=200,
               val=(0.5, test + 0.01), extra=dict(GCN_REGIME), savers={"dataset.transform": transform})
    r["setting"] = "s"  # the transform is an axis: both share their setting, as real records do
    r["summary"]["selected_epoch"] = 1
    r["_path"] = f"{transform}-{seed}.json"
    return r


def test_each_transform_gets_its_interval_and_the_preprocessing_its_paired_effect():
    recs = [run(s, 0.80 + 0.01 * s, "row_normalize") for s in range(3)]
    recs += [run(s, 0.78 + 0.01 * s, "none") for s in range(3)]
    t = planetoid.table(recs).set_index(["dataset", "model"])
    row = t.loc[("cora", "gcn")]
    assert row["regime"].n == 3 and row["regime"].mean == pytest.approx(0.81)
    assert row["raw"].mean == pytest.approx(0.79)
    assert row["effect"].n == 3 and row["effect"].mean == pytest.approx(0.02)
    # every pair differs by 2 points: the SD at its floor (paired.SD_FLOOR), an interval of +-0.1 point
    assert row["effect"].low == pytest.approx(0.02 - 4.303 * paired.SD_FLOOR / 3 ** 0.5, abs=1e-5)
    assert row["stopping"] == "window" and row["selected_epoch"] == 2
    papers = {p["source"]: p for p in row["papers"]}
    kipf = papers["arXiv 1609.02907 Table 2 (Kipf & Welling)"]
    assert kipf["value"] == 81.5
    assert kipf["differs"] == ["model.bias ?≠false"]  # every other key of the paper's regime is the run's
    page = planetoid.markdown(planetoid.table(recs))
    assert "81.0 [" in page and "gains 2.0 [1.9, 2.1] pt (3 seeds)" in page and "resolved" not in page
    assert "81.5 (arXiv 1609.02907 Table 2 (Kipf & Welling), inside the interval" in page
