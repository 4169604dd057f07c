"""What a method plugin is and how a run's method is resolved (which plugins and aliases exist is
benchmarks/base/registry.py's, re-exported here).

A plugin is one module `methods/<name>.py` defining a class `Method` (subclass of `Method` here)
whose `Options` dataclass declares its options (benchmarks/base/options.py); nothing else changes to add
one. An alias is a YAML in conf/method/ naming its plugin and its own option values (`ggs`). The
runtime resolves `method=<name>` to `methods.<plugin>` on demand and never imports a plugin by name.
"""
from __future__ import annotations

import functools
import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import HaloPlan, LocalAdjacency
from benchmarks.core.comm import Comm, flatten, unflatten_into
from benchmarks.base.errors import UserError, choose
from benchmarks.base.options import RESERVED, Options, defaults
from benchmarks.core.partition import Part
from benchmarks.base.registry import alias_of, method_names, plugin_of, plugin_path
from benchmarks.core.stores import PartitionedStore, SharedMemory, replicated_store
from benchmarks.core.recompute import Recompute

if TYPE_CHECKING:  # annotations only: the configuration schema imports the plugins' options from here
    from benchmarks.run.config import RunConfig
    from benchmarks.base.traffic import Shape


@dataclass
class RankContext:
    """Everything a rank's method can use. Tensors are already on `device`. Plugins ask the context
    for what the launcher knows (`local_rank`, `local_world`) and for the stores that live beyond
    their part (`graph_store`, `shared_memory`); they never read the environment or the cache."""

    cfg: "RunConfig"  # the validated run (benchmarks.run.config.RunConfig): `ctx.cfg.hidden`, `ctx.cfg.model_name`
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
    #: Activation checkpointing's state (benchmarks/core/recompute.py), the rank's one object: handed to
    #: the model, to `Comm` (which counts a recompute's traffic apart) and, by the plugin, to the
    #: aggregators that replay rows (`HaloAggregator(..., recompute=ctx.recompute)`).
    recompute: Recompute = field(default_factory=Recompute)

    def __post_init__(self):
        # fp16's dynamic loss scaling (`precision=fp16`; a pass-through otherwise): the loss is scaled
        # before backward and the summed gradients unscaled before the step, which is skipped (and the
        # scale halved) when they overflowed. Every rank sees the same summed gradients, so every rank
        # skips the same steps.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.cfg.precision == "fp16")

    @property
    def draws(self):
        """The rank's random draws (benchmarks/core/draws.py): keyed by what they draw for, never by rank."""
        return self.comm.draws

    @property
    def options(self) -> Options:
        """The method's validated options (`Method.Options`)."""
        return self.cfg.method

    def graph_store(self, kind: str):
        """A graph store for samplers (`benchmarks.core.stores.GraphStore`: `hop`, `features`,
        `dataset_ids`, in store ids): `replicated` (the whole graph, built once per machine from the
        partition cache and memory-mapped) or `partitioned` (this part; other parts sampled and fetched
        from their owners). Collective: every rank asks for the same kind."""
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
                            "(a multi-machine store implements benchmarks/core/stores.py's interface)")
        return SharedMemory(self.comm, specs)


class Method:
    """Base class of a method plugin. `train_epoch` runs one epoch of training on this rank and
    returns this rank's share of the epoch's global training loss (the runtime sums the shares).
    Evaluation, timing, memory and communication probes are the runtime's, not the method's."""

    #: True for methods that run the whole graph in one process whatever `workers` says.
    single_process = False
    #: False for a method that brings its own network and optimizer (pyg_plain): the context then
    #: builds no suite model (`ctx.model` and `ctx.optimizer` are None) and the shared evaluation runs
    #: `evaluation_model()`.
    builds_model = True
    #: False for methods whose ranks step without waiting for each other (DIGEST-A): the runtime
    #: then reduces its per-epoch probes only at evaluation points, the only barriers left.
    synchronous = True
    #: The savers and axes this method applies (docs/savers.md), each named as the run config spells
    #: it: a section (`memory`: all its options), an option (`memory.checkpoint`) or one value
    #: (`precision=bf16`). A run that moves any other away from its default is refused in one line
    #: before launch (`config.check`): a record must never name a saver that did not run. The base
    #: class applies what the suite's model and `Comm` apply; fp16 also needs the loss scaling of a
    #: loop that steps through `Method.optimize` (the families add it), `comm` needs rows or
    #: gradients that cross ranks through `Comm`, and `memory.checkpoint` an aggregation that
    #: `aggregation.Replay` can repeat in the recompute.
    applies: frozenset = frozenset({"precision=bf16", "kernel", "draws", "memory", "comm"})
    #: The method's options (a dataclass, benchmarks/base/options.py); subclasses extend their family's.
    Options = Options
    class About:
        """What the method is, apart from how it trains (`Options`) and what it costs (`Cost`): a plugin
        nests `class About(<its base>.About)` with its three lines. Every record states them
        (`methods_table.about`), and the findings study sets them beside what it measured."""

        #: The option values that turn this method's approximation off: its exact control, which a
        #: study runs on the same seeds, partition, model and layer-0 treatment, so that method minus
        #: control is the approximation's effect (`control_config`; sweeps with `sweep.controls: true`).
        #: `name` switches to another method, which keeps the options both declare (`layer0`). None: the
        #: method is exact, or (the sampling baselines) declares no exact counterpart.
        exact_control: dict | None = None
        #: What the method changes against exact full-graph training, in a few words ("" for an exact
        #: method), and where its paper says it wins: the findings table (analysis/studies/findings.py)
        #: sets both beside what the findings study measured, so a claim and its test sit in one row.
        approximates: str = ""
        claim: str = ""

    @classmethod
    def check_partition(cls, run: "RunConfig", partition_stats: dict) -> None:
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
        """One optimizer step on `loss` (`loss_share`'s, after the forward):
          - the gradients zeroed (`set_to_none=False`: zeros, so that every rank all-reduces the same
            gradient list even when its batch is empty);
          - backward of `loss` (times `scale`: local steps rescale the share to the rank's own mean),
            scaled first by `scaler` (`ctx.scaler`: fp16's loss scaling; a pass-through otherwise);
          - the gradients summed over ranks in category `sync` (`all_reduce_gradients`; None: local
            steps, the replicas kept in step by averaging);
          - `optimizer`'s step (`ctx.optimizer` by default) on the unscaled gradients, skipped (and
            the scale lowered) when they overflowed. The gradients are summed while still scaled, so
            every rank sees the same overflow and skips the same steps.
        The gradients stay after the step (`probe_grads` reads epoch 0's)."""
        optimizer = optimizer or self.ctx.optimizer
        scaler = scaler or self.ctx.scaler
        optimizer.zero_grad(set_to_none=set_to_none)
        scaler.scale(loss if scale is None else loss * scale).backward()
        if sync is not None:
            self.all_reduce_gradients(sync)
        scaler.step(optimizer)
        scaler.update()

    def all_reduce_gradients(self, category: str) -> None:
        """The gradient sum of `optimize` (`sync_gradients`); a loop may wrap it (the mini-batch loop
        times it as communication)."""
        sync_gradients(self.ctx, category)

    def straggle(self) -> None:
        """Injected heterogeneity (`straggler_delay_s`: seconds per step, listed per rank and cycled):
        call at the start of every training step."""
        delays = self.ctx.cfg.straggler_delay_s or []
        if delays and delays[self.ctx.rank % len(delays)] > 0:
            time.sleep(delays[self.ctx.rank % len(delays)])

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost:
        """What `analysis.costmodel` asks a plugin to project it, apart from its training (docs/projection.md,
        "A plugin states its traffic"): a plugin nests `class Cost(<its base>.Cost)`, as it nests
        `Options`. Each hook is a classmethod given the plugin's validated `Options`, and where it needs
        them a built model (`benchmarks.core.models.GNN`: layers, `exchanges()`, parameters) and one
        rank's shape (`benchmarks.base.traffic.Rank`); the counting helpers are `benchmarks.base.traffic`'s.
        The defaults: traffic not modelled, layer 0 as its `layer0` option says, the whole halo kept, no
        tables."""

        #: Option values besides the defaults that `advise` projects too, as separate rows: a choice a
        #: user weighs ({"feature_cache=0.1": {"feature_cache": 0.1}}).
        advise_variants: dict = {}

        #: The cost model's opt-out, one line: why it leaves this method out, as a phrase the suite shows
        #: after `<name> is not modelled: ` (`costmodel.why_not_modelled`). A plugin that sets it in its own
        #: `Cost` is not modelled, whatever hooks its family states (`states_traffic`).
        not_modelled = "its plugin states no traffic (no `traffic` hook)"
        #: The hooks a plugin (or its family) overrides to state its traffic: `traffic` here; a family whose
        #: `traffic` is built from the plugin's `shape` (the mini-batch and subgraph families) names `shape`.
        states_with: tuple = ("traffic",)

        @classmethod
        def traffic(cls, options: Options, model, rank) -> list | None:
            """What one rank moves per training epoch (steady state: periodic traffic averaged), as
            `benchmarks.base.traffic.Transfer`s in the runtime's categories: summed over ranks, what the runs
            count per epoch (tests/analysis/test_traffic_counts.py). Called only with two or more ranks.
            None: not modelled (the method is left out, with `not_modelled`)."""
            return None

        @classmethod
        def shape(cls, options: Options, model, rank) -> "Shape | None":
            """One training step's rows and edges per layer, steps per epoch, the sampler's edges and the
            rows read from host memory (`benchmarks.base.traffic.Shape`), where a step is not one pass over the
            rank's whole part: the mini-batch, subgraph, local-round and one-device families. None (the
            default): every layer runs on the part's rows and edges once an epoch."""
            return None

        @classmethod
        def states_traffic(cls) -> bool:
            """Whether the cost model projects this plugin: every hook of `states_with` is overridden
            below the nearest class that says `not_modelled` (so a plugin's own `not_modelled` opts it
            out whatever its family's `traffic` does, and a family's `traffic` counts only once the
            plugin states what that needs)."""
            def where(attr: str) -> int:  # how far up the Cost classes `attr` is defined
                return next(i for i, c in enumerate(cls.__mro__) if attr in vars(c))
            return all(where(hook) < where("not_modelled") for hook in cls.states_with)

        @classmethod
        def layer0_mode(cls, options: Options) -> str:
            """How layer 0 gets its halo (`benchmarks.families.partition_parallel.LAYER0`): its `layer0`
            option, `exchanged` for a method without one."""
            return getattr(options, "layer0", "exchanged")

        @classmethod
        def kept_halo_rows(cls, options: Options, rank) -> float:
            """Halo rows a layer keeps for backward (memory): the whole halo by default."""
            return rank.halo

        @classmethod
        def held_structure(cls, options: Options, rank) -> tuple[float, float]:
            """(nodes, in-edges) of the graph structure a rank holds and aggregates over (memory: the
            structure, and GAT's per-edge softmax terms): its part's by default; a method that keeps more
            (the whole graph, as tensor parallelism does) says so."""
            return rank.nodes, rank.edges

        @classmethod
        def stale_table_bytes(cls, options: Options, model, rank) -> float:
            """Bytes of the tables of earlier epochs' rows (and gradients) the method keeps between steps
            (memory; `benchmarks.base.traffic.stale_tables`): none by default."""
            return 0.0


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
# Every training loop (the families', DIGEST-A's, pyg_plain's) computes its loss with `loss_share`,
# and every loop that steps its own optimizer steps with `Method.optimize` (DIGEST-A's workers only
# compute gradients: its parameter server steps), so zeroing, fp16's loss scaling, the gradient sum
# and the skipped steps are written once.
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


# --------------------------------------------------------------------------- registry
# Which names exist (plugins, aliases) is benchmarks/base/registry.py's, which imports no torch; here,
# what a name runs. Both are cached: a run resolves its method once.
def method_class(name: str) -> type[Method]:
    """The `Method` class `method=<name>` runs (an alias's plugin's); its module is imported now, the
    first time the name is asked for, and no other plugin's is."""
    choose("method", name, method_names())
    return _plugin_class(plugin_of(name), plugin_path())


@functools.cache
def _plugin_class(plugin: str, path: tuple[str, ...]) -> type[Method]:
    return importlib.import_module(f"methods.{plugin}").Method


def plugin_failure(name: str, error: BaseException, asked: str) -> str:
    """One line for a plugin that raised while the suite asked it something (`asked`: importing it, its
    `Cost.traffic`, ...): the method, its plugin's file, the error, and the line of the plugin it was
    raised at (or, where not in the plugin, the innermost line), so that one plugin's failure is
    reported as its own and the other methods go on (`--methods`, `python -m analysis`)."""
    import importlib.util
    import traceback
    plugin = plugin_of(name)
    try:
        origin = importlib.util.find_spec(f"methods.{plugin}").origin
    except (ImportError, AttributeError, ValueError):
        origin = None
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, SyntaxError) and error.filename:
        frames.append(traceback.FrameSummary(error.filename, error.lineno or 0, "<module>"))
    own = [f for f in frames if origin and f.filename == origin]
    at = (own or frames or [None])[-1]
    message = (str(error).strip().splitlines() or [""])[0]
    return (f"method {name}: plugin {origin or plugin} raised {type(error).__name__}"
            + (f": {message}" if message else "") + f" in {asked}"
            + (f" (at {Path(at.filename).name}:{at.lineno})" if at else ""))


def method_defaults(name: str) -> dict:
    """The options a run of `method=<name>` gets when nothing is overridden: the plugin's declared
    defaults with an alias's own values applied (no `name`, no `plugin`)."""
    alias = alias_of(name) or {}
    return {**defaults(method_class(name).Options),
            **{k: v for k, v in alias.items() if k not in (*RESERVED, "defaults")}}
