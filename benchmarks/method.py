"""What a method plugin is and how a run's method is resolved (which plugins and aliases exist is
benchmarks/registry.py's, re-exported here).

A plugin is one module `methods/<name>.py` defining a class `Method` (subclass of `Method` here)
whose `Options` dataclass declares its options (benchmarks/options.py); nothing else changes to add
one. An alias is a YAML in conf/method/ naming its plugin and its own option values (`ggs`). The
runtime resolves `method=<name>` to `methods.<plugin>` on demand and never imports a plugin by name.
"""
from __future__ import annotations

import copy
import importlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.aggregation import HaloPlan, LocalAdjacency
from benchmarks.comm import Comm, flatten, unflatten_into
from benchmarks.errors import UserError, choose
from benchmarks.options import RESERVED, Options, as_dict, defaults, validate
from benchmarks.partition import Part
from benchmarks.registry import CONF, aliases, method_names, plugin_names  # noqa: F401 (the registry, re-exported)
from benchmarks.stores import PartitionedStore, SharedMemory, replicated_store


@dataclass
class RankContext:
    """Everything a rank's method can use. Tensors are already on `device`. Plugins ask the context
    for what the launcher knows (`local_rank`, `local_world`) and for the stores that live beyond
    their part (`graph_store`, `shared_memory`); they never read the environment or the cache."""

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
    #: whose part is the whole graph); the stores below read other parts from it.
    partition_folder: Path | None = None
    #: This rank among the ranks of its machine, and how many ranks its machine runs (the launcher's
    #: LOCAL_RANK and LOCAL_WORLD_SIZE; rank and world when every rank is on one machine).
    local_rank: int = 0
    local_world: int = 1
    #: The method's validated options (`Method.Options`); rebuilt from `cfg["method"]` if not given
    #: (None for a context built without a method: model tests).
    options: Options | None = None

    def __post_init__(self):
        if self.options is None and "method" in self.cfg:
            self.options = resolve(self.cfg)[1]
        # fp16's dynamic loss scaling (`precision=fp16`; a pass-through otherwise): the loss is scaled
        # before backward and the summed gradients unscaled before the step, which is skipped (and the
        # scale halved) when they overflowed. Every rank sees the same summed gradients, so every rank
        # skips the same steps.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.cfg.get("precision") == "fp16")

    def graph_store(self, kind: str):
        """A graph store (`benchmarks.stores`) for samplers: `replicated` (the whole graph, built once
        per machine from the partition cache and memory-mapped) or `partitioned` (this part; other
        parts sampled and fetched from their owners). Collective: every rank asks for the same kind."""
        choose("graph store", kind, ("replicated", "partitioned"))
        if kind == "partitioned":
            return PartitionedStore(self.part, self.comm, self.device)
        return replicated_store(self.part, self.comm, self.device, self.partition_folder, builds=self.local_rank == 0)

    def shared_memory(self, specs: dict, user: str):
        """Named CPU tensors shared by every rank (`stores.SharedMemory`; specs: name -> (shape,
        dtype)), zero-filled. Needs every rank on one machine: otherwise a UserError naming `user`
        (the option that asked for it). Collective."""
        if self.local_world != self.world:
            raise UserError(f"{user} keeps its store in shared memory, so every worker must run on one machine "
                            "(a multi-machine store implements benchmarks/stores.py's interface)")
        return SharedMemory(self.comm, specs)


class Method:
    """Base class of a method plugin. `train_epoch` runs one epoch of training on this rank and
    returns this rank's share of the epoch's global training loss (the runtime sums the shares).
    Evaluation, timing, memory and communication probes are the runtime's, not the method's."""

    #: True for methods that run the whole graph in one process whatever `workers` says.
    single_process = False
    #: False for methods whose ranks step without waiting for each other (DIGEST-A): the runtime
    #: then reduces its per-epoch probes only at evaluation points, the only barriers left.
    synchronous = True
    #: False for methods whose aggregation changes state during a step in a way that a recompute in
    #: backward (`memory.checkpoint`) would repeat and that `aggregation.Replay` does not cover.
    recomputable = True
    #: True for methods that apply `RankContext.scaler` (fp16's loss scaling) around their step: the
    #: others refuse `precision=fp16` in one line.
    loss_scaling = False
    #: The method's options (a dataclass, benchmarks/options.py); subclasses extend their family's.
    Options = Options
    #: The option values that turn this method's approximation off: its exact control, which a study
    #: runs on the same seeds, partition, model and layer-0 treatment, so that method minus control is
    #: the approximation's effect (`control_config`; sweeps with `sweep.controls: true`). `name`
    #: switches to another method, which keeps the options both declare (`layer0`). None: the method
    #: is exact, or (the sampling baselines) declares no exact counterpart.
    exact_control: dict | None = None

    @classmethod
    def check_partition(cls, options: Options, cfg: dict, partition_stats: dict) -> None:
        """Checks that need the partition, called by the launcher once the parts are prepared and
        before any rank starts; raise UserError. `partition_stats` is the partition manifest's
        `stats` (`nodes_per_rank`, `train_nodes_per_rank`, `halo_nodes_per_rank`, ...; for one
        in-process rank the same over the whole graph)."""

    def __init__(self, ctx: RankContext):
        self.ctx = ctx

    def train_epoch(self, epoch: int) -> torch.Tensor:
        raise NotImplementedError

    def between_epochs(self, epoch: int) -> None:
        """Called on every rank right before epoch `epoch`'s `train_epoch`, outside its timed region:
        work that the method's paper keeps out of its epoch time (AdaQP's bit-width assignment). What
        it sends is counted with the epoch's bytes."""

    def evaluation_model(self) -> torch.nn.Module:
        """The model the shared evaluation runs, identical on every rank (methods whose replicas
        drift apart between averaging rounds return their average)."""
        return self.ctx.model

    def probes(self) -> dict:
        """Method-specific per-rank measurements for the record (`summary.per_rank[]`)."""
        return {}

    def optimize(self, loss: torch.Tensor, scale: float | None = None, sync: str | None = "grad_allreduce",
             optimizer: torch.optim.Optimizer | None = None, scaler: torch.amp.GradScaler | None = None,
             set_to_none: bool = True) -> None:
        """One optimizer step on `loss`, this rank's share of the loss (`loss_share`): zero the
        gradients, backward (fp16: scaled), sum them over ranks (`sync`: the category; None for local
        steps), step (fp16: unscaled, skipped on overflow). See `optimizer_step`."""
        optimizer_step(self, loss, scale, sync, optimizer, scaler, set_to_none)

    def all_reduce_gradients(self, category: str) -> None:
        """The gradient sum of `optimize` (`sync_gradients`); a loop may wrap it (the mini-batch loop
        times it as communication)."""
        sync_gradients(self.ctx, category)

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
    unflatten_into(ctx.comm.all_reduce(flatten(grads), category, gradients=True), grads)


def local_loss(ctx: RankContext, logits: torch.Tensor) -> torch.Tensor:
    """This rank's share of the mean cross-entropy over the *global* training set."""
    mask = ctx.part.train_mask
    return loss_share(logits[mask], ctx.part.y[mask], total=ctx.part.num_train_global)


# --------------------------------------------------------------------------- the loss and the step
# Every training loop (the families', DIGEST-A's, pyg_plain's) computes its loss with `loss_share`
# and steps with `Method.optimize`, so zeroing, fp16's loss scaling, the gradient sum and the skipped
# steps are written once.
def loss_share(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | float | None = None,
               total: int | None = None) -> torch.Tensor:
    """This rank's share of a global mean cross-entropy: the sum over `logits`' rows of their
    cross-entropy (times `weights`, per row or one number, where the weights already carry the mean's
    denominator: a mini-batch's estimate), divided by `total` (the global count of rows the mean is
    over) when given. Without either, the plain sum (a loop that backpropagates it rescaled, as local
    steps do, passes `scale` to `Method.optimize`)."""
    if weights is None:
        loss = F.cross_entropy(logits, labels, reduction="sum")
    else:
        loss = (F.cross_entropy(logits, labels, reduction="none") * weights).sum()
    return loss if total is None else loss / total


def optimizer_step(method: "Method", loss: torch.Tensor, scale: float | None = None,
                   sync: str | None = "grad_allreduce", optimizer: torch.optim.Optimizer | None = None,
                   scaler: torch.amp.GradScaler | None = None, set_to_none: bool = True) -> None:
    """`Method.optimize`: one optimizer step on `loss` (`loss_share`'s, after the forward):
      - the gradients zeroed (`set_to_none=False`: zeros, so that every rank all-reduces the same
        gradient list even when its batch is empty);
      - backward of `loss` (times `scale`: local steps rescale the share to the rank's own mean),
        scaled first by `scaler` (`ctx.scaler`: fp16's loss scaling; a pass-through otherwise);
      - the gradients summed over ranks in category `sync` (`Method.all_reduce_gradients`; None:
        local steps, the replicas kept in step by averaging);
      - `optimizer`'s step (`ctx.optimizer` by default) on the unscaled gradients, skipped (and the
        scale lowered) when they overflowed. The gradients are summed while still scaled, so every
        rank sees the same overflow and skips the same steps.
    The gradients stay after the step (`probe_grads` reads epoch 0's)."""
    ctx = method.ctx
    optimizer = optimizer or ctx.optimizer
    scaler = scaler or ctx.scaler
    optimizer.zero_grad(set_to_none=set_to_none)
    scaler.scale(loss if scale is None else loss * scale).backward()
    if sync is not None:
        method.all_reduce_gradients(sync)
    scaler.step(optimizer)
    scaler.update()


# --------------------------------------------------------------------------- registry
# Which names exist (plugins, aliases) is benchmarks/registry.py's, which imports no torch; here,
# what a name runs.
def method_class(name: str) -> type[Method]:
    """The `Method` class `method=<name>` runs (an alias's plugin's)."""
    found = aliases()  # read once: it parses every alias YAML
    choose("method", name, set(plugin_names()) | set(found))
    return importlib.import_module(f"methods.{found.get(name, {}).get('plugin', name)}").Method


def method_defaults(name: str) -> dict:
    """The options a run of `method=<name>` gets when nothing is overridden: the plugin's declared
    defaults with an alias's own values applied (no `name`, no `plugin`)."""
    alias = aliases().get(name, {})
    return {**defaults(method_class(name).Options),
            **{k: v for k, v in alias.items() if k not in (*RESERVED, "defaults")}}


def resolve(cfg: dict) -> tuple[type[Method], Options]:
    """The method class of `cfg["method"]["name"]` and its validated options (UserError otherwise).
    `cfg["method"]` becomes the complete validated dict (name, an alias's plugin, every option), so
    the record's `config.method` holds every option. The launcher calls it once, before anything runs."""
    m = cfg["method"]
    method_cls = method_class(m["name"])
    options = validate(method_cls.Options, m, cfg)
    cfg["method"] = {**{k: m[k] for k in RESERVED if k in m}, **as_dict(options)}
    return method_cls, options


def control_config(cfg: dict) -> dict | None:
    """The run config of `cfg`'s exact control: its method's `exact_control` applied and a lossy
    codec (`comm.quantize`) switched off, everything else (seed, partition, model, layer 0) the same;
    None when `cfg` is its own control (an exact method, or an approximation already switched off).
    `cfg["method"]` must be resolved (`resolve`)."""
    method = cfg["method"]
    spec = dict(method_class(method["name"]).exact_control or {})
    name = spec.pop("name", method["name"])
    declared = defaults(method_class(name).Options)  # the control's options and their plugin defaults
    if name == method["name"]:
        section = {**method, **spec}
    else:
        section = {"name": name, **{k: v for k, v in method.items() if k in declared}, **spec}
    alias = aliases().get(name)
    if alias and all(section.get(k) == declared.get(k) for k in alias if k not in (*RESERVED, "defaults")):
        # the control switches off all the alias sets (pipegcn_gf's: pipegcn without pipelining): one
        # control, named by its plugin, serves every alias of it
        section = {"name": alias["plugin"], **{k: v for k, v in section.items() if k not in RESERVED}}
    control = copy.deepcopy(cfg)
    control["method"] = section
    if (cfg.get("comm") or {}).get("quantize", "none") != "none":
        control["comm"] = {**cfg["comm"], "quantize": "none", "quantize_grads": False}
    resolve(control)
    return None if control == cfg else control
