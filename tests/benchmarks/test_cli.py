"""The command line and bad input: one clear line, a non-zero exit, no traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.base.registry import method_names
from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.errors import UserError
from benchmarks.run.runner import run
from tests import commands
from tests.conftest import SMALL_SYNTHETIC


def cli(tmp_path, *args):
    return commands.run("benchmarks", *args, f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}")


def test_cli_runs_one_configuration_and_says_where_the_record_went(tmp_path):
    out = cli(tmp_path, "method=full_halo", "model=gcn", "workers=2", "epochs=3", "log_every=1", *SMALL_SYNTHETIC)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    epochs = [line for line in lines if line.strip().startswith("epoch")]
    assert len(epochs) == 3  # progress, with the time left until the last epoch
    assert all(" · ~" in e and e.endswith(" left") for e in epochs[:2]) and " · " not in epochs[2], epochs
    assert lines[-2].startswith("record: ") and (PROJECT_ROOT / lines[-2].split(" ", 1)[1]).exists()
    assert lines[-1].startswith("full_halo synthetic gcn workers=2: epoch ")


@pytest.mark.parametrize("args, message", [
    # every registered method, aliases included, so a plugin added later is listed with no change here
    (["method=sra"], f"error: unknown method 'sra'; choose one of: {', '.join(method_names())}"),
    (["model=gcm"], "error: unknown model 'gcm'; choose one of: gat, gcn, mlp, sage"),
    (["-m", "dataset=cora,citeseerr"],
     "error: unknown dataset 'citeseerr'; choose one of: citeseer, citeseer-full, cora, cora-full,"),
    (["workers=0"], "error: workers must be a positive integer (got 0)"),
    (["partitioner=spectral"],
     "error: unknown partitioner 'spectral'; choose one of: contiguous, metis, metis_edges, random"),
    (["backend=nccl"], "error: backend=nccl does not fit device=cpu: use gloo on cpu and nccl on cuda"),
    (["method=sar", "method.prefetch=-1", "workers=1", "dataset.nodes=100"],
     "error: method.prefetch must be a non-negative integer (got -1)"),
    (["lr=-1"], "error: lr=-1 must be a number >= 0 (learning rate)"),  # the schema (tests/benchmarks/test_config.py)
    (["+foo=1"], "error: unknown key foo; valid keys are: allow_nonfinite, backend, "),
    # a key the config lacks, without `+`: Hydra's paragraph becomes the schema's line
    (["epoch=5"], "error: unknown key epoch; valid keys are: allow_nonfinite, backend, "),
    (["method.unknown=1"], "error: unknown option method.unknown for method=full_halo; its options are: layer0"),
    (["-m", "workers=1,2", "method.mode=sa"],
     "error: unknown option method.mode for method=full_halo; its options are: layer0"),
    (["workers=[1,2"], "error: cannot parse the override 'workers=[1,2': "),
])
def test_bad_input_gets_one_line_and_exit_status_2(tmp_path, args, message):
    out = cli(tmp_path, *args)
    assert out.returncode == 2
    assert out.stderr.strip().startswith(message) and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "r").exists()  # bad input is not a run: no record


def test_more_workers_than_nodes_is_named(make_cfg):
    with pytest.raises(UserError, match=r"workers=40 exceeds the 30 nodes of synthetic; use at most 30"):
        run(make_cfg("workers=40", "dataset.nodes=30", "dataset.classes=3"))


def test_missing_real_dataset_is_named(make_cfg, tmp_path):
    with pytest.raises(UserError, match=r"dataset 'citeseer' not found under .*empty"):
        run(make_cfg("dataset=citeseer", f"data_root={tmp_path / 'empty'}"))


def test_a_misspelt_method_is_refused_before_torch_is_imported():
    code = ("import sys; sys.argv = ['benchmarks', 'method=sra']\n"
            "from benchmarks.__main__ import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print('torch' in sys.modules, e.code)")
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "2"] and out.stderr.startswith("error: unknown method 'sra'"), out


def test_a_multirun_is_the_sweep_engine_which_refuses_a_bad_point_before_anything_runs(tmp_path):
    # One sweep engine: `-m` hands its points to benchmarks.commands.sweep (one process per run), which checks
    # every point first, so a bad one is a one-line error naming it and no job has run.
    out = cli(tmp_path, "-m", "workers=1,abc", "method=full_halo", "epochs=2", "hidden=8", "log_every=0",
              "dataset.nodes=300", "dataset.classes=3")
    assert out.returncode == 2
    assert ("error: run 2/2 (workers=abc" in out.stderr
            and "workers must be a positive integer (got 'abc')" in out.stderr)
    assert not list((tmp_path / "r").glob("*.json"))  # nothing ran
