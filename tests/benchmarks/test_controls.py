"""Every approximate method names its exact control (`Method.About.exact_control`, `method.control_config`):
the same run with the approximation switched off and everything else (seed, partition, model, layer 0)
kept; a sweep with `sweep.controls` runs each control once beside the runs it controls. In-process:
configurations are composed and checked, no run is started."""
from __future__ import annotations

import pytest

from benchmarks.commands import sweep
from benchmarks.commands.composition import config_of
from benchmarks.run.config import check, control_config
from benchmarks.run.method import method_defaults
from benchmarks.run.record import run_variant

pytestmark = pytest.mark.fast


def control_variant(*overrides: str) -> str | None:
    control = control_config(check(config_of(list(overrides))))
    return None if control is None else run_variant(control.as_dict(), method_defaults(control.method_name))


@pytest.mark.parametrize("overrides, control", [
    (["method=pipegcn"], "pipegcn pipeline=False"),
    # an alias switched off is its plugin: pipegcn, pipegcn_f, _g and _gf share one control
    (["method=pipegcn_gf"], "pipegcn pipeline=False"), (["method=pipegcn_f"], "pipegcn pipeline=False"),
    (["method=bns_gcn", "method.boundary_fraction=0.2"], "bns_gcn boundary_fraction=1.0"),
    (["method=sancus"], "sancus threshold=0.0"),
    (["method=adaqp"], "adaqp bits=32"),
    # another method keeps the options both declare: the layer-0 treatment
    (["method=digest"], "full_halo layer0=cached"),
    (["method=digest", "method.layer0=precomputed", "method.sync_every=4"], "full_halo layer0=precomputed"),
    (["method=psgd_pa"], "full_halo"),
    (["method=llcg"], "full_halo"),
    # a lossy codec is switched off; the run's other savers are kept
    (["method=full_halo", "comm.quantize=int8", "precision=bf16"], "full_halo precision=bf16"),
    # exact runs, and approximations already switched off, are their own control
    (["method=full_halo"], None), (["method=full_halo", "method.layer0=precomputed"], None), (["method=sar"], None),
    (["method=pipegcn", "method.pipeline=false"], None), (["method=bns_gcn", "method.boundary_fraction=1"], None),
])
def test_each_method_names_its_exact_control(overrides, control):
    assert control_variant(*overrides) == control


def test_a_sweep_with_controls_runs_each_control_once_and_not_twice_what_it_has(capsys):
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0,1", "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("# ")]  # the commands
    assert len(lines) == 2 * 6 + 2 * 4  # six methods; four controls (psgd_pa's, full_halo, is in the sweep)
    controls = [line for line in lines if "method.pipeline=false" in line or "method.layer0=cached" in line]
    assert len(controls) == 4 and all("seed=" in line and "dataset=cora" in line for line in controls)
    # the control's overrides compose to the run named by hand: the same record
    run = ["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=digest", "method.sync_every=4"]
    control = sweep.control_overrides(run, check(config_of(run)))
    assert control == ["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=full_halo",
                       "method.layer0=cached"]
    by_hand = config_of(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=full_halo",
                         "method.layer0=cached"])
    assert sweep.path_of(check(config_of(control))) == sweep.path_of(check(by_hand))


LR_BY_FAMILY = "+sweep.lr_by_family={LocalRounds:0.03,MiniBatchMethod:0.003,FullGraphMethod:0.01}"


def _lr_of(line: str) -> str:
    return next(o for o in line.split() if o.startswith("lr=")).split("=", 1)[1]


def test_every_run_and_its_control_train_at_their_own_familys_learning_rate(capsys):
    """`sweep.lr_by_family`: psgd_pa (LocalRounds) at 0.03, its control `full_halo` at the full-graph 0.01 (the
    same run as `full_halo` of the sweep: one run), ggs and its control `single` each at their own families';
    `lr` is an axis of a record, so a method and its control still share a setting and pair by seed."""
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=psgd_pa,ggs,full_halo",
                 LR_BY_FAMILY, "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("python")]
    by_method = {next(o for o in line.split() if o.startswith("method=")): _lr_of(line) for line in lines}
    assert by_method == {"method=psgd_pa": "0.03", "method=ggs": "0.003", "method=full_halo": "0.01",
                         "method=single": "0.01"}
    assert len(lines) == 4  # psgd_pa's control is the sweep's full_halo, not a second run
    from benchmarks.run.record import setting_config
    import shlex
    configs = [check(config_of(shlex.split(line)[3:])) for line in lines]
    settings = {str(sorted(setting_config(c.as_dict()).items(), key=str)) for c in configs if c.workers == 2}
    assert len(settings) == 1


def test_the_command_line_or_an_lr_axis_wins_over_the_family_rate_and_a_misspelt_family_is_refused(capsys):
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=psgd_pa", "lr=0.2",
                 LR_BY_FAMILY, "--dry-run"])
    assert {_lr_of(line) for line in capsys.readouterr().out.splitlines() if line.startswith("python")} == {"0.2"}
    runs, _ = sweep.expand(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=psgd_pa",
                            "lr=0.001,0.1", LR_BY_FAMILY])
    assert sorted(_lr_of(" ".join(r)) for r in runs) == ["0.001", "0.1"]
    with pytest.raises(SystemExit) as e:
        sweep.sweep(["experiment=boundary_methods", "dataset=cora", "seed=0", "method=psgd_pa",
                     "+sweep.lr_by_family={LocalRound:0.03}", "--dry-run"])
    assert e.value.code == 2
    assert "sweep.lr_by_family names LocalRound, not a family; the families: FullGraphMethod" in capsys.readouterr().err


def test_a_command_line_method_keeps_its_control_and_a_variants_lr_its_rate(capsys):
    """The commands `python -m analysis seeds` prints name the method on the command line: its control is
    still run (at its own family's rate); a variant or rule that sets `lr` keeps it; a sweep over rates
    gives each control its run's rate."""
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=10,11", "method=psgd_pa",
                 LR_BY_FAMILY, "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("python")]
    assert sorted((next(o for o in line.split() if o.startswith("method=")), _lr_of(line)) for line in lines) == [
        ("method=full_halo", "0.01"), ("method=full_halo", "0.01"), ("method=psgd_pa", "0.03"),
        ("method=psgd_pa", "0.03")]
    runs, _ = sweep.expand(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=llcg",
                            "+sweep.variants=[['method=llcg','lr=0.2']]", LR_BY_FAMILY])
    assert [_lr_of(" ".join(r)) for r in runs] == ["0.2"]
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2", "seed=0", "method=psgd_pa",
                 "lr=0.001,0.1", LR_BY_FAMILY, "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("python")]
    assert sorted((next(o for o in line.split() if o.startswith("method=")), _lr_of(line)) for line in lines) == [
        ("method=full_halo", "0.001"), ("method=full_halo", "0.1"), ("method=psgd_pa", "0.001"),
        ("method=psgd_pa", "0.1")]


def test_a_one_process_control_runs_once_beside_runs_at_several_counts(capsys):
    """`ggs`'s control is `single`, which ignores `workers`: a sweep over counts runs it once a seed, not once per
    count (each would be a record of its own, the same model)."""
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=2,4,8", "seed=0", "method=ggs",
                 "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("python")]
    singles = [line for line in lines if "method=single" in line.split()]
    assert len(lines) == 4 and len(singles) == 1 and "workers=" not in singles[0]
    # the command line fixing `workers`: the one-process run named by hand and the control are one record
    sweep.sweep(["experiment=boundary_methods", "dataset=cora", "workers=4", "seed=0", "method=ggs,single",
                 "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("python")]
    assert len(lines) == 2 and [line for line in lines if "method=single" in line.split()] == [
        line for line in lines if "workers=" not in line]
