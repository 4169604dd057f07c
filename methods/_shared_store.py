"""DIGEST-A's shared state: a representation store and a parameter server that workers use without
waiting for each other.

Both are interfaces with one implementation here, in shared memory for the workers of one machine:
tensors mapped from files under /dev/shm that every rank opens and rank 0 unlinks as soon as all
have them mapped (nothing is left behind, even if a rank dies). A multi-machine store (a key-value
tier, a parameter-server process) implements the same methods. Critical sections are short copies
under one inter-process lock (`flock`).

Traffic is counted through `Comm.count` as if the store were a remote service: what a rank writes
(`stale_push`, `param_push`) and what it reads (`stale_pull`, `param_pull`).
"""
from __future__ import annotations

import fcntl
import math
import os
import tempfile
from contextlib import contextmanager

import torch

from benchmarks.comm import Comm


class SharedMemory:
    """Named CPU tensors shared by every rank of a one-machine run."""

    def __init__(self, comm: Comm, specs: dict[str, tuple[tuple[int, ...], torch.dtype]]):
        # os.urandom, not torch's generator: the dropout masks' random stream stays untouched.
        token = comm.broadcast(torch.tensor([int.from_bytes(os.urandom(7), "little")]), 0, "setup").item()
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        base = os.path.join(folder, f"gnnbench-{token:x}")
        paths = {name: f"{base}-{name}" for name in specs}
        lock_path = f"{base}.lock"
        self.tensors = {}
        for turn in (0, 1):  # rank 0 creates the files (zero-filled), then the others map them
            if (comm.rank == 0) == (turn == 0):
                self.lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                for name, (shape, dtype) in specs.items():
                    numel = math.prod(shape)
                    self.tensors[name] = torch.from_file(paths[name], shared=True, size=numel, dtype=dtype).view(shape)
            comm.barrier()
        if comm.rank == 0:
            for path in [*paths.values(), lock_path]:
                os.unlink(path)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    @contextmanager
    def locked(self):
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)


class RepresentationStore:
    """Rows keyed by (layer, global node id), each stamped with the parameter-server version at
    which it was written (-1: never written)."""

    def __init__(self, shm: SharedMemory, comm: Comm):
        self.shm, self.comm = shm, comm

    @staticmethod
    def specs(num_nodes: int, widths: dict[int, int]) -> dict:
        out = {}
        for layer, width in widths.items():
            out[f"rows{layer}"] = ((num_nodes, width), torch.float32)
            out[f"stamp{layer}"] = ((num_nodes,), torch.int64)
        return out

    def init_stamps(self) -> None:
        """Rank 0, before anyone pushes."""
        for name, t in self.shm.tensors.items():
            if name.startswith("stamp"):
                t.fill_(-1)

    def push(self, layer: int, ids: torch.Tensor, rows: torch.Tensor, version: int) -> None:
        rows = rows.detach().to("cpu", torch.float32)
        with self.shm.locked():
            self.shm[f"rows{layer}"].index_copy_(0, ids, rows)
            self.shm[f"stamp{layer}"].index_fill_(0, ids, version)
        self.comm.count("stale_push", layer, rows.numel() * rows.element_size())

    def pull(self, layer: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self.shm.locked():
            rows = self.shm[f"rows{layer}"].index_select(0, ids)
            stamps = self.shm[f"stamp{layer}"].index_select(0, ids)
        self.comm.count("stale_pull", layer, rows.numel() * rows.element_size())
        return rows, stamps


class ParameterServer:
    """The model's parameters (flattened) with Adam applied by whichever worker pushes a gradient
    (torch.optim.Adam's update with L2 weight decay; its step count is the version)."""

    def __init__(self, shm: SharedMemory, comm: Comm, lr: float, weight_decay: float,
                 betas=(0.9, 0.999), eps: float = 1e-8):
        self.shm, self.comm = shm, comm
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps

    @staticmethod
    def specs(numel: int) -> dict:
        return {"params": ((numel,), torch.float32), "exp_avg": ((numel,), torch.float32),
                "exp_avg_sq": ((numel,), torch.float32), "version": ((1,), torch.int64)}

    def version(self) -> int:
        return int(self.shm["version"][0])

    def initialise(self, params: list[torch.Tensor]) -> None:
        """Rank 0, before anyone pulls."""
        self.shm["params"].copy_(torch.cat([p.detach().reshape(-1).cpu() for p in params]))

    def pull(self, params: list[torch.Tensor], category: str = "param_pull") -> int:
        """Copy the current parameters into `params`; returns their version."""
        with self.shm.locked():
            flat, version = self.shm["params"].clone(), self.version()
        offset = 0
        for p in params:
            p.data.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.comm.count(category, None, flat.numel() * flat.element_size())
        return version

    def push(self, grads: list[torch.Tensor]) -> int:
        """Apply one Adam step with this gradient; returns the new version."""
        g = torch.cat([t.reshape(-1) for t in grads]).to("cpu", torch.float32)
        (b1, b2), shm = self.betas, self.shm
        with shm.locked():
            p, m, v = shm["params"], shm["exp_avg"], shm["exp_avg_sq"]
            step = self.version() + 1
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** step))
            shm["version"][0] = step
        self.comm.count("param_push", None, g.numel() * g.element_size())
        return step
