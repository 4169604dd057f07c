"""Stopping a run from outside, with real process trees: whatever signal ends the launcher (or the
sweep above it), no process of the run is left, the record says `failed` with the history reached,
and nothing the stopped run leaves behind writes a record later."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.run.runner import _runs_root
from tests.conftest import SMALL_SYNTHETIC

# Long enough never to finish on its own; quick epochs so the history grows while we watch.
ENDLESS = ["workers=3", "epochs=100000", "hidden=16", "log_every=1", "eval_every=1", *SMALL_SYNTHETIC]


def as_from_a_terminal() -> None:
    """In the child before it starts: SIGINT and SIGQUIT as a terminal's shell leaves them, handled by
    default. A process started in the background of a non-interactive shell (`cmd &`, some CI runners)
    ignores both, its children inherit that, and a command leaves a signal it was told to ignore ignored
    (errors.stop_on_signals): the tests' Ctrl-C would then reach nothing."""
    for s in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)


class Launched:
    """A `python -m <module> ...` process in its own session (a terminal's process group), with its
    output collected line by line as it comes."""

    def __init__(self, module: str, args: list[str]):
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=PROJECT_ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=as_from_a_terminal, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=lambda s=s, d=d: d.extend(s), daemon=True)
                        for s, d in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    def tree(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def wait_until(self, condition, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"exited before {what}: {''.join(self.err)[-2000:]}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s"
            time.sleep(0.2)

    def ranks_training(self, ranks: int) -> bool:
        """The fork server's children are the ranks."""
        servers = [p for p in self.tree() if "forkserver" in " ".join(_cmdline(p))]
        return any(len(s.children()) >= ranks for s in servers)

    def stop(self, sig: int, whole_group: bool) -> None:
        """`kill -<sig> <pid>`, or to the whole process group (`timeout`, Ctrl-C in a terminal)."""
        if whole_group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def finish(self, timeout: float = 60) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:  # the test fails, and leaves nothing running behind it
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise
        for r in self.readers:
            r.join(10)
        return rc


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def assert_all_gone(processes: list[psutil.Process], timeout: float = 20) -> None:
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for p in alive:
        p.kill()
    assert not alive, f"left behind: {[_cmdline(p)[-3:] for p in alive]}"


def only_record(folder) -> dict:
    (path,) = folder.glob("*.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("sig, whole_group", [
    (signal.SIGTERM, False),  # kill -TERM <launcher pid>
    (signal.SIGTERM, True),   # `timeout`: the whole process group
    (signal.SIGINT, True),    # Ctrl-C in a terminal: the whole foreground group
])
def test_a_stopped_run_leaves_no_process_and_a_failed_record(tmp_path, sig, whole_group):
    results = tmp_path / "results"
    run = Launched("benchmarks", [*ENDLESS, f"results_dir={results}", f"cache_dir={tmp_path / 'cache'}"])
    run.wait_until(lambda: sum("epoch" in line for line in run.out) >= 2, "second epoch")
    tree = run.tree()
    assert len(tree) >= 4  # fork server and three ranks at least
    run.stop(sig, whole_group)
    assert run.finish() == 128 + sig
    assert_all_gone(tree)
    record = only_record(results)
    assert record["status"] == "failed" and record["error"] == f"stopped by {signal.Signals(sig).name}"
    assert len(record["history"]) >= 2
    # One line says what happened; no rank (nor the launcher) prints a traceback.
    stderr = "".join(run.err)
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith(f"stopped by {signal.Signals(sig).name}: record ")
    time.sleep(3)  # nothing of the stopped run may write the record later
    assert only_record(results)["status"] == "failed"


def test_ranks_die_with_a_killed_launcher(tmp_path):
    """SIGKILL leaves the launcher no chance to clean up: the ranks notice on their own."""
    results = tmp_path / "results"
    run = Launched("benchmarks", [*ENDLESS, f"results_dir={results}", f"cache_dir={tmp_path / 'cache'}"])
    run.wait_until(lambda: sum("epoch" in line for line in run.out) >= 2, "second epoch")
    tree = run.tree()
    run.proc.kill()
    run.finish()
    assert_all_gone(tree)
    assert not list(results.glob("*.json"))  # no record: the launcher that would write it is gone
    # Its scratch folder is left; the next run's launcher removes it.
    assert len(list((tmp_path / "cache" / "runs").iterdir())) == 1
    _runs_root(str(tmp_path / "cache"))
    assert not list((tmp_path / "cache" / "runs").iterdir())


def test_an_interrupted_sweep_leaves_no_process_and_no_ok_record(tmp_path):
    results = tmp_path / "results"
    sweep = Launched("benchmarks.commands.sweep", [*ENDLESS, "seed=0,1", f"results_dir={results}",
                                          f"cache_dir={tmp_path / 'cache'}"])
    sweep.wait_until(lambda: sweep.ranks_training(3), "ranks of the first run")
    time.sleep(3)
    tree = sweep.tree()
    sweep.proc.send_signal(signal.SIGINT)  # kill -INT <sweep pid>: the sweep alone gets it
    assert sweep.finish() == 128 + signal.SIGINT
    assert_all_gone(tree)
    record = only_record(results)  # the run in progress; the second seed never started
    assert record["status"] == "failed" and record["error"] == "stopped by SIGTERM"
    assert "Traceback" not in "".join(sweep.err)
    time.sleep(3)
    assert only_record(results)["status"] == "failed"


def test_a_killed_sweep_takes_its_run_and_the_runs_ranks_along(tmp_path):
    """kill -9 of the sweep: the run it started (a `python -m benchmarks` of its own) dies with it,
    and that run's ranks with their launcher; nothing trains on, orphaned."""
    sweep = Launched("benchmarks.commands.sweep", [*ENDLESS, f"results_dir={tmp_path / 'results'}",
                                          f"cache_dir={tmp_path / 'cache'}"])
    sweep.wait_until(lambda: sweep.ranks_training(3), "ranks of the first run")
    tree = sweep.tree()
    sweep.proc.kill()
    sweep.finish()
    assert_all_gone(tree)


def test_ctrl_c_while_the_graph_is_generated_ends_the_process_with_a_line(tmp_path):
    """`--check-memory` on a graph that takes a while to generate: the estimate from the declared
    sizes comes first, then the graph is built, and Ctrl-C ends it there (the
    generator's single torch and numpy calls run for minutes on a large graph, so the stop cannot
    wait for Python's own handler: errors.busy), with one line and no process left."""
    big = ["dataset.nodes=4000000", "dataset.avg_degree=10", "dataset.features=4", "dataset.classes=4"]
    run = Launched("benchmarks", ["method=full_halo", "workers=2", *big, f"results_dir={tmp_path / 'results'}",
                                  f"cache_dir={tmp_path / 'cache'}", "--check-memory"])
    # the estimate from the declared sizes: printed before the graph is generated
    run.wait_until(lambda: run.out and run.out[0].startswith("estimate: "), "estimate")
    assert "full_halo with 2 workers needs about" in run.out[0]
    time.sleep(1)  # into the generation (minutes of it under load; ~10 s on an idle core)
    tree = run.tree()
    run.stop(signal.SIGINT, whole_group=True)
    assert run.finish(timeout=30) == 128 + signal.SIGINT
    assert_all_gone(tree)
    stderr = "".join(run.err)
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith("stopped by SIGINT")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())
