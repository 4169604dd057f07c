"""Process ownership, the one mechanism of every launcher the suite starts or runs under (the
runner's spawned ranks, torchrun's workers, calibrate's ranks):

- A process started by a launcher dies with it, whatever ended the launcher, even SIGKILL
  (`die_with_launcher`).
- What a process leaves behind when it is killed before it can clean up (DIGEST-A's shared-memory
  files, a run's scratch folder, a partition cache being built, calibrate's exchange folder, and in
  the temporary folder a sweep's run output and multiprocessing's folder: `temporary_prefix`) is
  named so that a later process can tell it is orphaned: `<prefix><owner pid>-<owner start
  time>-<anything>` (`owner_tag`), and that later process removes it (`remove_leftovers`). The
  start time tells a dead owner from a reused pid. In a folder that several machines may share (the
  partition cache), the prefix names the machine too (`on_this_host`): a pid means nothing on
  another machine."""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import shutil
import signal
import tempfile
import threading
import time


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


def temporary_prefix(prefix: str) -> str:
    """`<prefix><owner tag>`: the start of the name of a file or folder this process makes in the
    system's temporary folder (`tempfile.mkstemp(prefix=...)`), once the dead owners' ones there are
    removed (a sweep's run output, multiprocessing's folder, calibrate's exchange)."""
    remove_leftovers(tempfile.gettempdir(), prefix)
    return f"{prefix}{owner_tag()}"


def on_this_host(prefix: str) -> str:
    """`prefix` followed by this machine's name: leftovers named with it in a shared folder are
    removed only by a process on the machine that made them."""
    return f"{prefix}{os.uname().nodename}-"


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_watching = []


def killed_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG, Linux;
    elsewhere nothing). It survives exec, so it also serves as `subprocess.Popen(preexec_fn=...)`
    for a child command the suite starts (a sweep's runs)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_launcher() -> None:
    """End this process the moment its launcher is gone, whatever ended it (even SIGKILL); without
    this the ranks of a killed launcher train on, orphaned. Once per process.

    - A process started through multiprocessing (the runner's and calibrate's ranks, forked by a fork
      server, so their parent is not the launcher): its parent-process sentinel is a pipe the
      launcher holds open, so it reads end-of-file exactly when the launcher dies. (The fork server
      then goes too: the ranks held its keep-alive pipe.)
    - Any other (a torchrun worker, whose launcher is its parent, the agent): the kernel sends it
      SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG, Linux), and a watch on its parent pid
      (every 0.5 s) ends it where prctl is missing."""
    if os.getpid() in _watching:  # a forked child inherits the list, not the watching thread
        return
    _watching.append(os.getpid())
    parent = mp.parent_process()
    if parent is not None:
        sentinel = parent.sentinel

        def watch():
            mp.connection.wait([sentinel])
            os._exit(1)
    else:
        ppid = os.getppid()
        killed_with_parent()  # not Linux: the watch below
        if os.getppid() != ppid:  # the parent died before the signal was set up
            os._exit(1)

        def watch():
            while os.getppid() == ppid:
                time.sleep(0.5)
            os._exit(1)
    threading.Thread(target=watch, name="gnnbench-launcher-watch", daemon=True).start()
