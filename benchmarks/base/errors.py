"""The suite's two exceptions that end a run without a traceback: `UserError` (bad input, caught
before anything runs) and `Stopped` (a signal from outside ended the run)."""
import contextlib
import signal
import threading


class UserError(Exception):
    """Bad configuration, missing data or a damaged cache. The CLI prints the message alone,
    without a traceback, and exits with status 2."""


class MemoryChecked(Exception):
    """Raised in place of a run by `python -m benchmarks ... --check-memory` once the pre-flight memory
    check has its answer (analysis/preflight.py, `check_only`): `str(e)` is its line, `fits` whether
    the run fits. Nothing has started and nothing is recorded."""

    def __init__(self, line: str, fits: bool):
        super().__init__(line)
        self.fits = fits


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached the launcher of a run. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way mistakes it for the run's own
    failure; the launcher records the run as `failed` and the CLI exits with 128 + the signal."""

    def __init__(self, signum: int):
        self.signum = signum
        self.record = None  # the failed record's path, once the launcher wrote it
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def choose(kind: str, name: str, valid) -> str:
    """Return `name` if it is one of `valid`, else raise the suite's standard unknown-name error.
    Numbers among the names (`method.bits`: adaptive | 32 | 8 | 4 | 2) are listed first, in order."""
    valid = sorted(valid, key=lambda v: (isinstance(v, str), v))
    if name not in valid:
        raise UserError(f"unknown {kind} '{name}'; choose one of: {', '.join(map(str, valid))}")
    return name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_on_signals():
    """While the block runs, the first SIGINT, SIGTERM or SIGHUP raises `Stopped` in the main thread,
    so whoever launched the work stops what it started and says so; later signals are ignored
    while it cleans up (bounded: the launchers wait a few seconds at most). A signal this process
    already ignores (SIGHUP under nohup) stays ignored. Outside the main thread, where Python
    cannot set handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = []

    def handler(signum, frame):
        if not stopping:
            stopping.append(signum)
            raise Stopped(signum)

    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, h in previous.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def busy(what: str, log, first_s: float = 10.0, every_s: float = 15.0, grace_s: float = 2.0):
    """Around one long computation that Python cannot interrupt (generating or loading a large graph:
    single torch and numpy calls of minutes, during which `stop_on_signals`' handler cannot run):
    `log`s `<what>: 10 s so far · Ctrl-C stops` after `first_s` (a graph loaded sooner says nothing),
    then every `every_s`; and a stop
    signal that the main thread has not acted on within `grace_s` ends the process from a watching
    thread with one line, exit status 128 + the signal. Nothing of the run exists yet (no rank, no
    record, no scratch folder); the fork server exits with this process (its keep-alive pipe closes).
    The signal reaches the thread through `signal.set_wakeup_fd`, which Python's own C-level handler
    writes at once; torch and numpy release the GIL in their long calls, so the thread runs."""
    import os
    import select
    import sys
    import time

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    done = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        next_line = first_s
        while not done.is_set():
            ready, _, _ = select.select([r], [], [], 0.2)
            if ready:
                signum = os.read(r, 1)[0]
                if signum in STOP_SIGNALS and not done.wait(grace_s):
                    print(f"stopped by {signal.Signals(signum).name} while {what}: no record (stopped before "
                          "training)", file=sys.stderr, flush=True)
                    os._exit(128 + signum)
            elapsed = time.monotonic() - started
            if elapsed >= next_line and not done.is_set():
                log(f"{what}: {round(elapsed)} s so far · Ctrl-C stops")
                next_line += every_s

    watcher = threading.Thread(target=watch, name="busy-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)
