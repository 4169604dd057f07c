"""Process ownership (benchmarks/base/leftovers.py) in every launcher the suite starts or runs under: a
process dies with its launcher, even a SIGKILLed one; a stop (SIGINT, SIGTERM) ends in one line and
exit status 128 + the signal; what a killed process leaves behind carries its owner's tag and the
next user of that folder removes it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.leftovers import on_this_host, owner_tag
from tests.benchmarks.test_launcher import free_port
from tests.benchmarks.test_stopping import Launched, _cmdline, as_from_a_terminal, assert_all_gone
from tests.conftest import SMALL_SYNTHETIC

#: What a sweep with a failed run adds to its count line (benchmarks/commands/sweep.py).
RERUN = "the same command reruns the failed ones"


def dead_owner_tag() -> str:
    """An owner tag (`<pid>-<start time>-`) of a process that does not run: a finished child's."""
    proc = subprocess.Popen(["true"])
    pid = proc.pid
    proc.wait()
    assert not psutil.pid_exists(pid)
    return f"{pid}-12345-"


# --------------------------------------------------------------------------- D19: torchrun workers
def test_torchrun_workers_die_with_a_killed_agent(tmp_path):
    """kill -9 of the torchrun agent: its workers (each in a session of its own) notice and end."""
    agent = Launched("torch.distributed.run", [
        "--standalone", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--nproc-per-node=2", "-m", "benchmarks",
        "workers=2", "epochs=100000", "hidden=16", "log_every=1", "eval_every=1", *SMALL_SYNTHETIC,
        f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"])
    try:
        agent.wait_until(lambda: sum("epoch" in line for line in agent.out + agent.err) >= 2, "second epoch")
        workers = agent.tree()
        assert len(workers) >= 2
    except BaseException:
        for p in agent.tree():
            p.kill()
        agent.proc.kill()
        raise
    agent.proc.kill()
    agent.finish()
    assert_all_gone(workers, timeout=30)


# --------------------------------------------------------------------------- D22: build folders
def test_a_partition_build_removes_a_dead_builders_folder(tmp_path):
    from benchmarks.core.datasets import synthetic
    from benchmarks.core.partition import prepare_parts

    graph = synthetic(nodes=300, avg_degree=6, classes=3, features=4, homophily=0.8, feature_noise=1.0,
                      degree_skew=1.0, train_frac=0.2, val_frac=0.2, test_frac=0.2, seed=0)
    parts = tmp_path / "parts"
    parts.mkdir()
    tag = dead_owner_tag()
    orphan = parts / f"{on_this_host('tmp-')}{tag}{graph.name}-abc-contiguous-p2-s0-xyz"
    (orphan / "part_0.pt").parent.mkdir()
    (orphan / "part_0.pt").write_bytes(b"half a part")
    other_host = parts / f"tmp-another-machine-{tag}x"  # a pid on another machine says nothing here
    other_host.mkdir()
    live = parts / f"{on_this_host('tmp-')}{owner_tag()}y"  # a build in progress
    live.mkdir()
    folder = prepare_parts(graph, "contiguous", 3, 0, tmp_path)
    assert folder.is_dir() and not orphan.exists()
    assert other_host.exists() and live.exists()
    assert sorted(p.name for p in parts.iterdir()) == sorted([folder.name, other_host.name, live.name])

    # The whole graph the mini-batch stores assemble beside the parts: the same for its build folder.
    from types import SimpleNamespace

    import torch

    from benchmarks.core.partition import load_part
    from benchmarks.core.stores import replicated_store

    orphan = folder / f"{on_this_host('replicated.tmp-')}{tag}"
    orphan.mkdir()
    (orphan / "x.npy").write_bytes(b"half an array")
    comm = SimpleNamespace(world=3, barrier=lambda: None)
    store = replicated_store(load_part(folder, 0), comm, torch.device("cpu"), folder, builds=True)
    assert store.x.shape[0] == 300 and not orphan.exists()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["replicated"]



# --------------------------------------------------------------------------- D15, D12: partition_stats
def test_partition_stats_refuses_a_file_for_results_dir(tmp_path, capsys):
    from benchmarks.tools import partition_stats

    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(SystemExit) as e:
        partition_stats.main(["dataset=synthetic", "dataset.nodes=300", "--workers", "2", "--results-dir", str(afile)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: --results-dir={afile} is a file, not a folder; choose another --results-dir"


def test_a_stop_while_metis_partitions_is_a_stop_and_keeps_what_was_measured(tmp_path):
    """SIGTERM while METIS runs (it traps SIGTERM itself): one line, 128 + the signal, P=2 kept."""
    results = tmp_path / "stats"
    tool = Launched("benchmarks.tools.partition_stats", [
        "dataset=synthetic", "dataset.nodes=100000", "dataset.features=1", "--workers", "2,256,512",
        "--results-dir", str(results)])
    tool.wait_until(lambda: any(line.startswith("P=2:") for line in tool.err), "P=2", timeout=240)
    time.sleep(0.5)  # into the next METIS call (P=256 takes seconds here)
    tool.proc.send_signal(signal.SIGTERM)
    assert tool.finish() == 128 + signal.SIGTERM, "".join(tool.err)
    err = "".join(tool.err)
    assert "Traceback" not in err and "P=256:" not in err
    (path,) = results.glob("*.json")
    assert err.splitlines()[-1] == f"stopped by SIGTERM: partition statistics so far in {path}"
    assert list(json.loads(path.read_text())["by_workers"]) == ["2"]


# --------------------------------------------------------------------------- D13: calibrate's output
@pytest.mark.parametrize("out", ["afile", "/proc/x_cal"])
def test_calibrate_refuses_an_unwritable_out_before_measuring(tmp_path, monkeypatch, capsys, out):
    from benchmarks.tools import calibrate

    if out == "afile":
        out = tmp_path / "afile"
        out.write_text("")
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("measured before checking --out"))
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--quick", "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out={out} is ") and len(err.strip().splitlines()) == 1


def test_a_profile_that_cannot_be_written_goes_to_stdout(tmp_path, monkeypatch, capsys):
    """A full disk after minutes of measuring: one line, and the measured profile on stdout."""
    import errno
    from pathlib import Path

    import yaml

    from benchmarks.tools import calibrate

    values = yaml.safe_load((PROJECT_ROOT / "conf" / "hardware" / "rtx2080ti-gloo.yaml").read_text())
    values["name"] = "measured"
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: values)

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--quick", "--name", "measured", "--out", str(tmp_path)])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (f"error: could not write the hardware profile to {tmp_path / 'measured.yaml'} "
                                    "(No space left on device); the measured profile follows on stdout")
    assert yaml.safe_load(captured.out)["name"] == "measured"
    assert calibrate.profile_text(values) == captured.out


# --------------------------------------------------------------------------- D14: calibrate's ranks
ENDLESS_EXCHANGE = """
import dataclasses, sys
from benchmarks.tools import calibrate
calibrate.measure = lambda *a, **k: calibrate.comm_times(dataclasses.replace(calibrate.QUICK, repeats=10 ** 7))
calibrate.main(["--quick", "--out", sys.argv[1]])
"""


@pytest.fixture
def short_tmp():
    """A temporary folder with a short path, for a launcher's TMPDIR: multiprocessing puts the fork
    server's socket in it, and pytest's own folders (/tmp/pytest-of-root/pytest-104/popen-gw0/<test>)
    can leave no room for its path (rank_server.check_temporary_folder)."""
    folder = Path(tempfile.mkdtemp(prefix="tmpdir-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Calibrating(Launched):
    """calibrate's launcher with an exchange that never ends, its temporary folder `tmp`."""

    def __init__(self, tmp_path, tmp):
        self.tmp = tmp
        self.proc = subprocess.Popen([sys.executable, "-c", ENDLESS_EXCHANGE, str(tmp_path / "out")], cwd=PROJECT_ROOT,
                                     text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=as_from_a_terminal,
                                     env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(self.tmp),
                                          "PYTHONPATH": str(PROJECT_ROOT)})
        self.out, self.err = [], []
        import threading

        self.readers = [threading.Thread(target=lambda s=s, d=d: d.extend(s), daemon=True)
                        for s, d in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()
        self.wait_until(lambda: self.ranks_training(2), "the two exchanging ranks")
        time.sleep(2)  # both in the exchange


@pytest.mark.parametrize("sig, whole_group", [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_stopped_calibrate_ends_its_ranks_in_one_line(tmp_path, short_tmp, sig, whole_group):
    run = Calibrating(tmp_path, short_tmp)
    tree = run.tree()
    run.stop(sig, whole_group)
    assert run.finish() == 128 + sig
    assert_all_gone(tree)
    assert "".join(run.err).strip() == f"stopped by {signal.Signals(sig).name}: nothing written"
    assert not list(run.tmp.iterdir())  # the exchange's folder is removed


def test_calibrate_ranks_die_with_a_killed_launcher_and_its_folder_is_removed_later(tmp_path, short_tmp,
                                                                                    monkeypatch):
    from benchmarks.tools import calibrate

    run = Calibrating(tmp_path, short_tmp)
    tree = run.tree()
    run.proc.kill()
    run.finish()
    assert_all_gone(tree)
    (left,) = run.tmp.glob("calibrate-*")  # (beside multiprocessing's own pymp-* folder)
    assert not (left / "times.json").exists()  # no rank wrote on after its launcher died
    monkeypatch.setattr(tempfile, "tempdir", str(run.tmp))
    fresh = calibrate.scratch_folder()  # what the next calibrate does first
    assert list(run.tmp.glob("calibrate-*")) == [fresh]


@pytest.mark.parametrize("module, args", [("benchmarks", ["workers=2", "epochs=1"]),
                                          ("benchmarks.tools.calibrate", ["--quick", "--out", "{out}"])])
def test_a_temporary_folder_too_long_for_the_fork_servers_socket_is_refused_in_one_line(tmp_path, module, args):
    from benchmarks.run.rank_server import SOCKET_PATH_MAX, SOCKET_SUFFIX

    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - SOCKET_SUFFIX - len(str(tmp_path))))
    deep.mkdir()
    args = [a.format(out=tmp_path / "out") for a in args]
    proc = subprocess.run([sys.executable, "-m", module, *args],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(deep)})
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: the temporary folder {deep} is {len(str(deep))} characters long")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- review r3: the warm sweep's faults
#: A warm sweep of two runs: the first trains until it is killed, the second is quick.
TWO_RUNS = ["method=full_halo", "workers=2", "epochs=100000,2", "hidden=16", "log_every=1", "eval_every=1",
            *SMALL_SYNTHETIC]


def warm_sweep(tmp_path, short_tmp, monkeypatch, *args: str) -> Launched:
    """The sweep of `TWO_RUNS` in a process of its own, its temporary folder `short_tmp` (where its runs'
    output goes), started once its first run's output shows the second epoch."""
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    sweep = Launched("benchmarks.commands.sweep", [*TWO_RUNS, f"results_dir={tmp_path / 'results'}",
                                                   f"cache_dir={tmp_path / 'cache'}", *args])
    sweep.wait_until(lambda: sum(log.read_text().count(" epoch ") for log in short_tmp.glob("gnnbench-run-*.log")) >= 2,
                     "the first run's second epoch")
    return sweep


def sweep_children(sweep: Launched) -> dict[str, psutil.Process]:
    """The sweep's own children: its fork server and the run it forked (the same command line as the sweep's)."""
    me = psutil.Process(sweep.proc.pid)
    out = {}
    for child in me.children():
        line = " ".join(_cmdline(child))
        if "forkserver" in line:
            out["fork server"] = child
        elif _cmdline(child) == me.cmdline():
            out["run"] = child
    return out


def records_by_epochs(folder) -> dict[int, dict]:
    return {(r := json.loads(p.read_text()))["config"]["epochs"]: r for p in folder.glob("*.json")}


def test_a_sweeps_run_killed_by_sigkill_is_a_failed_run_the_sweep_records_and_goes_on_from(tmp_path, short_tmp,
                                                                                          monkeypatch):
    """kill -9 of a forked run (the out-of-memory killer's choice): `killed by SIGKILL`, a failed record
    with the history reached, written by the sweep; the next run runs. With `resume=false` over an ok
    record of each run left by an earlier sweep, the killed run is not counted by that record (D2, D7)."""
    from benchmarks.commands import sweep as engine

    results = tmp_path / "results"
    runs, _ = engine.expand([*TWO_RUNS, f"results_dir={results}", f"cache_dir={tmp_path / 'cache'}", "resume=false"])
    results.mkdir()
    for cfg in engine.checked(runs, None):
        engine.path_of(cfg).write_text(json.dumps({"status": "ok", "run_id": "an earlier run's"}))
    sweep = warm_sweep(tmp_path, short_tmp, monkeypatch, "resume=false")
    tree = sweep.tree()
    sweep_children(sweep)["run"].kill()
    assert sweep.finish(timeout=180) == 1, "".join(sweep.out + sweep.err)
    assert_all_gone(tree)
    out = "".join(sweep.out)
    killed, quick = records_by_epochs(results)[100000], records_by_epochs(results)[2]
    assert killed["status"] == "failed"
    assert killed["error"] == "the run's process was killed by SIGKILL (out of memory?)"
    assert len(killed["history"]) >= 2 and killed["method"] == "full_halo" and killed["run_id"] != "an earlier run's"
    path = engine.path_of(engine.checked(runs[:1], None)[0])
    assert any(line.startswith("  full_halo synthetic ") and line.endswith(
        f" workers=2: FAILED: the run's process was killed by SIGKILL (out of memory?) (recorded by the sweep: {path})")
        for line in out.splitlines()), out
    assert quick["status"] == "ok" and quick["run_id"] != "an earlier run's"
    assert out.splitlines()[-2] == f"sweep: 2 runs: 1 ran, 0 kept, 1 failed; {RERUN}"
    assert not list((tmp_path / "cache" / "runs").iterdir())  # the killed run's scratch folder, read and removed


def test_a_sweep_survives_its_fork_servers_death(tmp_path, short_tmp, monkeypatch):
    """kill -9 of the ranks' fork server: the run in progress fails naming it, its ranks end, and the
    next run starts its ranks from a fresh server (D6)."""
    sweep = warm_sweep(tmp_path, short_tmp, monkeypatch)
    tree = sweep.tree()
    ranks = sweep_children(sweep)["fork server"].children()
    assert len(ranks) == 2
    sweep_children(sweep)["fork server"].kill()
    assert sweep.finish(timeout=180) == 1, "".join(sweep.out + sweep.err)
    assert_all_gone(tree)
    first, second = records_by_epochs(tmp_path / "results")[100000], records_by_epochs(tmp_path / "results")[2]
    assert first["status"] == "failed"
    assert first["error"] == "the ranks' fork server died (killed: out of memory?), so the run lost its ranks"
    assert second["status"] == "ok", second["error"]
    assert "".join(sweep.out).splitlines()[-2] == f"sweep: 2 runs: 1 ran, 0 kept, 1 failed; {RERUN}"


def test_a_killed_sweeps_temporary_files_carry_its_tag_and_the_next_sweep_removes_them(tmp_path, short_tmp,
                                                                                     monkeypatch):
    """kill -9 of a sweep leaves its run's output file and multiprocessing's folder (the fork server's
    socket) in the temporary folder, named with its owner tag; the next sweep removes them (D11)."""
    from benchmarks.base.leftovers import temporary_prefix
    from benchmarks.run.rank_server import MP_PREFIX

    sweep = warm_sweep(tmp_path, short_tmp, monkeypatch)
    tree = sweep.tree()
    tag = owner_tag(sweep.proc.pid)
    sweep.proc.kill()
    sweep.finish()
    assert_all_gone(tree)
    (log,) = short_tmp.glob("gnnbench-run-*")
    (folder,) = short_tmp.glob("pymp-*")
    assert log.name.startswith(f"gnnbench-run-{tag}") and folder.name == f"pymp-{tag}"
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    for prefix in ("gnnbench-run-", MP_PREFIX):  # what the next sweep does before it makes its own
        temporary_prefix(prefix)
    assert not log.exists() and not folder.exists()
