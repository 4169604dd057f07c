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
