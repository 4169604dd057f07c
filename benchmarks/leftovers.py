"""What a process leaves behind when it is killed before it can clean up (DIGEST-A's shared-memory
files, a run's scratch folder), named so that a later process can tell it is orphaned:
`<prefix><owner pid>-<owner start time>-<anything>`. The start time tells a dead owner from a
reused pid."""
from __future__ import annotations

import os
import re
import shutil


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, /proc/<pid>/stat field 22); None when
    no such process runs (or there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """`<pid>-<start time>-` of process `pid` (this one by default): the part of a name
    `remove_leftovers` reads."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_time(pid) or 0}-"


def remove_leftovers(folder, prefix: str) -> list[str]:
    """Remove the files and folders in `folder` named `<prefix><pid>-<start time>-...` whose owner is
    dead: its pid runs no more, or runs a process started at another time (a reused pid). A live
    owner's are kept, as are names this suite did not make. Nothing is removed where /proc cannot
    tell (not Linux). Returns the paths removed."""
    if start_time(os.getpid()) is None or not os.path.isdir(folder):
        return []
    removed = []
    for name in os.listdir(folder):
        owner = re.match(rf"{re.escape(prefix)}(\d+)-(\d+)-", name)
        if owner and start_time(int(owner[1])) != int(owner[2]):
            path = os.path.join(folder, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                removed.append(path)
            except OSError:  # removed meanwhile by another process, or another user's (/dev/shm is sticky)
                pass
    return removed
