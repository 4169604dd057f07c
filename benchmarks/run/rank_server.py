"""The fork server a run's ranks are forked from (multiprocessing's `forkserver`), in one place.

It imports torch and the runtime once, so a rank starts in a fraction of a second instead of
re-importing everything, and never inherits the launcher's threads, as a plain fork would.
torch._dynamo too: every torch optimizer imports it when it is built, which otherwise costs every
rank of every run 2 s of CPU. Its environment is the one it started with: the ranks are handed what
a run needs (benchmarks.run.runner._rank_process). Imports nothing heavy: `python -m benchmarks` starts
it before it imports torch itself (`start`), so the two imports, about 2.5 s each, overlap.

Its socket lives in multiprocessing's temporary folder, which carries its owner's tag (`pymp-<pid>-<start
time>-`, not multiprocessing's own `pymp-<random>`), so that the folder of a launcher killed before it could
remove it is removed by the next one (benchmarks/base/leftovers.py)."""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sys
import tempfile

from benchmarks.base.errors import UserError
from benchmarks.base.leftovers import owner_tag, temporary_prefix

PRELOAD = ["benchmarks.run.runner", "torch._dynamo"]

#: The longest path a Unix socket may have on Linux (`sun_path` is 108 bytes, its NUL included), and
#: what multiprocessing adds to the temporary folder for the fork server's socket
#: (`<tmp>/pymp-<pid>-<start time>-/listener-XXXXXXXX`, `mp_folder`), its owner's tag aside.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-/listener-XXXXXXXX")
MP_PREFIX = "pymp-"


def context(preload: list[str] = PRELOAD):
    """multiprocessing's forkserver context, its server importing `preload` once."""
    check_temporary_folder()
    mp_folder()
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    return ctx


def check_temporary_folder() -> None:
    """Refuse, in one line, a temporary folder whose path leaves no room for the fork server's socket
    (multiprocessing would fail later, deep in a traceback, with "AF_UNIX path too long")."""
    tmp = tempfile.gettempdir()
    room = SOCKET_PATH_MAX - SOCKET_SUFFIX - len(owner_tag())
    if len(tmp) > room:
        raise UserError(f"the temporary folder {tmp} is {len(tmp)} characters long; the fork server's socket "
                        f"lives there and needs it at most {room}: set TMPDIR to a shorter folder")


def mp_folder() -> str:
    """multiprocessing's temporary folder for this process (`multiprocessing.util.get_temp_dir`, where the
    fork server's socket goes), made here unless it exists: `<tmp>/pymp-<pid>-<start time>-`, removed at
    exit as multiprocessing removes its own, and, where this process is killed first, by the next process
    that makes one (multiprocessing's `pymp-<random>` tells no one whether its owner is alive)."""
    from multiprocessing import process, util

    config = process.current_process()._config  # what get_temp_dir reads (a forked child inherits it)
    if config.get("tempdir") is None:
        folder = os.path.join(tempfile.gettempdir(), temporary_prefix(MP_PREFIX))
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # this process's own (no other process has its pid and start time)
            pass
        util.Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100)
        config["tempdir"] = folder
    return config["tempdir"]


def died(wait: float = 0.0) -> bool:
    """Whether the fork server this process forks ranks from (its own, or the one it adopted) has died:
    killed, by the out-of-memory killer say. multiprocessing then reads every rank it forked as dead
    (exit code 255) while the ranks run on, and refuses every new one (ConnectionRefusedError).
    `wait`: seconds to keep looking. A killed process closes its sockets (the ranks read 255) before
    the kernel marks it a zombie, so a caller that has just read 255 gives the kernel that moment."""
    import time

    import psutil
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    if pid is None:
        return False
    deadline = time.monotonic() + wait
    while True:
        try:
            # dead, not yet reaped by its parent (or reaped: gone)
            if psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def serve() -> None:
    """Start the fork server now and wait until it is up, or a fresh one if it died (`died`): a warm
    sweep's runs, forked from it, all fork their ranks from this one server (`adopt`); the sweep calls
    this before each run, so a run after the server's death starts its ranks."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if "ensure_running" in vars(server) and died():  # adopted (from a parent), and dead: one of its own now
        del server.ensure_running
        os.close(server._forkserver_alive_fd)
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    _ensure_running()  # multiprocessing restarts a dead server it started itself


def _ensure_running() -> None:
    """Start the fork server unless it runs (or this process adopted one: `adopt`)."""
    import signal
    import threading
    from multiprocessing import forkserver
    context()
    # The server ignores SIGINT once it has imported its preload, seconds later; a Ctrl-C to the
    # terminal's process group before that would end it with a KeyboardInterrupt traceback. It is
    # started through exec, which keeps an ignored signal ignored: ignore it while it starts.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        forkserver._forkserver.ensure_running()  # the instance's: `adopt` replaces it (the module's alias is bound)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def adopt() -> None:
    """In a run forked from a process that serves ranks (`serve`): use that fork server, already
    warm, instead of starting another (multiprocessing's check that a server is alive asks the
    kernel about its own child, which the server is not of a fork: its address and keep-alive pipe
    are inherited and valid)."""
    from multiprocessing import forkserver, resource_tracker
    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        server.ensure_running = resource_tracker.ensure_running


def start(argv: list[str] | None = None) -> None:
    """Start the fork server now, in the background, unless this process is a torchrun rank or its
    command line (`argv`, default this process's) says `workers=1` (neither forks ranks). A launch that
    turns out to need none (one process, a refused config) leaves it idle; it exits with this process."""
    if "RANK" in os.environ or "workers=1" in (sys.argv[1:] if argv is None else argv):
        return
    _ensure_running()
