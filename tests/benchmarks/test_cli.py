"""The command line and bad input: one clear line, a non-zero exit, no traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.datasets import PROJECT_ROOT
from benchmarks.errors import UserError
from benchmarks.runner import run
from tests.conftest import SMALL_SYNTHETIC


def cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args, f"results_dir={tmp_path / 'r'}",
                           f"cache_dir={tmp_path / 'c'}"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)


def test_cli_runs_one_configuration_and_says_where_the_record_went(tmp_path):
    out = cli(tmp_path, "method=full_halo", "model=gcn", "workers=2", "epochs=3", "log_every=1", *SMALL_SYNTHETIC)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert sum(line.strip().startswith("epoch") for line in lines) == 3  # progress
    assert lines[-2].startswith("record: ") and (PROJECT_ROOT / lines[-2].split(" ", 1)[1]).exists()
    assert lines[-1].startswith("full_halo synthetic gcn workers=2: epoch ")


@pytest.mark.parametrize("args, message", [
    (["method=sra"], "error: unknown method 'sra'; choose one of: cluster_gcn, digest, full_halo, ggs, graphsaint, "
                     "llcg, neighbor_sampling, psgd_pa, pyg_plain, sar, single"),
    (["model=gcm"], "error: unknown model 'gcm'; choose one of: gat, gcn, mlp, sage"),
    (["-m", "dataset=cora,citeseerr"], "error: unknown dataset 'citeseerr'; choose one of: citeseer, cora,"),
    (["workers=0"], "error: workers must be a positive integer (got 0)"),
    (["partitioner=spectral"], "error: unknown partitioner 'spectral'; choose one of: contiguous, metis, random"),
    (["backend=nccl"], "error: backend=nccl does not fit device=cpu: use gloo on cpu and nccl on cuda"),
    (["method=sar", "method.prefetch=-1", "workers=1", "dataset.nodes=100"],
     "error: method.prefetch must be a non-negative integer (got -1)"),
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
