"""A sweep checks every run's configuration before it starts any (benchmarks/commands/sweep.py `checked`): a
bad value stops it in one line naming the run, and Hydra's errors are one line too. In-process: no
run is started."""
from __future__ import annotations

import re

import pytest

from benchmarks.commands import sweep
from benchmarks.run.config import check
from benchmarks.base.registry import method_names
from benchmarks.base.errors import UserError

pytestmark = pytest.mark.fast


@pytest.fixture
def no_runs(monkeypatch):
    def refuse(overrides, cfg, *_):
        raise AssertionError(f"a run started: {overrides}")

    monkeypatch.setattr(sweep, "run_one", refuse)


@pytest.mark.parametrize("args, message", [
    # every method at 1 and 2 workers (the one-process methods once)
    (["epochs=abc"], rf"error: run 1/\d+ \(method={method_names()[0]} workers=1 "
                     r"experiment=quickstart epochs=abc results_dir=\S+\): epochs must be a positive integer "
                     r"\(got 'abc'\)$"),
    (["epoch=5"], r"error: unknown key epoch; valid keys are: allow_nonfinite, backend, "),
    (["method=sra"], r"error: unknown method 'sra'; choose one of: "),
    (["method=sar", "method.mode=fast"],
     r"error: run 1/2 \(workers=1 experiment=quickstart method=sar method.mode=fast "
     r"results_dir=\S+\): unknown method.mode 'fast'"),
])
def test_a_bad_configuration_stops_the_sweep_before_any_run(no_runs, capsys, tmp_path, args, message):
    with pytest.raises(SystemExit) as e:
        sweep.main(["experiment=quickstart", *args, f"results_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and re.match(message, err.strip()) and len(err.strip().splitlines()) == 1, err


def test_a_bad_variant_is_named_with_its_run(tmp_path):
    runs = [["method=single"], ["method=sar", "method.mode=fast"]]
    with pytest.raises(UserError, match=r"^run 2/2 \(method=sar method.mode=fast\): unknown method.mode 'fast'"):
        sweep.checked(runs, None)
    with pytest.raises(UserError, match=r"^run 1/1 \(method=single method.sync_every=3\): unknown key "
                                        r"method.sync_every|^run 1/1 .*unknown option method.sync_every"):
        sweep.checked([["method=single", "method.sync_every=3"]], None)  # a key the method lacks, without +


def test_a_dry_run_checks_the_configuration_but_not_this_machine(no_runs, capsys, tmp_path):
    sweep.main(["experiment=sar_anchor", "device=cuda", "--dry-run", f"results_dir={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and all(line.startswith("python -m benchmarks ") for line in lines[:3])
    # comments after the commands (the output stays a script): the count, the time, the folder
    assert lines[3] == "# dry run: 3 of 3 runs to go, no expected time (the preset states no sweep.minutes)"
    assert lines[4] == f"# records: {tmp_path} · next: python -m analysis report {tmp_path}"
    with pytest.raises(SystemExit):
        sweep.main(["experiment=sar_anchor", "device=cuda", "lr=-1", "--dry-run", f"results_dir={tmp_path}"])
    assert "lr=-1 must be a number >= 0" in capsys.readouterr().err


def test_checked_returns_each_run_config_as_composed(tmp_path):
    runs, _ = sweep.expand(["experiment=quickstart", f"results_dir={tmp_path}"])
    configs = sweep.checked(runs, None)
    assert [c.method_name for c in configs] == [r[0].split("=", 1)[1] for r in runs]
    assert configs == [check(sweep.config_of(r)) for r in runs]  # each run's config as it composes, checked


def test_a_dry_run_states_the_time_its_preset_knows(no_runs, capsys, tmp_path):
    sweep.main(["experiment=quickstart", "--dry-run", f"results_dir={tmp_path}"])
    *commands, count, records = capsys.readouterr().out.splitlines()
    n = len(commands)  # every method at 1 and 2 workers (the one-process methods once)
    about = sweep.duration(sweep._sweep_section(["experiment=quickstart"])["minutes"] * 60)
    assert count == f"# dry run: {n} of {n} runs to go, about {about} on the machine its preset was timed on"
    sweep.main(["experiment=quickstart", "method=single,full_halo", "--dry-run", f"results_dir={tmp_path}"])
    assert "# dry run: 3 of 3 runs to go, about " in capsys.readouterr().out  # in proportion to the runs


def test_an_ad_hoc_sweep_gets_a_folder_of_its_own_and_the_same_command_resumes_there(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the default results_dir, results/runs, is relative
    args = ["method=single,full_halo", "dataset=cora", "epochs=2"]
    argv, folder = sweep.ad_hoc_folder(args, create=True)
    assert argv == [*args, f"results_dir={folder}"] and re.fullmatch(r"results/runs/\d{8}-\d{6}", folder)
    assert sweep.ad_hoc_folder(list(reversed(args)), create=True)[1] == folder  # the same command: resumed there
    other = sweep.ad_hoc_folder([*args, "seed=1"], create=True)[1]
    assert other != folder and other.startswith("results/runs/")  # another command: another folder
    assert sorted(p.name for p in (tmp_path / "results/runs").iterdir()) == sorted(
        p.rpartition("/")[2] for p in (folder, other))
    # a folder named on the command line or by a preset is used as it is
    assert sweep.ad_hoc_folder([*args, "results_dir=mine"], create=True) == ([*args, "results_dir=mine"], None)
    assert sweep.ad_hoc_folder(["experiment=quickstart"], create=True) == (["experiment=quickstart"], None)
