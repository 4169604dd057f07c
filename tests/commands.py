"""The suite's commands (`python -m benchmarks`, `benchmarks.commands.sweep`, `analysis`), run for a test from a
warm parent: what `subprocess.run([sys.executable, "-m", module, *args], ...)` gives, without paying,
per command, a fresh interpreter's imports (torch, Hydra, pandas: 3-4 s of CPU) and a fresh fork
server for its ranks.

The parent is one process per test session (per pytest-xdist worker), started on first use by
`python -m tests.commands`: it imports what the commands import, starts the ranks' fork server, and
then only forks. It never runs a test, so it holds no test's state. Each command is forked from it, with
the test's working folder and environment, its output into files of its own, its ranks forked from the
parent's fork server (`rank_server.adopt`): its own process, with its own exit status, dying with the
parent (and the parent with the test session). A sweep forked here forks its own runs as it does anywhere.

What this leaves to real fresh processes: how a command starts (`python -m benchmarks` starting its
fork server before it imports torch) and what a signal does to it. The tests of stopping, process
ownership, torchrun and the native build without a compiler start `sys.executable` themselves (the
warm sweep's isolation test forks its sweeps here, and has the runs it compares with started fresh)."""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.core.datasets import PROJECT_ROOT

#: What the parent imports before it forks anything: every command's own imports.
#: (Not the `__main__` modules themselves: each command runs its own afresh.)
WARM = ["torch", "torch._dynamo", "benchmarks.commands.cli", "benchmarks.run.runner", "benchmarks.commands.sweep",
        "analysis.preflight", "analysis.records", "analysis.report", "analysis.advise", "matplotlib.pyplot"]

_parent: subprocess.Popen | None = None


def run(module: str, *args: str, env: dict | None = None, cwd=PROJECT_ROOT,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m <module> <args>` with `env` (default: this process's) in `cwd`, forked from the warm
    parent; its exit status and output as `subprocess.run(..., capture_output=True, text=True)` gives
    them. Past `timeout` seconds the command is killed and `subprocess.TimeoutExpired` raised."""
    global _parent
    if _parent is None or _parent.poll() is not None:
        _parent = subprocess.Popen([sys.executable, "-m", "tests.commands"], cwd=PROJECT_ROOT, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, preexec_fn=_dies_with_tests)
        atexit.register(_parent.kill)
    with tempfile.TemporaryDirectory(prefix="gnnbench-command-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        request = {"module": module, "args": list(args), "env": dict(os.environ if env is None else env),
                   "cwd": str(cwd), "stdout": out, "stderr": err, "timeout": timeout}
        _parent.stdin.write(json.dumps(request) + "\n")
        _parent.stdin.flush()
        answer = _parent.stdout.readline()
        if not answer.startswith("{"):
            raise RuntimeError(f"the warm parent of the tests' commands died (exit status {_parent.wait()})")
        code = json.loads(answer)["returncode"]
        stdout, stderr = (open(p, errors="replace").read() for p in (out, err))
    argv = [sys.executable, "-m", module, *args]
    if code is None:
        raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def _dies_with_tests() -> None:
    from benchmarks.base.leftovers import killed_with_parent

    killed_with_parent()


def _serve() -> None:
    """The warm parent: one request a line on stdin, one answer a line on stdout."""
    import gc
    import importlib

    # The answers go on a descriptor of their own; fd 1 becomes stderr for everything started from here
    # (the fork server, whose ranks would otherwise write into the answers).
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import torch

    threads = torch.get_num_threads()
    # no OpenMP pool here: one would not survive a fork (benchmarks/commands/sweep.py `warm_up`)
    torch.set_num_threads(1)
    for name in WARM:
        importlib.import_module(name)
    from benchmarks.run import rank_server

    rank_server.serve()
    gc.freeze()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _command(request, threads)
        code = _wait(pid, request["timeout"])
        answers.write(json.dumps({"returncode": code}) + "\n")
        answers.flush()


def _wait(pid: int, timeout: float) -> int | None:
    """The forked command's exit status as subprocess gives it (-N: killed by signal N); None when it
    ran past `timeout` and was killed (its ranks die with it)."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def _command(request: dict, threads: int) -> None:
    """In the forked child: become `python -m <module> <args>` in the request's folder and environment."""
    import runpy

    from benchmarks.commands.sweep import become_child

    def work() -> None:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)

    become_child(work, request["stdout"], request["stderr"], threads)


if __name__ == "__main__":
    _serve()
