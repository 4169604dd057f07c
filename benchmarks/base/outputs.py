"""Where the suite writes, checked once for every tool that writes (a run's results and cache
folders, the report, the projection, calibrate's profile, partition statistics): the output is
checked before anything is measured (`check_writable`), files appear whole or not at all
(`write_atomic`), and a write that fails later, on a full disk or a folder removed meanwhile, ends
in one line that names what could not be written and where (`writing`), never a traceback."""
from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

from benchmarks.base.errors import UserError


def check_writable(key: str, folder) -> Path:
    """A folder the tool writes to exists or can be made, and takes a file; else a UserError naming
    `key` (the option or argument that chose it)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise UserError(f"{key}={folder} is a file, not a folder; choose another {key}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"{key}={folder} is not a writable folder ({_reason(e)}); choose another {key}") from None
    return path


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


@contextlib.contextmanager
def writing(what: str, path):
    """Inside the block, a failed write (OSError, or the RuntimeError torch.save raises on a full
    disk) becomes a UserError: `could not write <what> to <path> (No space left on device)`."""
    try:
        yield
    except OSError as e:
        raise UserError(f"could not write {what} to {path} ({_reason(e)})") from None
    except RuntimeError as e:  # torch.save's zip writer reports a short write as "enforce fail ... unexpected pos"
        if "unexpected pos" not in str(e) and "file write failed" not in str(e):
            raise
        raise UserError(f"could not write {what} to {path} (the write was cut short: is the disk full?)") from None


def strict(obj):
    """`obj` with every NaN or infinite float replaced by null: records are strict JSON (Python's
    json would write bare NaN and Infinity, which other readers reject). A run that produced one
    says so in its `error`, or ran with allow_nonfinite=true."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def _dump(obj: dict, f) -> None:
    json.dump(strict(obj), f, indent=1, default=str, allow_nan=False)


class NotWritten(UserError):
    """A result measured but not written where it belongs (a full disk): the message says where it
    was kept instead."""


def write_or_keep(path: Path, obj: dict, what: str) -> None:
    """`write_atomic`, and when that fails (a full disk, a folder removed meanwhile) keep what was
    measured rather than lose it: written to the system's temporary folder, or, if that fails too,
    printed on stdout as one line of JSON. Then NotWritten, one line saying where it is."""
    path = Path(path)
    try:
        write_atomic(path, obj)
        return
    except OSError as e:
        reason = _reason(e)
    try:  # a new name each time: never over what an earlier failure kept
        fd, kept = tempfile.mkstemp(prefix=f"gnnbench-unwritten-{path.stem}-", suffix=path.suffix)
        with os.fdopen(fd, "w") as f:
            _dump(obj, f)
        where = f"it is kept at {kept}"
    except OSError:
        print(json.dumps(strict(obj), default=str), flush=True)
        where = "it is printed above, one line of JSON"
    raise NotWritten(f"could not write {what} to {path} ({reason}); {where}")


def write_atomic(path: Path, obj: dict) -> None:
    """`obj` as strict JSON at `path`, whole or not at all: written beside it, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            _dump(obj, f)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; records are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
