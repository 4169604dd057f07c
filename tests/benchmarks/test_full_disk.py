"""A full disk (D21): a run that trained but cannot write its record keeps what it measured (written to
the system's temporary folder, or printed) and ends in one line saying where, never in chained
tracebacks; in one process and with spawned ranks. The full disk is injected: `ENOSPC` from the record's
write (`outputs.write_atomic`) under the results folder."""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.base import outputs
from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.errors import UserError
from benchmarks.base.outputs import NotWritten
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC

FULL_HALO_ON_A_FULL_DISK = '''
import errno
from benchmarks.base import outputs
from methods.full_halo import Method as FullHalo

_write_atomic = outputs.write_atomic


def _full(path, obj):
    if "results" in str(path):
        raise OSError(errno.ENOSPC, "No space left on device")
    _write_atomic(path, obj)


class Method(FullHalo):
    def __init__(self, ctx):
        outputs.write_atomic = _full  # in this rank only: the results folder's disk is full
        super().__init__(ctx)
'''


def _kept(message: str) -> dict:
    path = Path(re.search(r"it is kept at (\S+)$", message)[1])
    try:
        return json.loads(path.read_text())
    finally:
        path.unlink()


def test_a_run_that_cannot_write_its_record_keeps_it_and_says_where(make_cfg, monkeypatch):
    def full(path, obj):
        if "results" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_atomic(path, obj)

    write_atomic = outputs.write_atomic
    monkeypatch.setattr(outputs, "write_atomic", full)
    cfg = make_cfg("method=single", *SMALL_SYNTHETIC)
    with pytest.raises(NotWritten) as e:
        run(cfg)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and message.startswith("could not write the record to ")
    assert "(No space left on device); it is kept at " in message
    kept = _kept(message)
    assert kept["status"] == "ok" and len(kept["history"]) == cfg["epochs"]
    assert not list(Path(cfg["results_dir"]).glob("*.json"))


def test_spawned_ranks_on_a_full_disk_end_in_one_line_and_keep_the_record(tmp_path, write_plugins):
    write_plugins({"full_halo_full_disk": FULL_HALO_ON_A_FULL_DISK})
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "method=full_halo_full_disk", "workers=2", "epochs=2", "log_every=0",
         *SMALL_SYNTHETIC, f"results_dir={tmp_path}/results", f"cache_dir={tmp_path}/cache"],
        cwd=PROJECT_ROOT, env={**os.environ}, capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith("error: could not write the record to ") and "No space left on device" in err[0]
    kept = _kept(err[0])
    assert kept["status"] == "ok" and kept["workers"] == 2 and len(kept["history"]) == 2
    assert not list((tmp_path / "results").glob("*.json"))


def test_hydra_writes_nothing_in_the_cache_folder_before_the_runs_own_check(tmp_path):
    """A cache_dir that cannot take a file (a file here; a full disk alike) is the runner's one line:
    Hydra no longer writes its dated folder, config copies and log file there first."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "method=single", *SMALL_SYNTHETIC,
                           f"cache_dir={afile}", f"results_dir={tmp_path}/results"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: cache_dir={afile} is a file, not a folder; choose another cache_dir"), proc.stderr
    assert not (PROJECT_ROOT / ".hydra").exists() and not list(PROJECT_ROOT.glob("*.log"))


def test_a_partition_cache_on_a_full_disk_is_one_line_and_no_half_cache(tmp_path, monkeypatch):
    """torch.save on a full disk raises torch's `enforce fail ... unexpected pos` RuntimeError: the
    build ends in one line naming the cache folder, and its build folder is gone."""
    from benchmarks.core import partition
    from benchmarks.core.datasets import synthetic

    def full(obj, path):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1728 vs 1640")

    monkeypatch.setattr(partition.torch, "save", full)
    graph = synthetic(nodes=300, avg_degree=5, classes=3, features=8, homophily=0.8, feature_noise=1.0,
                      degree_skew=0.0, train_frac=0.5, val_frac=0.2, test_frac=0.2, seed=0)
    with pytest.raises(UserError) as e:
        partition.prepare_parts(graph, "random", 2, 0, tmp_path)
    assert str(e.value) == (f"could not write the partition cache to {tmp_path / 'parts'} "
                            "(the write was cut short: is the disk full?)")
    assert list((tmp_path / "parts").iterdir()) == []
