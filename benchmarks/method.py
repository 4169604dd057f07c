"""What a method plugin is, how plugins are found, and the full-graph training step they share.

A plugin is one module `methods/<name>.py` defining a class `Method` (subclass of `Method` here)
plus one `conf/method/<name>.yaml`; nothing else changes to add one. The runtime resolves
`method=<name>` to `methods.<name>` on demand and never imports a plugin by name.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.aggregation import HaloPlan, LocalAdjacency
from benchmarks.comm import Comm
from benchmarks.errors import choose
from benchmarks.partition import Part


@dataclass
class RankContext:
    """Everything a rank's method can use. Tensors are already on `device`."""

    cfg: dict  # the resolved run config
    rank: int
    world: int
    device: torch.device
    comm: Comm
    part: Part
    adj: LocalAdjacency
    plan: HaloPlan
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    #: The partition cache folder every rank's part was loaded from (None for one in-process rank,
    #: whose part is the whole graph): methods that read other parts (a replicated graph) find them here.
    partition_folder: Path | None = None

    @property
    def method_cfg(self) -> dict:
        return self.cfg["method"]


class Method:
    """Base class of a method plugin. `train_epoch` runs one epoch of training on this rank and
    returns this rank's share of the epoch's global training loss (the runtime sums the shares).
    Evaluation, timing, memory and communication probes are the runtime's, not the method's."""

    #: True for methods that run the whole graph in one process whatever `workers` says.
    single_process = False
    #: False for methods whose ranks step without waiting for each other (DIGEST-A): the runtime
    #: then reduces its per-epoch probes only at evaluation points, the only barriers left.
    synchronous = True

    @classmethod
    def check_config(cls, method_cfg: dict) -> None:
        """Raise UserError for bad method options; called before anything is launched."""

    @classmethod
    def check_run(cls, cfg: dict) -> None:
        """What the runner calls before launching: `check_config`, plus checks that need the whole
        run config (neighbour sampling: one fan-out per layer)."""
        cls.check_config(cfg["method"])

    def __init__(self, ctx: RankContext):
        self.ctx = ctx

    def train_epoch(self, epoch: int) -> torch.Tensor:
        raise NotImplementedError

    def evaluation_model(self) -> torch.nn.Module:
        """The model the shared evaluation runs, identical on every rank (methods whose replicas
        drift apart between averaging rounds return their average)."""
        return self.ctx.model

    def probes(self) -> dict:
        """Method-specific per-rank measurements for the record (`summary.per_rank[]`)."""
        return {}

    def straggle(self) -> None:
        """Injected heterogeneity (`straggler_delay_s`: seconds per step, listed per rank and cycled):
        call at the start of every training step."""
        delays = self.ctx.cfg.get("straggler_delay_s") or []
        if delays and delays[self.ctx.rank % len(delays)] > 0:
            time.sleep(delays[self.ctx.rank % len(delays)])


def sync_gradients(ctx: RankContext, category: str = "grad_allreduce") -> None:
    """Sum every parameter gradient over ranks in one flat all-reduce. Each rank's loss is already
    divided by the global training-node count, so the sum is the full-graph gradient."""
    grads = [p.grad for p in ctx.model.parameters() if p.grad is not None]
    if ctx.world == 1 or not grads:
        return
    flat = ctx.comm.all_reduce(torch.cat([g.reshape(-1) for g in grads]), category)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def local_loss(ctx: RankContext, logits: torch.Tensor) -> torch.Tensor:
    """This rank's share of the mean cross-entropy over the *global* training set."""
    mask = ctx.part.train_mask
    return F.cross_entropy(logits[mask], ctx.part.y[mask], reduction="sum") / ctx.part.num_train_global


# --------------------------------------------------------------------------- registry
def _plugin_path() -> list[str]:
    """The `methods` package, plus folders in GNNBENCH_METHODS_PATH (out-of-tree plugins; spawned
    ranks inherit the variable, so they find the same plugins)."""
    import methods

    for folder in filter(None, os.environ.get("GNNBENCH_METHODS_PATH", "").split(os.pathsep)):
        if folder not in methods.__path__:
            methods.__path__.append(folder)
    return methods.__path__


def method_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(_plugin_path()) if not m.name.startswith("_"))


def method_class(name: str) -> type[Method]:
    choose("method", name, method_names())
    return importlib.import_module(f"methods.{name}").Method
