"""The two-stage seed plan's second stage (`python -m analysis seeds`): from the first stage's records, one
sweep command per unresolved row, running the seeds its half-width needs up to the cap, numbered on from the
seeds it has; resolved and equivalent rows get none."""
from __future__ import annotations

import pytest

from analysis import paired, records
from analysis.__main__ import main
from analysis.seed_plan import overrides, plan
from tests.analysis.handmade import write
from tests.analysis.studies.test_findings import _records

pytestmark = pytest.mark.fast


def test_each_unresolved_row_gets_the_command_that_runs_the_seeds_it_needs(tmp_path):
    recs = records.load(write(tmp_path / "records", _records()))
    lines = plan(recs, cap=30)
    commands = [line for line in lines if line.startswith("python")]
    # bns_gcn at its defaults: -1, -1, -2 over 3 seeds (sd 0.58 pt): not resolved; +-0.5 pt needs 8 seeds
    need = paired.seeds_for_half_width(100 * 0.005773502691896258, 0.5).n
    assert need == 8
    assert ("python -m benchmarks.commands.sweep experiment=findings method=bns_gcn dataset=cora model=sage "
            "workers=2 'sweep.variants=[[]]' seed=3,4,5,6,7") in commands
    assert any("bns_gcn (cora, sage, P=2): not resolved" in line and "runs 5 more (to 8)" in line for line in lines)
    # the rows that cost on every seed by the same amount (sd 0: resolved) ask for nothing
    assert not any("method=psgd_pa dataset=cora model=sage workers=2 seed" in c and "partitioner" not in c
                   for c in commands)
    # an attribution row keeps its option and its partitioner
    assert all(c.split("seed=")[0].count("method=") == 1 for c in commands)
    for c in commands:
        if "correction_steps" in c:
            assert "method=llcg method.correction_steps=8" in c


def test_the_cap_bounds_the_seeds_and_says_so(tmp_path):
    recs = records.load(write(tmp_path / "records", _records()))
    lines = plan(recs, cap=5)
    assert ("python -m benchmarks.commands.sweep experiment=findings method=bns_gcn dataset=cora model=sage "
            "workers=2 'sweep.variants=[[]]' seed=3,4") in lines
    assert any("(to 5, the cap: it needs 8)" in line for line in lines)


def test_a_rows_overrides_name_its_method_options_savers_and_partitioner():
    row = {"method": "ggs fanouts=[15, 10] kernel=messages memory.checkpoint=layer", "dataset": "cora",
           "model": "gcn", "workers": 8, "partitioner": "random"}
    config = {"method": {"name": "ggs", "fanouts": [15, 10]}, "kernel": "messages", "memory": {"checkpoint": "layer"}}
    assert overrides(row, "metis", config) == ["method=ggs", "method.fanouts=[15,10]", "kernel=messages",
                                               "memory.checkpoint=layer", "dataset=cora", "model=gcn", "workers=8",
                                               "partitioner=random"]


def test_the_command_prints_the_plan_and_refuses_a_bad_cap(tmp_path, capsys):
    folder = write(tmp_path / "records", _records())
    main(["seeds", str(folder)])
    assert "experiment=findings method=bns_gcn" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["seeds", str(folder), "--cap", "1"])
    assert e.value.code == 2
    assert "--cap takes whole numbers of at least 2" in capsys.readouterr().err


def test_the_scaling_studys_unresolved_rows_get_their_sweep_at_their_p(tmp_path):
    """A scaling row whose 3 seeds leave it unresolved (-1, -0.5, -2 points at P=8) gets the sweep of its P."""
    from tests.analysis.studies import test_scaling

    gaps = dict(test_scaling.GAP)
    test_scaling.GAP.clear()
    test_scaling.GAP.update({2: (0.0, 0.0, 0.0), 8: (-1.0, -0.5, -2.0)})
    try:
        recs = records.load(write(tmp_path / "records", test_scaling._records()))
    finally:
        test_scaling.GAP.clear()
        test_scaling.GAP.update(gaps)
    lines = plan(recs, cap=30)
    assert any(line.startswith("# bns_gcn (cora, sage, P=8): not resolved") for line in lines)
    (command,) = [line for line in lines if line.startswith("python")]
    assert command.startswith("python -m benchmarks.commands.sweep experiment=scaling method=bns_gcn dataset=cora "
                              # no `single` here: the partitioner is named
                              "model=sage workers=8 partitioner=metis 'sweep.variants=[[]]' "
                              "seed=3,4,")


def test_a_row_measured_against_single_runs_single_on_its_new_seeds(tmp_path, monkeypatch):
    from tests.analysis.studies import test_findings
    monkeypatch.setitem(test_findings.ACC, "ggs", (0.79, 0.83, 0.80))  # -1, +1, -1 against single: not resolved
    lines = plan(records.load(write(tmp_path / "records", _records())), cap=30)
    assert any(line.startswith("python -m benchmarks.commands.sweep experiment=findings method=ggs,single "
                               "dataset=cora model=sage workers=2 'sweep.variants=[[]]' seed=3,") for line in lines)


def test_a_row_between_partitioners_runs_its_seeds_on_both_and_a_rows_seeds_are_its_partitioners(tmp_path):
    """Random parts cost 1.0, 2.5, 4.5 points at P=8 where METIS's cost 3.0, 2.5, 3.5: the difference between
    the partitioners (+2.0, 0, -1.0) is not resolved, so its sweep runs new seeds on both partitioners; each
    partitioner's own row is planned from its own runs."""
    from tests.analysis.studies import test_scaling

    metis = test_scaling._records()
    random_parts = [r for r in test_scaling._records({2: (0.0, 0.0, 0.0), 8: (-1.0, -2.5, -4.5)},
                                                     partitioner="random", skew=0.1)]
    for r in metis:  # METIS's rows also ran a seed more, which the random row's plan must not count as its own
        if r["seed"] == 2:
            metis.append({**r, "seed": 3})
    lines = plan(records.load(write(tmp_path / "records", metis + random_parts)), cap=30)
    between = [i for i, line in enumerate(lines) if "random against metis parts" in line and "P=8" in line]
    assert len(between) == 1 and "not resolved" in lines[between[0]]
    assert lines[between[0] + 1].startswith(
        "python -m benchmarks.commands.sweep experiment=scaling method=bns_gcn dataset=cora model=sage workers=8 "
        "partitioner=metis,random 'sweep.variants=[[]]' seed=4,5,")
    assert not any("random against metis parts" in line and "P=2" in line for line in lines)  # 0 at every seed
    (own,) = [line for line in lines if line.startswith("python") and line.split("'")[0].endswith(
        "workers=8 partitioner=random ")]
    assert "seed=3,4," in own  # numbered on from the random row's seeds (0-2), not METIS's


def test_a_row_between_splits_runs_its_seeds_on_both_graphs_each_at_the_rates_its_preset_chose(tmp_path):
    """The full split costs 1.0, 2.5, 4.5 points at P=8 where the public split's cost 3.0, 2.5, 3.5: the
    difference (+2.0, 0, -1.0) is not resolved, so new seeds run on both, Cora at experiment=scaling's rates
    and cora-full at the rates its own preset chose (the records' `sweep.lr_by_family`), one sweep each."""
    from benchmarks.commands.composition import config_of
    from tests.analysis.studies import test_scaling

    full_rates = {"FullGraphMethod": 0.003, "LocalRounds": 0.03}
    public = test_scaling._records()
    full = test_scaling._records({2: (0.0, 0.0, 0.0), 8: (-1.0, -2.5, -4.5)}, skew=0.05, dataset="cora-full")
    for r in public:
        r["config"]["sweep"] = config_of(["experiment=scaling"])["sweep"]
    for r in full:
        r["config"]["sweep"] = {"lr_by_family": full_rates}
    lines = plan(records.load(write(tmp_path / "records", public + full)), cap=30)
    at = [i for i, line in enumerate(lines) if "the full split against the public" in line]
    assert len(at) == 1 and "(cora-full, sage, P=8)" in lines[at[0]] and "not resolved" in lines[at[0]]
    cora, cora_full = lines[at[0] + 1], lines[at[0] + 2]
    assert cora.startswith("python -m benchmarks.commands.sweep experiment=scaling method=bns_gcn dataset=cora "
                           "model=sage workers=8 partitioner=metis 'sweep.variants=[[]]' seed=3,4,")
    assert cora_full.startswith("python -m benchmarks.commands.sweep experiment=scaling method=bns_gcn "
                                "dataset=cora-full model=sage workers=8 partitioner=metis "
                                "'sweep.lr_by_family={FullGraphMethod:0.003,LocalRounds:0.03}' "
                                "'sweep.variants=[[]]' seed=3,4,")
    assert cora.split("seed=")[1] == cora_full.split("seed=")[1]  # the same seeds: they pair
