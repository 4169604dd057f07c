"""Loader, aggregation and the answers' arithmetic, on hand-made records with known answers."""
from __future__ import annotations

import json
import math

import pytest

from analysis import records as rec
from analysis import report
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast


@pytest.fixture
def folder(tmp_path):
    return write(tmp_path / "r", [
        record("single", 1, epoch_time=4.0, peak=800, train_mem=400, val=(0.2, 0.6, 0.8)),
        record("full_halo", 1, epoch_time=4.4, peak=900, train_mem=400),
        record("full_halo", 2, seed=0, epoch_time=2.0, peak=500, train_mem=200, comm=1000, val=(0.3, 0.8, 0.85)),
        record("full_halo", 2, seed=1, epoch_time=3.0, peak=700, train_mem=220, comm=1000),
        record("full_halo", 4, epoch_time=1.0, peak=300, train_mem=100, comm=3000),
        record("sar", 2, epoch_time=2.5, options={"mode": "sa", "prefetch": 1}),
        record("sar", 4, status="failed", val=(0.3,), error="RuntimeError: rank 1 died", options={"mode": "sa"}),
    ])


def test_loader_reads_records_only_and_says_what_to_do_with_an_empty_folder(folder, tmp_path):
    (folder / "summary.json").write_text(json.dumps({"rows": []}))  # a benchmark's summary, not a record
    (folder / "broken.json").write_text("{")
    records = rec.load(folder)
    assert len(records) == 7 and all("_path" in r for r in records)
    (tmp_path / "empty").mkdir()
    for empty in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(rec.NoRecords, match=r"^no records in .*; run `python -m benchmarks.commands.sweep"):
            rec.load(empty)


def test_runs_table_has_one_row_per_run_and_keeps_failed_runs(folder):
    runs = rec.runs(rec.load(folder))
    assert len(runs) == 7
    failed = runs[runs["status"] == "failed"].iloc[0]
    assert failed["error"] == "RuntimeError: rank 1 died" and math.isnan(failed["epoch_time_s"])
    assert failed["epochs_run"] == 1
    # variants are named by their non-default options (prefetch=1 is sar's default)
    assert set(runs["variant"]) == {"single", "full_halo", "sar mode=sa"}
    assert runs["setting"].nunique() == 1  # method, workers and seed are comparison axes, not the setting


def test_history_is_long_with_cumulative_training_time(folder):
    hist = rec.history(rec.load(folder))
    one = hist[(hist["method"] == "full_halo") & (hist["workers"] == 2) & (hist["seed"] == 1)]
    assert list(one["epoch"]) == [0, 1, 2] and list(one["wall_time_s"]) == [3.0, 6.0, 9.0]
    assert len(hist[hist["status"] == "failed"]) == 1  # the failed run's epochs reached


def test_aggregate_means_and_stds_over_seeds_and_marks_all_failed_configs(folder):
    agg = rec.aggregate(rec.runs(rec.load(folder)))
    two = agg[(agg["variant"] == "full_halo") & (agg["workers"] == 2)].iloc[0]
    assert two["n_ok"] == 2 and two["epoch_time_s"] == 2.5 and two["peak_rss_bytes"] == 600
    assert two["epoch_time_s_std"] == pytest.approx(math.sqrt(0.5))
    one = agg[(agg["variant"] == "full_halo") & (agg["workers"] == 1)].iloc[0]
    assert math.isnan(one["epoch_time_s_std"])  # one seed: no spread
    sar4 = agg[(agg["method"] == "sar") & (agg["workers"] == 4)].iloc[0]
    assert sar4["status"] == "failed" and sar4["n_failed"] == 1 and sar4["error"] == "RuntimeError: rank 1 died"


def test_speedup_against_one_worker_and_against_single(folder):
    sp = rec.speedup(rec.aggregate(rec.runs(rec.load(folder))))
    get = lambda v, w, c: sp[(sp["variant"] == v) & (sp["workers"] == w)][c].iloc[0]  # noqa: E731
    assert get("full_halo", 2, "speedup_vs_1") == pytest.approx(4.4 / 2.5)
    assert get("full_halo", 2, "speedup_vs_single") == pytest.approx(4.0 / 2.5)  # mean time over seeds
    # 4 ranks on the records' 2 cores: time-slicing, not a speed (no speedup is stated)
    assert math.isnan(get("full_halo", 4, "speedup_vs_1")) and math.isnan(get("full_halo", 4, "speedup_vs_single"))
    assert math.isnan(get("sar mode=sa", 2, "speedup_vs_1"))  # no 1-worker sar run
    assert get("sar mode=sa", 2, "speedup_vs_single") == pytest.approx(1.6)
    assert math.isnan(get("sar mode=sa", 4, "speedup_vs_single"))  # failed


def test_memory_scaling_against_the_ideal_one_over_p_line(folder):
    mem = rec.memory_scaling(rec.aggregate(rec.runs(rec.load(folder))), "train_mem_bytes")
    row = mem[(mem["variant"] == "full_halo") & (mem["workers"] == 4)].iloc[0]
    assert row["ref_workers"] == 1 and row["ideal"] == 100 and row["vs_ideal"] == 1.0
    sar = mem[(mem["variant"] == "sar mode=sa") & (mem["workers"] == 2)].iloc[0]
    assert sar["ideal"] == 200  # no 1-worker sar run: the line starts at single (400 / 2)


def test_time_to_accuracy(folder):
    records = rec.load(folder)
    runs = rec.runs(records)
    tta = rec.time_to_accuracy(rec.history(records), runs, target=0.8)
    get = lambda m, w, s: tta[(tta["method"] == m) & (tta["workers"] == w) & (tta["seed"] == s)].iloc[0]  # noqa: E731
    assert get("single", 1, 0)["time_to_target_s"] == 12.0 and get("single", 1, 0)["epoch_to_target"] == 3
    assert get("full_halo", 2, 0)["time_to_target_s"] == 4.0  # reached at its 2nd epoch of 2 s
    assert math.isnan(get("sar", 4, 0)["time_to_target_s"])  # failed before reaching it
    default = rec.time_to_accuracy(rec.history(records), runs)
    assert default["target"].iloc[0] == pytest.approx(0.95 * 0.9)  # 95 % of the best val accuracy there


def test_comm_by_category_is_training_bytes_per_epoch(folder):
    comm = rec.comm_by_category(rec.runs(rec.load(folder)))
    four = comm[(comm["workers"] == 4)].set_index("category")["bytes_per_epoch"]
    assert dict(four) == {"grad_allreduce": 750, "halo_fwd": 2250}  # eval and setup are not training


def test_peak_memory_is_pss_where_records_have_it_and_rss_labelled_where_not(tmp_path):
    """A record with PSS is reported by it (largest rank, and the sum over ranks); a record from
    before PSS by its RSS, marked as such, in the runs and in the configuration's aggregate."""
    mib = 2 ** 20
    pss = {"peak_pss_bytes_max": 600 * mib, "peak_pss_bytes_sum": 1100 * mib}
    recs = rec.load(write(tmp_path / "r", [record("full_halo", 2, peak=800 * mib, summary=pss),
                                           record("full_halo", 4, peak=500 * mib),
                                           record("full_halo", 4, seed=1, peak=700 * mib, summary=pss)]))
    runs = rec.runs(recs).sort_values(["workers", "seed"])
    assert list(runs["peak_mem_bytes"] / mib) == [600, 500, 600]
    assert list(runs["peak_mem_kind"]) == ["PSS", "RSS", "PSS"]
    assert list(runs["peak_rss_bytes"] / mib) == [800, 500, 700]
    agg = rec.aggregate(runs)
    assert list(agg["peak_mem_kind"]) == ["PSS", "PSS/RSS"]  # one seed of each kind: the table says so
    table = report.runs_table(rec.speedup(agg))
    assert "| 600 | 1100 |" in table and "| 550 ± 71 (PSS/RSS) |" in table


def test_a_record_the_tables_cannot_use_is_skipped_with_one_line_and_the_report_goes_on(tmp_path, capsys):
    """Hand-edited records (a worker count in words, a summary field gone, an epoch time that is
    not a number, broken JSON) are each skipped with one warning line naming the file and the
    problem; the good record makes the report."""
    good = record("full_halo", 2, comm=1000)
    bad = {"words": {**record("full_halo", 2, seed=1), "workers": "two"},
           "no_median": record("full_halo", 2, seed=2), "text_time": record("full_halo", 2, seed=3)}
    del bad["no_median"]["summary"]["epoch_time_s_median"]
    bad["text_time"]["history"][1]["epoch_time_s"] = "fast"
    folder = write(tmp_path / "r", [good])
    for name, r in bad.items():
        (folder / f"{name}.json").write_text(json.dumps(r))
    (folder / "cut.json").write_text(json.dumps(good)[:-20])
    records = rec.load(folder)
    assert [r["seed"] for r in records] == [0]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 4 and all(line.startswith("skipping ") for line in warnings)
    for name, problem in (("words", "field 'workers' is 'two', not a whole number"),
                          ("no_median", "missing field 'epoch_time_s_median'"),
                          ("text_time", "ValueError"), ("cut", "unreadable")):
        assert any(f"{name}.json" in line and problem in line for line in warnings), (name, warnings)
    path = report.build(folder, tmp_path / "out")
    assert "| synthetic | sage | full_halo | 2 |" in path.read_text()


def test_late_validation_gain_tells_a_run_still_rising_from_one_that_levelled_off():
    """The best validation accuracy of the run's last third less the best before it (what
    accuracy_vs_comm marks with an arrow at 2 points or more); NaN without an evaluation in both."""
    rising = record("full_halo", 2, val=(0.3, 0.4, 0.5, 0.6, 0.7, 0.8))
    flat = record("psgd_pa", 2, val=(0.8, 0.9, 0.9, 0.9, 0.9, 0.89))
    short = record("sar", 2, val=(0.5,))
    gains = rec.runs([rising, flat, short])["late_val_gain"]
    assert gains[0] == pytest.approx(0.8 - 0.6) and gains[1] == pytest.approx(0.0) and gains[2] != gains[2]


def test_the_fixed_budget_reads_the_best_check_of_the_first_epochs_from_a_longer_runs_history(tmp_path):
    """A run of 60 epochs whose validation peaks at epoch 55: within the budget (50 epochs, a check every 5th:
    epochs 4, 9, ..., 49) its best check is epoch 9 (the first of two equal bests), and the test accuracy
    there is what a 50-epoch run would have reported. A run whose K grows toward its cap reads NaN."""
    val = [0.1] * 60
    val[9], val[19], val[12], val[55] = 0.7, 0.7, 0.9, 0.95  # epoch 12 is no check; 19 ties 9 later
    runs = [record("psgd_pa", 2, val=tuple(val), epochs=60),
            record("psgd_pa", 2, seed=1, val=tuple(val), epochs=60, options={"local_steps_rho": 1.1}),
            record("psgd_pa", 2, seed=2, val=(0.5,) * 3, epochs=3)]
    recs = rec.load(write(tmp_path / "r", runs))
    df = rec.runs(recs).sort_values("seed")
    at = rec.test_at_budget(rec.history(recs), df, 50)
    assert at.iloc[0] == pytest.approx(0.7 - 0.01)  # handmade records' test is val - 0.01
    assert math.isnan(at.iloc[1])  # its first epochs depend on its cap
    assert math.isnan(at.iloc[2])  # 3 epochs: no check at epoch 4
    assert rec.test_at_budget(rec.history(recs), df, epochs=60, every=1).iloc[0] == pytest.approx(0.95 - 0.01)
