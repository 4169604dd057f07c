"""The pre-flight memory check (analysis/preflight.py): a run whose projected peak per rank, with the
margin, exceeds the memory this machine gives each rank is refused in one line naming both figures,
before any rank starts, and recorded as failed; `force=true` runs it; a run outside the cost model
is not checked and says so. The machine's memory is set with GNNBENCH_MEMORY_BYTES."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from analysis import preflight
from analysis.preflight import MARGIN, MEMORY_ENV, GiB, MiB, cgroup_limit, check, estimate, machine_memory, verdict
from benchmarks.run import runner
from benchmarks.run.config import check as check_config
from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.errors import UserError
from tests import commands
from tests.conftest import SMALL_SYNTHETIC

fast = pytest.mark.fast


@fast
def test_a_run_that_fits_gets_no_line_and_one_that_does_not_gets_both_figures():
    assert verdict("sar", 4, 4, 4 * GiB, 24 * GiB, 0, force=False) is None
    line = verdict("sar", 4, 4, 24 * GiB, 24 * GiB, 0, force=False)
    assert line == (f"sar with 4 workers needs about {24 * (1 + MARGIN):.1f} GiB per rank by the cost model's "
                    f"projection (24.0 GiB + {MARGIN * 100:.0f} % margin), this machine gives each rank 6.0 GiB "
                    "(24.0 GiB shared by 4 ranks); force=true runs it anyway")


@fast
def test_the_margin_is_applied_and_what_the_launcher_holds_is_not_the_ranks():
    have = 6 * GiB  # 24 GiB shared by 4 ranks
    assert verdict("sar", 4, 4, have / (1 + MARGIN), 24 * GiB, 0, force=False) is None
    assert verdict("sar", 4, 4, have / (1 + MARGIN) * 1.01, 24 * GiB, 0, force=False)  # fits only without it
    held = verdict("sar", 4, 4, have / (1 + MARGIN), 24 * GiB, 512 * MiB, force=False)
    assert "(24.0 GiB less 512 MiB the launcher holds, shared by 4 ranks)" in held


@fast
def test_force_turns_the_refusal_into_a_warning():
    line = verdict("full_halo", 1, 1, 2 * GiB, GiB, 0, force=True)
    assert line.startswith("warning: full_halo with 1 worker needs about ") and "shared by 1 rank)" in line
    assert line.endswith("; force=true: running it anyway")


@fast
def test_the_machine_memory_is_the_override_or_the_smaller_of_memtotal_and_the_cgroup(monkeypatch, tmp_path):
    monkeypatch.setenv(MEMORY_ENV, "12345")
    assert machine_memory() == 12345
    monkeypatch.delenv(MEMORY_ENV)
    import psutil
    assert 0 < machine_memory() <= psutil.virtual_memory().total
    # cgroup v1 (a memory controller) and v2 (the unified hierarchy), the smallest limit up the tree
    (tmp_path / "memory" / "job" / "step").mkdir(parents=True)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("4096\n")
    (tmp_path / "memory" / "job" / "step" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "memory.max").write_text("max\n")
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("4:memory:/job/step\n1:cpu:/\n0::/ci\n")
    assert cgroup_limit(str(cgroup), str(tmp_path)) == 4096
    cgroup.write_text("0::/ci\n")
    assert cgroup_limit(str(cgroup), str(tmp_path)) is None  # `max`: no limit
    assert cgroup_limit(str(tmp_path / "absent"), str(tmp_path)) is None


@fast
def test_a_method_the_cost_model_leaves_out_is_not_checked_and_says_so(make_cfg):
    said = []
    check(check_config(make_cfg("method=pyg_plain")), {}, "spawn", 2, said.append)
    assert len(said) == 1 and said[0].startswith("memory not checked: the cost model leaves it out (")
    assert said[0].endswith("; running it") and "pyg_plain" in said[0]


@fast
def test_the_check_loads_no_pandas():
    """The launching process of a one-rank run is that rank: the check must not grow it by a library."""
    code = ("import sys, analysis.preflight, analysis.projection; "
            "assert 'pandas' not in sys.modules, 'pandas imported'")
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, check=True)


def test_the_projected_peak_is_compared_with_its_margin(make_cfg, monkeypatch):
    """On a real partition: memory for the projected peak but not for the margin is refused."""
    run = check_config(make_cfg("method=full_halo", "workers=2", *SMALL_SYNTHETIC))
    info, _ = runner.prepare(run, 2, log=lambda m: None)
    peak = preflight.projected_peak(run, info, "spawn")
    assert peak > 0
    monkeypatch.setattr(preflight, "held_by_launcher", lambda in_process: 0)
    monkeypatch.setenv(MEMORY_ENV, str(int(2 * peak * (1 + MARGIN / 2))))
    with pytest.raises(UserError, match=r"full_halo with 2 workers needs about .* force=true runs it anyway$"):
        check(run, info, "spawn", 2, print)
    monkeypatch.setenv(MEMORY_ENV, str(int(2 * peak * (1 + MARGIN) + 2)))
    check(run, info, "spawn", 2, print)  # fits


def test_a_run_that_does_not_fit_is_refused_before_any_rank_starts_and_recorded(make_cfg, monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(1 << 20))

    def no_rank(*args, **kwargs):
        raise AssertionError("a rank started")

    monkeypatch.setattr(runner, "_run_spawned", no_rank)
    monkeypatch.setattr(runner, "_rank_main", no_rank)
    cfg = make_cfg("method=full_halo", "workers=2", *SMALL_SYNTHETIC)
    with pytest.raises(UserError) as refused:
        runner.run(cfg, log=lambda m: None, preflight=check)
    line = str(refused.value)
    assert "\n" not in line and line.endswith("; force=true runs it anyway") and "shared by 2 ranks" in line
    record = json.loads(runner.plan(cfg).path.read_text())
    assert (record["status"], record["error"], record["history"]) == ("failed", line, [])


def test_force_runs_it_anyway(make_cfg, monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(1 << 20))
    said = []
    _, record = runner.run(make_cfg("method=single", "workers=1", "epochs=2", "force=true", *SMALL_SYNTHETIC),
                           log=said.append, preflight=check)
    assert record["status"] == "ok"
    assert [line for line in said if line.startswith("warning: single with 1 worker needs about ")]


def test_the_command_line_refuses_in_one_line_and_a_sweep_records_it_and_goes_on(tmp_path):
    env = {**os.environ, MEMORY_ENV: str(1 << 20)}
    args = ["method=full_halo", "dataset=cora", "workers=2", "epochs=1", f"results_dir={tmp_path / 'r'}",
            f"cache_dir={tmp_path / 'c'}"]
    out = commands.run("benchmarks", *args, env=env)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    (line,) = out.stderr.strip().splitlines()  # that line alone: no rank started, so none said anything
    assert line.startswith("error: full_halo with 2 workers needs about "), out.stderr
    sweep = commands.run("benchmarks.commands.sweep", *args, "resume=false", env=env)
    assert sweep.returncode == 1, sweep.stderr
    said = sweep.stdout.strip().splitlines()
    assert said[-1] == f"records: {tmp_path / 'r'} · next: python -m analysis report {tmp_path / 'r'}"
    assert said[-2] == "sweep: 1 runs: 0 ran, 0 kept, 1 failed; the same command reruns the failed ones"
    assert said[-3].startswith("  error: full_halo with 2 workers needs about ")  # the run's one line
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "r").glob("*.json")]
    assert record["status"] == "failed" and record["error"] == said[-3].removeprefix("  error: ")


def test_check_memory_prints_the_answer_and_runs_nothing(tmp_path):
    args = ["method=full_halo", "dataset=cora", "workers=2", f"results_dir={tmp_path / 'r'}",
            f"cache_dir={tmp_path / 'c'}", "--check-memory"]
    for memory, code, start in ((1 << 40, 0, "fits: full_halo with 2 workers needs about "),
                                (1 << 20, 2, "would not fit: full_halo with 2 workers needs about ")):
        out = commands.run("benchmarks", *args, env={**os.environ, MEMORY_ENV: str(memory)})
        assert out.returncode == code and out.stdout.startswith(start), (out.stdout, out.stderr)
    assert not list((tmp_path / "r").glob("*.json"))  # nothing ran, nothing is recorded


def test_check_memory_estimates_from_the_declared_sizes_before_it_builds(make_cfg, tmp_path):
    # 30M nodes of average degree 50: minutes and gigabytes to generate; the estimate needs none of it
    cfg = runner.plan(make_cfg("method=full_halo", "workers=2", "dataset.nodes=30000000",
                               "dataset.avg_degree=50")).cfg
    line = estimate(cfg, "spawn", 2)
    assert line.startswith("estimate: would not fit: full_halo with 2 workers needs about "), line
    assert "(30,000,000 nodes, 1,530,000,000 in-edges, 64 features)" in line
    # the command line: the estimate first, then the exact answer from the built graph
    args = ["method=full_halo", "workers=2", "dataset.nodes=2000", f"results_dir={tmp_path / 'r'}",
            f"cache_dir={tmp_path / 'c'}", "--check-memory"]
    out = commands.run("benchmarks", *args, env={**os.environ, MEMORY_ENV: str(1 << 40)})
    first, answer = out.stdout.splitlines()
    assert out.returncode == 0 and first.startswith("estimate: fits: full_halo with 2 workers needs about ")
    assert "(2,000 nodes, 34,000 in-edges, 64 features)" in first and answer.startswith("fits: "), out.stdout
