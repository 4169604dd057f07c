"""Study sections of the report, on hand-made records with known answers: what the bench scripts
printed now comes from `python -m analysis report` over the study's records."""
from __future__ import annotations

import pytest

from analysis import records, report, studies
from tests.analysis.handmade import record, write

FIT = {"key": "dataset.nodes", "start": 100, "factor": 2, "tolerance": 0.1,
       "field": "summary.train_mem_delta_bytes_max", "at_most": 100}


def digest_run(method, val, by_cat, options=None):
    return record(method, 4, val=val, by_cat=by_cat, options=options, dataset="citeseer", model="gcn",
                  extra={"study": "digest", "partitioner": "metis"})


def fit_probe(method, nodes, train_mem, status="ok", options=None):
    return record(method, 4, train_mem=train_mem, status=status, model="gat", options=options,
                  extra={"study": "sar_fit", "dataset": {"name": "synthetic", "nodes": nodes},
                         "sweep": {"bisect": FIT}})


@pytest.fixture
def folder(tmp_path):
    return write(tmp_path / "r", [
        digest_run("full_halo", (0.5, 0.7, 0.9), {"halo_fwd": 3000, "halo_bwd": 3000, "eval": 7}),
        digest_run("digest", (0.5, 0.7, 0.895), {"stale_sync": 300, "halo_inputs": 600}),
        digest_run("digest", (0.5, 0.6, 0.7), {"stale_sync": 300}, options={"sync_every": 50}),
        digest_run("psgd_pa", (0.5, 0.7, 0.8), {}),
        record("single", 1, train_mem=400, epoch_time=4.0, extra={"study": "sar_memory"}),
        record("full_halo", 4, train_mem=200, epoch_time=1.0, extra={"study": "sar_memory"}),
        record("sar", 4, train_mem=100, epoch_time=2.0, options={"mode": "sar"}, extra={"study": "sar_memory"}),
        record("sar", 4, train_mem=90, epoch_time=3.0, options={"mode": "sa"}, extra={"study": "sar_memory"}),
        fit_probe("full_halo", 100, 50), fit_probe("full_halo", 200, 150), fit_probe("full_halo", 150, 90),
        fit_probe("sar", 100, 30, options={"mode": "sar"}), fit_probe("sar", 200, 60, options={"mode": "sar"}),
        fit_probe("sar", 400, 0, status="failed", options={"mode": "sar"}),
        record("full_halo", 2),  # no study: the general tables only
    ])


def test_the_report_has_the_sections_of_the_studies_whose_records_are_there(folder, tmp_path):
    text = report.build(folder, tmp_path / "out").read_text()
    assert text.index("## Study: DIGEST") < text.index("## Published numbers")
    assert "## Study: SAR's memory against workers" in text and "## Study: the largest graph" in text
    assert "## Study: sampling" not in text and "## Study: the runtime" not in text  # no records of theirs
    assert "(figures/digest/citeseer/accuracy_vs_time.png)" in text
    assert (tmp_path / "out" / "figures" / "digest" / "citeseer" / "accuracy_vs_time.pdf").exists()


def test_digest_goals_compare_digest_with_full_halo_in_its_setting(folder):
    recs = studies.of(records.load(folder), "digest")
    text = "\n".join(studies.digest.section(recs, folder / "out"))
    assert ("- citeseer metis gcn: digest s=10 test 88.5 vs full_halo 89.0 (gap +0.5 pt, goal <= 1: met); "
            "halo bytes 0.050x of full_halo (goal <= 0.125: met; 0.150x with the one-time input fetch amortised); "
            "psgd_pa 79.0") in text
    assert "| citeseer | metis | gcn | digest sync_every=50 | 69.0 |" in text


def test_sar_sections_give_ratios_at_4_workers_and_the_largest_fitting_graph(folder):
    recs = records.load(folder)
    memory = "\n".join(studies.sar.memory_section(studies.of(recs, "sar_memory"), folder))
    assert "- sage: sar/single memory 0.25x, sar/full_halo memory 0.50x, sar/full_halo time 2.00x" in memory
    assert "| sage | sar mode=sa | 4 |" in memory
    fit = "\n".join(studies.sar.fit_section(studies.of(recs, "sar_fit"), folder))
    assert "meets `summary.train_mem_delta_bytes_max <= 100`" in fit
    assert "| gat | full_halo | 4 | 150 | 200 | 3 |" in fit
    assert "| gat | sar | 4 | 200 | 400 | 3 |" in fit  # a failed probe does not fit
    assert "sar / full_halo: 1.33x the graph." in fit


def test_runtime_section_gives_the_ratios_against_plain_pyg(tmp_path):
    runs = [record(method, workers, epoch_time=t, peak=2 ** 30, dataset="synthetic", model=model,
                   extra={"study": "runtime"})
            for model, pyg in (("gcn", 2.0), ("sage", 5.0))
            for method, workers, t in (("pyg_plain", 1, pyg), ("single", 1, 1.0), ("full_halo", 1, 1.2))]
    text = "\n".join(studies.runtime.section(records.load(write(tmp_path / "r", runs)), tmp_path))
    assert "| synthetic | gcn | 2.000 | 1.000 | 1.200 | 2.00x | 1.20x | 1.00 | 1.00 |" in text
    assert "- synthetic sage: PyG / single 5.00x (goal >= 3: met)" in text
    assert "- synthetic gcn: full_halo(1) / single 1.20x (goal <= 1.1: NOT met)" in text


def boundary_run(method, seed, best, by_cat, blocked, options=None, control=None):
    """3 epochs, 2 ranks, best validation accuracy `best` (test: best - 0.01); `blocked`: each rank's
    seconds blocked in halo_fwd over the run; `control`: the variant of its exact control."""
    per_rank = [{"rank": i, "comm_blocked_s_by_category": {"halo_fwd": b, "grad_allreduce": 9.0}}
                for i, b in enumerate(blocked)]
    r = record(method, 2, seed=seed, val=(0.5, 0.6, best), by_cat=by_cat, options=options, dataset="cora",
               extra={"study": "boundary", "partitioner": "metis"}, summary={"per_rank": per_rank})
    return {**r, "control": control}


def test_boundary_attributes_each_method_to_its_control_and_the_treatment_to_full_halo_seed_by_seed(tmp_path):
    exact = {"halo_fwd": 3000, "halo_bwd": 3000}
    off = {"threshold": 0.0}
    folder = write(tmp_path / "b", [
        *(boundary_run("full_halo", s, v, exact, [3.0, 6.0]) for s, v in enumerate((0.80, 0.82, 0.78))),
        # Sancus's control: +4, +3, +5 points over full_halo seed by seed (the treatment, resolved)
        *(boundary_run("sancus", s, v, {"halo_fwd": 3000, "halo_bwd": 3000}, [2.0, 2.0], options=off)
          for s, v in enumerate((0.84, 0.85, 0.83))),
        # Sancus: -0.5, -0.5, 0 points from its control (not resolved: the interval spans -1), 0.3x its bytes
        *(boundary_run("sancus", s, v, {"halo_fwd": 900, "halo_bwd": 800, "skip_flags": 100,
                                        **({"halo_inputs": 300} if s == 0 else {})}, [1.0, 1.0],
                       control="sancus threshold=0.0") for s, v in enumerate((0.835, 0.845, 0.83))),
        # one seed of PipeGCN and its control: no interval; waits 0.1x and 0.5x the control's, rank by rank
        boundary_run("pipegcn", 0, 0.85, exact, [0.3, 3.0], control="pipegcn pipeline=False"),
        boundary_run("pipegcn", 0, 0.84, exact, [3.0, 6.0], options={"pipeline": False}),
    ])
    t = studies.boundary.table(records.load(folder))
    by = {r["variant"]: r for r in t.to_dict("records")}
    sancus = by["sancus"]
    assert sancus["control"] == "sancus threshold=0.0" and sancus["seeds"] == 3
    assert sancus["approximation"].n == 3 and sancus["approximation"].mean == pytest.approx(-0.01 / 3)
    assert not sancus["approximation"].resolved
    assert sancus["treatment"].mean == pytest.approx(0.04) and sancus["treatment"].resolved  # control - full_halo
    assert by["sancus threshold=0.0"]["treatment"].mean == pytest.approx(0.04)
    assert sancus["bytes_vs_control"] == pytest.approx(1800 / 6000) == sancus["bytes_vs_full_halo"]
    assert sancus["inputs_bytes_per_epoch"] == pytest.approx(100 / 3)  # one seed of three fetched, per epoch
    assert by["pipegcn"]["wait_ratio_worst"] == pytest.approx(0.5)
    lines = "\n".join(studies.boundary.goals(t))
    assert ("cora P=2 sancus: against `sancus threshold=0.0` -0.3 [-1.1, +0.4] (3, not resolved) pt (goal >= -1 on "
            "the interval: unresolved (the interval spans -1)); halo bytes 0.300x its control's (goal <= 0.5: met)"
            ) in lines
    assert ("pipegcn: against `pipegcn pipeline=False` +1.0 (1 pair: no interval) pt (goal >= -1 on the interval: "
            "unresolved (fewer than 2 paired seeds)); halo wait 0.50x its control's on its worst rank (goal <= 0.2: "
            "NOT met)") in lines
    headlines = "\n".join(studies.boundary.headlines(t))
    assert ("its control `sancus threshold=0.0` is above `full_halo` by +4.0 [+1.5, +6.5] (3) pt (treatment)"
            in headlines)
    assert "sancus is below" not in headlines  # contains 0: never a headline
    text = "\n".join(studies.sections(records.load(folder), tmp_path / "out"))
    assert ("## Study: boundary communication" in text
            and (tmp_path / "out/figures/boundary/accuracy_vs_halo_bytes.png").exists())
