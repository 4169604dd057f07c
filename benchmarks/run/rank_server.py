"""The fork server a run's ranks are forked from (multiprocessing's `forkserver`), in one place.

It imports torch and the runtime once, so a rank starts in a fraction of a second instead of
re-importing everything, and never inherits the launcher's threads, as a plain fork would.
torch._dynamo too: every torch optimizer imports it when it is built, which otherwise costs every
rank of every run 2 s of CPU. Its environment is the one it started with: the ranks are handed what
a run needs (benchmarks.run.runner._rank_process). Imports nothing heavy: `python -m benchmarks` starts
it before it imports torch itself (`start`), so the two imports, about 2.5 s each, overlap."""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import tempfile

from benchmarks.base.errors import UserError

PRELOAD = ["benchmarks.run.runner", "torch._dynamo"]

#: The longest path a Unix socket may have on Linux (`sun_path` is 108 bytes, its NUL included), and
#: what multiprocessing adds to the temporary folder for the fork server's socket
#: (`<tmp>/pymp-XXXXXXXX/listener-XXXXXXXX`).
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def context(preload: list[str] = PRELOAD):
    """multiprocessing's forkserver context, its server importing `preload` once."""
    check_temporary_folder()
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    return ctx


def check_temporary_folder() -> None:
    """Refuse, in one line, a temporary folder whose path leaves no room for the fork server's socket
    (multiprocessing would fail later, deep in a traceback, with "AF_UNIX path too long")."""
    tmp = tempfile.gettempdir()
    room = SOCKET_PATH_MAX - SOCKET_SUFFIX
    if len(tmp) > room:
        raise UserError(f"the temporary folder {tmp} is {len(tmp)} characters long; the fork server's socket "
                        f"lives there and needs it at most {room}: set TMPDIR to a shorter folder")


def serve() -> None:
    """Start the fork server now and wait until it is up: a warm sweep's runs, forked from it, all
    fork their ranks from this one server (`adopt`)."""
    _ensure_running()


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
