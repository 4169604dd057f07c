"""Sweeps resume: a run whose ok record exists is skipped, a failed or missing one is run again, and
a failed run does not stop the sweep."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from benchmarks.base.registry import method_names
from benchmarks.run.runner import run
from tests import commands
from tests.analysis.conftest import sweep
from tests.conftest import SMALL_SYNTHETIC


def test_a_resumed_sweep_runs_only_what_is_missing_or_failed(quickstart, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(quickstart, results)
    records = {json.loads(p.read_text())["method"]: p for p in results.glob("*.json")}
    assert sorted(records) == method_names()
    records["full_halo"].unlink()                                   # missing
    failed = json.loads(records["single"].read_text())              # failed
    records["single"].write_text(json.dumps({**failed, "status": "failed", "error": "RuntimeError: boom"}))
    ok = {m: p.stat().st_mtime_ns for m, p in records.items()
          if p.exists() and json.loads(p.read_text())["status"] == "ok"}

    out = sweep(results)
    lines = out.stdout.splitlines()
    kept = [line for line in lines if line.endswith(": kept (ok record exists)")]
    assert len(kept) == len(ok), out.stdout + out.stderr
    n = len(method_names())
    assert lines[-2].startswith(f"sweep: {n} runs: ") and f", {len(ok)} kept, " in lines[-2]
    assert lines[-1] == f"records: {results} · next: python -m analysis report {results}"
    assert json.loads(records["single"].read_text())["status"] == "ok" and records["full_halo"].exists()
    for method, mtime in ok.items():
        assert records[method].stat().st_mtime_ns == mtime  # not rewritten


def test_runner_skips_a_run_whose_ok_record_exists(make_cfg):
    cfg = make_cfg("method=single", *SMALL_SYNTHETIC)
    path, first = run(cfg, log=lambda m: None)
    logged = []
    path2, again = run(cfg, log=logged.append)
    assert path2 == path and again == first and logged[0].startswith(f"skipped: {path} already holds an ok record")
    logged.clear()
    _, rerun = run({**cfg, "resume": False}, log=logged.append)
    assert rerun["status"] == "ok" and not any(m.startswith("skipped") for m in logged)


def test_a_multirun_goes_on_past_a_failed_job(tmp_path):
    # `-m` is the sweep engine: full_halo with 40 workers on a 30-node graph is refused once its graph
    # is loaded; single runs anyway; the exit status says a run failed
    out = commands.run("benchmarks", "-m", "method=full_halo,single", "workers=40", "dataset.nodes=30",
                       "dataset.classes=3", "epochs=2", "hidden=8", "log_every=0", f"results_dir={tmp_path / 'r'}",
                       f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 1, out.stderr
    assert "error: workers=40 exceeds the 30 nodes" in out.stdout and "1 failed" in out.stdout
    # the next run's line counts the failure, and estimates the time left from the run that failed
    (second,) = [line for line in out.stdout.splitlines() if line.startswith("[2/2] ")]
    assert " · 1 failed so far · ~" in second and second.endswith(" left"), second
    assert [json.loads(p.read_text())["method"] for p in (tmp_path / "r").glob("*.json")] == ["single"]


def test_a_run_is_judged_by_the_record_it_wrote_not_one_found_at_its_path(tmp_path):
    """`resume=false` over an ok record an earlier sweep left: a run refused once its graph is loaded
    (40 workers, 30 nodes) writes no record, and is counted failed, not ok by the record it found."""
    from benchmarks.commands import sweep as engine

    args = ["method=full_halo", "workers=40", "dataset.nodes=30", "dataset.classes=3", "epochs=2", "hidden=8",
            "log_every=0", f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}", "resume=false"]
    (cfg,) = engine.checked(engine.expand(args)[0], None)
    found = engine.path_of(cfg)
    found.parent.mkdir()
    found.write_text(json.dumps({"status": "ok"}))
    out = commands.run("benchmarks.commands.sweep", *args)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: workers=40 exceeds the 30 nodes" in out.stdout
    assert out.stdout.splitlines()[-2] == ("sweep: 1 runs: 0 ran, 0 kept, 1 failed; "
                                           "the same command reruns the failed ones")
    assert json.loads(found.read_text()) == {"status": "ok"}  # not the run's, and left as it was


BUGGY_CHECK = """
from methods import full_halo


class Method(full_halo.Method):
    @classmethod
    def check_partition(cls, run, partition_stats):
        partition_stats["no_such_field"]  # a bug in the launcher, after the partition is prepared
"""


@pytest.mark.parametrize("fork", ["on", "off"])
def test_a_bug_in_a_sweeps_run_keeps_its_traceback_in_a_failed_record(tmp_path, write_plugins, fork):
    """An exception outside the ranks (a plugin's check_partition, run by the launcher) ends the run's
    process with a traceback and no record: the sweep writes the failed record, with that traceback (D8)."""
    write_plugins({"buggy": BUGGY_CHECK})
    out = commands.run("benchmarks.commands.sweep", "method=buggy", "workers=2", "epochs=2", "log_every=0",
                       *SMALL_SYNTHETIC, f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}",
                       env={**os.environ, "GNNBENCH_SWEEP_FORK": fork})
    assert out.returncode == 1, out.stdout + out.stderr
    (path,) = (tmp_path / "r").glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "failed" and record["error"] == "KeyError: 'no_such_field'"
    assert record["traceback"].startswith("Traceback (most recent call last):")
    assert "in check_partition" in record["traceback"] and record["config"]["method"]["name"] == "buggy"
    assert (f"FAILED: KeyError: 'no_such_field' (recorded by the sweep: {path})") in out.stdout
