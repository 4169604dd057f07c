"""Study `scaling` on hand-made records with known answers: paired effects per P against the exact
control, Holm's correction over the page, halo and total bytes against `full_halo`'s at the same P,
the halo rows per node, the curve in words, and the published table `advise` and the findings read."""
from __future__ import annotations

import math

import pytest

from analysis import paired, records
from analysis.studies import scaling
from benchmarks.run.methods_table import about
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast
STUDY = {"study": "scaling", "partitioner": "metis"}
CONTROL = "bns_gcn boundary_fraction=1.0"
#: test accuracy (points) of the method minus its control, per P and seed: 0 at P=2, -3 +- 0.5 at P=8.
GAP = {2: (0.0, 0.0, 0.0), 8: (-3.0, -2.5, -3.5)}


def _records(gap: dict = GAP, partitioner: str = "metis", skew: float = 0.3, dataset: str = "cora") -> list[dict]:
    out = []
    for workers, gaps in gap.items():
        for seed, gap in enumerate(gaps):
            def run(method, options=None, control=None, acc=0.80, comm=10 ** 6, halo=0.75):
                by_cat = {"halo_fwd": int(comm * 2 * halo), "grad_allreduce": int(comm * 2 * (1 - halo))}  # 2 epochs
                r = record(method, workers=workers, seed=seed, options=options, dataset=dataset,
                           extra={**STUDY, "partitioner": partitioner}, val=(0.3, acc + 0.01), comm=comm, by_cat=by_cat)
                r["control"], r["about"] = control, about(method)
                r["partition"] = {"halo_nodes_per_rank": [100 * workers] * workers,
                                  "halo_rows_per_node": 0.1 * workers ** 2 * (1 if partitioner == "metis" else 3),
                                  "label_skew_mean": skew * workers}
                r["graph"] = {"nodes": 1000}
                if control:  # BNS-GCN's probe: rank r keeps floor(0.1 * |B|) of each owner's |B| = 15 + r rows
                    r["summary"]["per_rank"] = [{"boundary_rows_kept": {
                        "boundary_by_owner": [0 if i == rank else 15 + rank for i in range(workers)],
                        "by_owner_epoch0": [0 if i == rank else 1 for i in range(workers)]}} for rank in range(workers)]
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
    # kept rows at epoch 0 over boundary rows, all ranks: P=2: 2 / (15 + 16); P=8: 56 / (7 * (15 + ... + 22))
    assert t.loc[2, "kept_fraction"] == pytest.approx(2 / 31)
    assert t.loc[8, "kept_fraction"] == pytest.approx(56 / (7 * sum(range(15, 23))))


def test_kept_fraction_only_where_the_records_carry_it():
    recs = _records()
    for r in recs:
        r["summary"].pop("per_rank", None)
    t = scaling.table(recs)
    assert t["kept_fraction"].isna().all()
    assert "boundary rows kept" not in scaling.markdown(t)
    assert scaling.kept_fraction([{**recs[0], "status": "failed"}]) == {}


def test_halo_rows_per_node_is_the_records_own_where_it_has_it():
    recs = _records()
    for r in recs:
        r["partition"]["halo_rows_per_node"] = 0.25 * r["workers"]  # the runtime's (partition.REGIME_KEYS)
    assert set(scaling.table(recs).set_index("workers")["halo_rows_per_node"].items()) == {(2, 0.5), (8, 2.0)}


def test_holm_is_step_down_over_the_page():
    assert paired.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 <= 0.05/3; 0.03 > 0.05/2
    assert paired.holm([0.01, 0.02, 0.03]) == [True, True, True]
    assert paired.holm([math.nan, 0.001]) == [False, True]


def test_the_curve_in_words_and_the_published_table():
    t = scaling.table(_records())
    lines = scaling.curve_in_words(t)
    # the verdicts along P, grouped by word; no cause named
    assert lines == ["- cora · sage · metis: `bns_gcn` equivalent within ±1 pt at P=2; costs at P=8 (P=2: equivalent "
                     "within ±1 pt: +0.0 [-0.1, +0.1] (3 seeds); P=8: costs 3.0 [1.8, 4.2] pt (3 seeds))"]
    csv = scaling.csv(_records()).set_index("workers")
    assert csv.loc[8, "effect_pt"] == -3.0 and csv.loc[8, "pairs"] == 3 and bool(csv.loc[8, "holm"])
    assert csv.loc[2, "kept_fraction"] == round(2 / 31, 4)
    assert list(csv["verdict"]) == ["equivalent", "costs"] and list(csv["margin_pt"]) == [1.0, 1.0]
    assert "| boundary rows kept (epoch 0) |" in scaling.markdown(t) and "| 0.065 |" in scaling.markdown(t)
    text = "\n".join(scaling.section(_records(), __import__("pathlib").Path("/tmp/scaling-test")))
    assert "2 comparisons" in text and "1 equivalent, 1 costs" in text and "within noise" not in text


def test_steps_to_target_count_a_methods_optimiser_steps_per_epoch(tmp_path):
    recs = _records()
    for r in recs:
        if r["control"]:  # three optimiser steps an epoch, as a local-rounds method states them
            for rank in r["summary"]["per_rank"]:
                rank["steps"] = 3 * len(r["history"])
    recs = records.load(write(tmp_path, recs))  # each run named by its file, as the timing reads them
    t = scaling.table(recs)
    assert (t["epochs_to_target"] > 0).all()
    assert list(t["steps_to_target"]) == list(3 * t["epochs_to_target"])
    assert "| steps to target |" in scaling.markdown(t)
    assert list(scaling.csv(recs)["steps_to_target"]) == list(t["steps_to_target"])


def _local_round_records() -> list[dict]:
    """`llcg` at its defaults and with 8 correction steps (each against `full_halo`) and its paper's comparator
    `ggs` (against `single`, which runs once at one worker) at P = 2 and 8, three seeds. Test accuracy in points:
    single 80; ggs 78, 77.5, 78.5 at every P; llcg 2 points below ggs at P=8, equal at P=2; correction_steps=8 80."""
    out = []
    for seed in range(3):
        def run(method, acc, workers, options=None, control=None):
            r = record(method, workers=workers, seed=seed, options=options, dataset="cora", extra=STUDY,
                       val=(0.3, acc + 0.01), comm=10 ** 5)
            r["control"], r["about"] = control, about(method)
            out.append(r)
        run("single", 0.80, 1)
        for workers in (2, 8):
            ggs = 0.78 + (seed - 1) * 0.005
            run("full_halo", 0.80, workers)
            run("ggs", ggs, workers, control="single")
            run("llcg", ggs - (0.02 if workers == 8 else 0.0), workers, control="full_halo")
            run("llcg", 0.80, workers, {"correction_steps": 8}, control="full_halo")
    return out


def test_attribution_rows_and_the_papers_comparator_along_p():
    t = scaling.table(_local_round_records()).set_index(["method", "workers"])
    assert set(t.index) == {(m, p) for m in ("ggs", "llcg", "llcg correction_steps=8") for p in (2, 8)}
    # ggs against single, which ran once at one worker: paired by seed at every P
    assert t.loc[("ggs", 8), "control"] == "single" and t.loc[("ggs", 8), "effect"].mean == pytest.approx(-0.02)
    assert t.loc[("llcg correction_steps=8", 8), "effect"].mean == pytest.approx(0.0, abs=1e-9)
    # llcg beside ggs, its paper's comparator: equal at P=2, 2 points below at P=8
    assert t.loc[("llcg", 2), "comparator"] == "ggs" and t.loc[("ggs", 2), "comparator"] == ""
    assert t.loc[("llcg", 2), "comparator_verdict"].word == "equivalent"
    assert t.loc[("llcg", 8), "comparator_verdict"].word == "costs"
    # every row against its control; both llcg rows against ggs at each P
    assert t.attrs["families"] == {("cora", "sage", "metis"): 6 + 4}
    text = scaling.markdown(t.reset_index())
    assert "| against the paper's comparator (test) |" in text and "vs `ggs`: costs 2.0" in text
    csv = scaling.csv(_local_round_records()).set_index(["method", "workers"])
    assert csv.loc[("llcg", 8), "comparator_verdict"] == "costs" and csv.loc[("ggs", 8), "comparator_verdict"] == ""


def test_a_comparison_without_two_pairs_is_not_counted_and_a_papers_claim_is_the_margin_it_tests():
    recs = [r for r in _local_round_records() if r["method"] != "ggs" or r["seed"] == 0]
    t = scaling.table(recs)
    # the llcg rows; ggs against single and llcg against ggs have one pair: no p
    assert t.attrs["families"] == {("cora", "sage", "metis"): 4}
    assert set(t[t["method"] == "ggs"]["verdict"].map(lambda v: v.text)) == {"not resolved (1 seed: no interval)"}
    # AdaQP's rows at their defaults are tested at its paper's claim (0.3 pt), and said so along P
    adaqp = []
    for seed in range(6):
        for workers in (2, 8):
            for method, options, control in (("adaqp", None, "adaqp bits=32"), ("adaqp", {"bits": 32}, None)):
                r = record(method, workers=workers, seed=seed, options=options, dataset="cora", extra=STUDY,
                           val=(0.3, 0.81 + (0.0001 if control and seed % 2 else 0)), comm=10 ** 5)
                r["control"], r["about"] = control, about(method)
                adaqp.append(r)
    t = scaling.table(adaqp)
    assert set(t["tested_margin_pt"]) == {0.3} and {v.word for v in t["verdict"]} == {"equivalent"}
    assert scaling.curve_in_words(t)[0].startswith("- cora · sage · metis: `adaqp` equivalent within ±0.3 pt at P=2, 8")
    assert set(scaling.csv(adaqp)["margin_pt"]) == {0.3}


def test_the_same_rows_on_another_partitioner_read_against_metis_seed_by_seed(tmp_path):
    # random parts: the approximation costs 1.0, 0.8 and 1.4 points at P=8 where METIS's cost 3.0, 2.5, 3.5
    recs = _records() + _records({2: (0.0, 0.0, 0.0), 8: (-1.0, -0.8, -1.4)}, partitioner="random", skew=0.1)
    t = scaling.table(recs)
    assert sorted(set(zip(t["partitioner"], t["workers"]))) == [("metis", 2), ("metis", 8), ("random", 2),
                                                                 ("random", 8)]
    b = scaling.between(t, "partitioner").set_index("workers")
    assert list(b.index) == [2, 8] and set(b["partitioner"]) == {"random"}
    # a difference of differences by seed: 2.0, 1.7, 2.1 points
    assert b.loc[8, "change"].mean == pytest.approx((0.020 + 0.017 + 0.021) / 3)
    assert b.loc[8, "verdict"].word == "gains" and b.loc[2, "verdict"].word == "equivalent"
    assert b.attrs["families"] == {("cora", "sage", "random"): 2}  # a difference of 0 at every seed: p = 1, a test
    assert b.loc[8, "label_skew_mean_baseline"] == pytest.approx(2.4) and b.loc[8, "label_skew_mean_other"] == \
        pytest.approx(0.8)
    # each regime its own Holm family: adding the random rows leaves METIS's verdicts as they were
    assert t.attrs["families"] == {("cora", "sage", "metis"): 2, ("cora", "sage", "random"): 2}
    alone = scaling.table(_records())
    assert [v.text for v in t[t["partitioner"] == "metis"]["verdict"]] == [v.text for v in alone["verdict"]]
    # seeds pair across partitioners by seed: a seed one side lacks is left out
    fewer = _records() + [r for r in _records({8: (-1.0, -0.8, -1.4)}, partitioner="random", skew=0.1)
                          if r["seed"] != 1]
    b2 = scaling.between(scaling.table(fewer), "partitioner").set_index("workers")
    assert b2.loc[8, "differences"] == pytest.approx([0.020, 0.021]) and b2.loc[8, "change"].n == 2
    page = "\n".join(scaling.section(recs, tmp_path))
    assert "### cora · sage · random" in page and "| random − metis (same seeds) |" in page
    assert page.count(" comparisons: ") == 2  # one count a regime's section
    assert "### Between partitioners: cora · sage, the same rows on random parts against metis parts" in page
    assert "| 2.40 → 0.80 |" in page  # the label skew on each side


def test_the_same_rows_with_the_full_split_read_against_the_public_split_seed_by_seed(tmp_path):
    # Cora's full split on the same METIS parts: the approximation costs 1.0, 0.8, 1.4 points at P=8
    recs = _records() + _records({2: (0.0, 0.0, 0.0), 8: (-1.0, -0.8, -1.4)}, skew=0.05, dataset="cora-full")
    t = scaling.table(recs)
    assert scaling.split_of("cora-full") == ("cora", "full") and scaling.split_of("cora") == ("cora", "public")
    assert scaling.between(t, "partitioner").empty  # one partitioner: nothing between partitioners
    b = scaling.between(t, "split").set_index("workers")
    assert list(b.index) == [2, 8] and set(b["dataset"]) == {"cora-full"} and set(b["baseline_dataset"]) == {"cora"}
    assert set(b["other"]) == {"full"} and set(b["partitioner"]) == {"metis"}
    assert b.loc[8, "change"].mean == pytest.approx((0.020 + 0.017 + 0.021) / 3)
    assert b.loc[8, "verdict"].word == "gains" and b.attrs["families"] == {("cora-full", "sage", "metis"): 2}
    assert t.attrs["families"] == {("cora", "sage", "metis"): 2, ("cora-full", "sage", "metis"): 2}
    page = "\n".join(scaling.section(recs, tmp_path))
    assert "### cora-full · sage · metis" in page and "| full − public (same seeds) |" in page
    assert ("### Between splits: cora · sage · metis, the same rows with the full split against the public split"
            in page) and "with Holm's correction over this table's 2 comparisons" in page
    assert "| 2.40 → 0.40 |" in page  # the label skew on each side at P=8
    assert "### Between partitioners" not in page


def test_llcgs_own_measure_is_the_share_of_psgd_pas_loss_to_ggs_it_recovers(tmp_path):
    """At P=8 `psgd_pa` is 4 points below `ggs` and `llcg` wins back half of it on every seed (50 %); at P=2
    `ggs` and `psgd_pa` are level, so the share is unbounded. Beside them, LLCG's Table 1 from papers.csv."""
    out = []
    for seed in range(4):
        def run(method, acc, workers, control=None):
            r = record(method, workers=workers, seed=seed, dataset="cora", extra=STUDY, val=(0.3, acc + 0.01))
            r["control"], r["about"] = control, about(method)
            out.append(r)
        run("single", 0.80, 1)
        for workers, loss in ((2, 0.0), (8, 0.04)):
            ggs, wobble = 0.78 + (seed - 1.5) * 0.004, (-1) ** seed * 0.002
            run("full_halo", 0.80, workers)
            run("ggs", ggs, workers, control="single")
            run("psgd_pa", ggs - loss + wobble, workers, control="full_halo")
            run("llcg", ggs - loss / 2 + wobble, workers, control="full_halo")
    r = scaling.recovered_share(scaling.table(out)).set_index("workers")
    assert list(r.index) == [2, 8]
    assert r.loc[8, "share"].estimate == pytest.approx(0.5) and r.loc[8, "share"].bounded
    assert r.loc[8, "loss"].mean == pytest.approx(0.04) and r.loc[8, "gain"].n == 4
    assert not r.loc[2, "share"].bounded and r.loc[2, "share"].text() == \
        "unbounded: the denominator is not resolved (4 seeds)"
    page = "\n".join(scaling.section(out, tmp_path))
    assert "### llcg's own measure: the share of `psgd_pa`'s loss to `ggs` it recovers" in page
    assert "its 12 graph-model rows recover 42-100 % (median 69 %" in page
    assert "| cora · sage · metis | 8 | +4.0 [" in page and "| 50 % [" in page
    # without one of the three at a P, no row: the bns_gcn page has none
    assert scaling.recovered_share(scaling.table(_records())).empty
