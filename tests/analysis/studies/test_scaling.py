"""Study `scaling` on hand-made records with known answers: paired effects per P against the exact
control, Holm's correction over the page, halo and total bytes against `full_halo`'s at the same P,
the halo rows per node, the curve in words, and the published table `advise` and the findings read."""
from __future__ import annotations

import math

import pytest

from analysis import paired
from analysis.studies import scaling
from benchmarks.run.methods_table import about
from tests.analysis.handmade import record

pytestmark = pytest.mark.fast
STUDY = {"study": "scaling", "partitioner": "metis"}
CONTROL = "bns_gcn boundary_fraction=1.0"
#: test accuracy (points) of the method minus its control, per P and seed: 0 at P=2, -3 +- 0.5 at P=8.
GAP = {2: (0.0, 0.0, 0.0), 8: (-3.0, -2.5, -3.5)}


def _records() -> list[dict]:
    out = []
    for workers, gaps in GAP.items():
        for seed, gap in enumerate(gaps):
            def run(method, options=None, control=None, acc=0.80, comm=10 ** 6, halo=0.75):
                by_cat = {"halo_fwd": int(comm * 2 * halo), "grad_allreduce": int(comm * 2 * (1 - halo))}  # 2 epochs
                r = record(method, workers=workers, seed=seed, options=options, dataset="cora", extra=STUDY,
                           val=(0.3, acc + 0.01), comm=comm, by_cat=by_cat)
                r["control"], r["about"] = control, about(method)
                r["partition"] = {"halo_nodes_per_rank": [100 * workers] * workers}
                r["graph"] = {"nodes": 1000}
                out.append(r)
            run("full_halo")
            run("bns_gcn", {"boundary_fraction": 1.0})
            run("bns_gcn", control=CONTROL, acc=0.80 + gap / 100, comm=4 * 10 ** 5, halo=0.5)
    return out


def test_effects_bytes_and_boundary_per_p():
    t = scaling.table(_records()).set_index("workers")
    assert list(t.index) == [2, 8] and set(t["method"]) == {"bns_gcn"} and set(t["control"]) == {CONTROL}
    assert t.loc[2, "effect"].mean == pytest.approx(0.0, abs=1e-9) and t.loc[2, "p"] == 1.0
    assert t.loc[8, "effect"].mean == pytest.approx(-0.03, abs=1e-9) and t.loc[8, "effect"].resolved
    # halo bytes: all but the gradient sums; the method's 0.2 MB of 0.4 against full_halo's 0.75 of 1
    assert t.loc[8, "halo_vs_reference"] == pytest.approx(0.2 / 0.75, rel=1e-4)
    assert t.loc[8, "bytes_vs_reference"] == pytest.approx(0.4, rel=1e-4)
    assert t.loc[2, "halo_rows_per_node"] == pytest.approx(0.4) and t.loc[8, "halo_rows_per_node"] == pytest.approx(6.4)
    assert list(t["holm"]) == [False, True]


def test_holm_is_step_down_over_the_page():
    assert paired.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 <= 0.05/3; 0.03 > 0.05/2
    assert paired.holm([0.01, 0.02, 0.03]) == [True, True, True]
    assert paired.holm([math.nan, 0.001]) == [False, True]


def test_the_curve_in_words_and_the_published_table():
    t = scaling.table(_records())
    lines = scaling.curve_in_words(t)
    assert lines == ["- cora · sage · metis: `bns_gcn` leaves ±1 pt at P=8 (P=2: +0.0 [+0.0, +0.0] (3, within noise); "
                     "P=8: -3.0 [-4.2, -1.8] (3))"]
    csv = scaling.csv(_records()).set_index("workers")
    assert csv.loc[8, "effect_pt"] == -3.0 and csv.loc[8, "pairs"] == 3 and bool(csv.loc[8, "holm"])
    text = "\n".join(scaling.section(_records(), __import__("pathlib").Path("/tmp/scaling-test")))
    assert "2 comparisons" in text and "1 stay resolved after Holm" in text
