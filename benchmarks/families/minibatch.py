"""The mini-batch family: what the sampling baselines share, the mini-batch aggregators and the
data-parallel mini-batch loop (the sampler itself is `benchmarks.core.sampling`).

Data parallelism (DistDGL, PyG + DDP): every rank draws its own mini-batches from its own training
nodes, all ranks take the same number of steps per epoch, and gradients are all-reduced after every
step. Each rank's loss is weighted so that the sum over ranks is an unbiased estimate of the mean
training loss over the whole graph (exactly that mean when a batch covers every training node).

Rounds (`local_steps`, default null): an epoch is one round of K local steps (K_r with LLCG's
growth schedule, `local_steps_rho`), the sampler's passes over the training nodes carried on from
round to round, and `avg_every` counts rounds (parameters averaged at the end of a round); GGS's
regime. Null keeps an epoch one pass over the training nodes and `avg_every` counting steps.

`local_rounds.LocalRounds` (PSGD-PA, LLCG), the partition-parallel methods' rounds of K local
steps on the rank's own part, takes its sampled steps on this family's `BlockAggregator`.

Probes split each step's time into `sampling` (drawing the batch, with any requests to other ranks
it needs), `feature_fetch` (gathering the input rows), `compute` (forward, backward, optimizer) and
`communication` (the gradient all-reduce); they are reported per rank (`summary.per_rank[].phase_time_s`)
with the number of sampled edges and steps.

Randomness: every draw is keyed (benchmarks/core/draws.py), never by the rank; the loop sets the position
(`ctx.draws.at(epoch, step)`) before each step, and a sampler keys its draws at it (`Draws.epoch_key` for
draws every step of an epoch shares: a node's sampled neighbours).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import torch

from benchmarks.core.aggregation import Aggregator, LocalAdjacency
from benchmarks.core.comm import Comm
from benchmarks.base.errors import UserError
from benchmarks.families.aggregators import LocalAggregator
from benchmarks.families.replicas import AveragingOptions, LocalStepOptions, ReplicaAveraging
from benchmarks.run.method import RankContext, loss_share
from benchmarks.base.options import option
from benchmarks.core.probes import Timer
from benchmarks.core.sampling import SAMPLER, keyed_order
from benchmarks.base import traffic as cost
from benchmarks.core.recompute import Recompute

PHASES = ("sampling", "feature_fetch", "compute", "communication")


# --------------------------------------------------------------------------- aggregators
class BlockAggregator(Aggregator):
    """Runs a model on sampled blocks (message-flow graphs): layer i aggregates block i, a CSR from
    its destination rows to its source rows, whose first rows are the destinations themselves.
    `ids`: the dataset ids of the input rows (layer 0's sources); layer l's sources are their first
    rows, and dropout draws each row's mask by its id. Batch-norm statistics are those of this rank's
    batch (as DDP without SyncBatchNorm)."""

    def __init__(self, blocks: list[LocalAdjacency], comm: Comm, ids: torch.Tensor):
        self.blocks, self.comm, self.ids = blocks, comm, ids

    def row_ids(self, layer: int) -> torch.Tensor:
        return self.ids[:self.blocks[layer].num_cols]

    def targets(self, h, layer: int):
        return h[:self.blocks[layer].num_rows]

    def propagate(self, h, norm: str, layer: int):
        return self.blocks[layer].spmm(norm, h)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        return self.blocks[layer].attention(z, self.targets(z, layer), att_src, att_dst, negative_slope)

    def node_sum(self, t):
        return t


# --------------------------------------------------------------------------- the mini-batch loop
class Batch:
    """One step's input: the aggregator, input rows, and the labelled output rows with their loss
    weights (sum over ranks of weight * cross-entropy = this step's estimate of the mean loss)."""

    def __init__(self, aggregator: Aggregator, x: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor,
                 weights: torch.Tensor | float, sampled_edges: int):
        self.aggregator, self.x, self.rows, self.labels = aggregator, x, rows, labels
        self.weights, self.sampled_edges = weights, sampled_edges


@dataclass(frozen=True)
class MiniBatchOptions(LocalStepOptions, AveragingOptions):
    """The mini-batch methods' options: replica averaging, and optionally rounds of local steps."""

    # null: an epoch is one pass over the training nodes; K: an epoch is one round of K steps (GGS)
    local_steps: Optional[int] = option(None, "steps per round (an epoch); null: one pass over the training nodes",
                                        ge=1)


class SeedBatches:
    """A sampler's seeds: this rank's training nodes (local rows), `batch_size` at a time, in each
    epoch's keyed order (each node's place keyed by (key, its dataset id): every rank takes its own
    nodes in one global order, whatever P). Every rank takes the same number of steps an epoch,
    ceil(largest rank's training nodes / batch_size); batch s of rank r is the s-th of `steps`
    near-equal slices of r's nodes (a rank with fewer spreads them over as many, smaller batches), so
    every rank knows each step's global batch size without communicating, and `weight(step)`, 1 / that
    size, makes the loss summed over ranks the step's mean over its global batch (the mean over every
    training node when one batch holds them all)."""

    def __init__(self, ctx: RankContext, train_counts: list[int], batch_size: int):
        part = ctx.part
        self.nodes = part.train_mask.nonzero().squeeze(1)  # local rows
        self.ids = part.node_ids.index_select(0, self.nodes)  # what their order is keyed by
        self.steps = max(1, -(-max(train_counts) // batch_size))
        slices = torch.tensor([[len(s) for s in torch.arange(c).tensor_split(self.steps)] for c in train_counts])
        self.global_batch = slices.sum(0).clamp(min=1).tolist()

    def of_epoch(self, key: int) -> list[torch.Tensor]:
        """The steps' batches (local rows) in the order `key` gives the nodes (`keyed_order`)."""
        return list(self.nodes[keyed_order(self.ids, key)].tensor_split(self.steps))

    def weight(self, step: int) -> float:
        """Each seed's loss weight at `step`: 1 / the step's global batch size."""
        return 1.0 / self.global_batch[step]


class MiniBatchMethod(ReplicaAveraging):
    """Subclasses define `sample(step)` (the batch's structure, timed as sampling) and may override
    `fetch(sampled)` (input rows, timed as feature fetch), which returns the step's `Batch`; the loop,
    loss, gradient all-reduce and probes are here. Seeds: a sampler that takes its seeds as
    mini-batches of training nodes calls `self.batch_seeds(batch_size)` in `__init__` and reads
    `self.seeds(step)` (local rows, loss weight) in `sample`: steps per epoch and each epoch's batches
    are then the family's (`SeedBatches`). A sampler that draws its steps otherwise (a subgraph
    sampler) defines `steps_per_epoch()` and `begin_epoch(epoch)` itself.

    `avg_every` (method option, default null; `ReplicaAveraging`): null all-reduces gradients every
    step; k runs local steps (each rank on its own mean loss) and averages parameters every k steps
    (`param_avg`), as PSGD-PA and LLCG's GGS baseline do. With `local_steps` an epoch is one round
    of K_r steps (the subclass's passes carried on across rounds) and `avg_every` counts rounds."""

    class About(ReplicaAveraging.About):
        #: The rule for every sampled method (this family and `SubgraphMethod`; docs/adding-a-method.md,
        #: "Exact control"): its exact control is `single`, exact full-graph training. A sampler's own
        #: every-neighbour setting still trains on mini-batches (another regime, not the exact one), and a
        #: subgraph sampler has none, so `single` is the one control every findings row of the family
        #: compares against. The exactness tests hold each method's control to `single`.
        exact_control = {"name": "single"}

    Options = MiniBatchOptions
    #: fp16: with a gradient all-reduce every step every rank sees the same summed gradients (the
    #: same skipped steps); with local steps each rank scales and skips its own.
    #: No `memory.checkpoint_halo`: a batch's rows are fetched before the model runs, never in it.
    applies = ReplicaAveraging.applies - {"memory"} | {"memory.checkpoint", "memory.offload", "precision=fp16"}

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        options = ctx.options
        self.round_steps = options.steps_of_round(ctx.cfg.epochs) if options.local_steps else None
        self.cursor = self.passes = 0  # rounds: the step within the subclass's pass, passes begun
        # Local steps minimise the rank's own mean loss: its share of the global mean, rescaled.
        share = self.local_train / ctx.part.num_train_global
        self.loss_scale = 1.0 if self.avg_every is None else 1.0 / max(share, 1e-12)
        self.phase_time = dict.fromkeys(PHASES, 0.0)
        self.steps_done = self.sampled_edges = 0
        # Every rank's training-node count (known to all after one small gather at setup).
        self.train_counts = [int(c) for c in ctx.comm.all_gather_object(self.local_train)]

    #: The seed batches (`batch_seeds`), or None for a sampler that draws its steps otherwise.
    seed_batches: SeedBatches | None = None

    def batch_seeds(self, batch_size: int) -> None:
        """Take seeds as mini-batches of this rank's training nodes, `batch_size` at a time (`SeedBatches`)."""
        self.seed_batches = SeedBatches(self.ctx, self.train_counts, batch_size)

    def seeds(self, step: int) -> tuple[torch.Tensor, float]:
        """Step `step`'s seeds (local rows; store ids are these + `ctx.part.offsets[rank]`) and each seed's
        loss weight (`SeedBatches.weight`)."""
        return self.batches[step], self.seed_batches.weight(step)

    def steps_per_epoch(self) -> int:
        if self.seed_batches is None:
            raise NotImplementedError("a sampler calls batch_seeds(batch_size) or defines steps_per_epoch()")
        return self.seed_batches.steps

    def begin_epoch(self, epoch: int) -> None:
        if self.seed_batches is not None:
            self.batches = self.seed_batches.of_epoch(self.ctx.draws.key("order", epoch))

    def sample(self, step: int):
        raise NotImplementedError

    def fetch(self, sampled) -> Batch:
        return sampled

    def timed(self, phase: str, fn, *args):
        with Timer(self.ctx.device) as t:
            out = fn(*args)
        self.phase_time[phase] += t.seconds
        return out

    def train_epoch(self, epoch: int) -> torch.Tensor:
        ctx = self.ctx
        ctx.model.train()
        if self.round_steps is None:
            self.begin_epoch(epoch)
            steps = self.steps_per_epoch()
        else:
            steps = self.round_steps[min(epoch, len(self.round_steps) - 1)]
        total = 0.0
        for i in range(steps):
            ctx.draws.at(epoch, i)  # this step's draws: its batch, neighbours, dropout masks
            if self.round_steps is None:
                step = i
            else:  # a round walks on through the subclass's passes
                if self.cursor == 0:
                    self.begin_epoch(self.passes)
                    self.passes += 1
                step, self.cursor = self.cursor, (self.cursor + 1) % self.steps_per_epoch()
            self.straggle()
            batch = self.timed("feature_fetch", self.fetch, self.timed("sampling", self.sample, step))
            loss = self.batch_step(batch)
            self.steps_done += 1
            if self.round_steps is None:
                self.timed("communication", self.average_if_due, self.steps_done)
            elif i == steps - 1:  # rounds: avg_every counts rounds
                self.timed("communication", self.average_if_due, epoch + 1)
            else:
                self.replicas_equal = self.avg_every is None and self.stateless
            total += loss
            self.sampled_edges += batch.sampled_edges
        return torch.as_tensor(total / steps)

    def batch_step(self, batch: Batch) -> float:
        """Forward, loss and step on `batch` (timed as compute, but for the gradient all-reduce inside:
        communication); the batch's loss (weighted: this rank's share of the step's estimate)."""
        ctx = self.ctx
        communication = self.phase_time["communication"]
        with Timer(ctx.device) as t:
            logits = ctx.model(batch.x, batch.aggregator)[batch.rows]
            loss = loss_share(logits, batch.labels, batch.weights)
            # Zeros, not None: every rank then all-reduces the same gradient list, even one whose batch
            # is empty this step.
            sync = "grad_allreduce" if self.avg_every is None else None
            self.optimize(loss, self.loss_scale, sync, set_to_none=False)
        self.phase_time["compute"] += t.seconds - (self.phase_time["communication"] - communication)
        return loss.item()

    def all_reduce_gradients(self, category: str) -> None:
        self.timed("communication", super().all_reduce_gradients, category)


    def probes(self) -> dict:
        return {"phase_time_s": dict(self.phase_time), "steps": self.steps_done, "sampled_edges": self.sampled_edges,
                "sampler": SAMPLER}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(ReplicaAveraging.Cost):
        #: The family's `traffic` is built from the plugin's step (`shape`) and `step_traffic`: a plugin
        #: is modelled once it states its `shape` (or opts out with `not_modelled`).
        states_with = ("shape",)

        @classmethod
        def steps(cls, options, rank, per_step: int) -> float:
            """Steps per epoch: a round's `local_steps`, or one pass over the rank's training nodes
            `per_step` at a time (the largest rank's pass sets every rank's count)."""
            return options.local_steps or max(1, math.ceil(rank.train / per_step))

        @classmethod
        def traffic(cls, options, model, rank) -> list:
            """The gradient all-reduce of every step (or the parameter average every `avg_every` steps),
            with the subclass's own per-step traffic (`step_traffic`) times the steps."""
            shape = cls.shape(options, model, rank)
            out = [scaled(t, shape.steps) for t in cls.step_traffic(options, model, rank)]
            if options.avg_every is None:
                return out + [scaled(cost.grad_allreduce(model), shape.steps)]
            average = cost.Transfer("param_avg", None, cost.parameters(model) * cost.FLOAT, 1, 0, collective=True)
            rounds = 1 if options.local_steps else shape.steps  # avg_every counts rounds, or steps
            return out + [scaled(average, rounds / options.avg_every)]

        @classmethod
        def step_traffic(cls, options, model, rank) -> list:
            """What one step moves besides the gradients: nothing by default (a subgraph of the own part)."""
            return []


def scaled(t, times: float):
    """A transfer repeated `times` times an epoch."""
    return dataclasses.replace(t, bytes=t.bytes * times, calls=t.calls * times, messages=t.messages * times)


def check_fanouts(name: str, fanouts: list[int], run) -> None:
    """One fan-out per layer, or one for every layer (`run`: the run being checked; None, nothing to hold them to)."""
    if run is not None and len(fanouts) not in (1, run.layers):
        raise UserError(f"method.{name}={fanouts} has {len(fanouts)} entries but layers={run.layers}; "
                        "give one fan-out per layer, or one for every layer")


def per_layer(fanouts: list[int], layers: int) -> list[int]:
    return list(fanouts) * (layers if len(fanouts) == 1 else 1)


# --------------------------------------------------------------------------- subgraph samplers
# Cluster-GCN and GraphSAINT train a full model on a subgraph of the rank's own part per step.
class Subgraph:
    """One step's sampled subgraph: its nodes (local ids; row i of the batch is nodes[i]), the
    adjacency the model runs on, which rows are training nodes and their loss weights."""

    def __init__(self, nodes: torch.Tensor, adj: LocalAdjacency, rows: torch.Tensor, weights: torch.Tensor | float):
        self.nodes, self.adj, self.rows, self.weights = nodes, adj, rows, weights


class SubgraphMethod(MiniBatchMethod):
    """Mini-batch loop for subgraph samplers: `sample(step)` returns a `Subgraph`; the model runs
    full-batch on it (`LocalAggregator`: batch-norm statistics of the batch); the rank's own rows
    are its inputs, so fetching is a local gather and nothing crosses ranks but the gradients."""

    applies = MiniBatchMethod.applies - {"comm"} | {"comm.quantize_grads"}

    def fetch(self, sub: Subgraph) -> Batch:
        part = self.ctx.part
        return Batch(SubgraphAggregator(sub.adj, self.ctx.comm, part.node_ids.index_select(0, sub.nodes)),
                     part.x.index_select(0, sub.nodes), sub.rows,
                     part.y.index_select(0, sub.nodes.index_select(0, sub.rows)), sub.weights, sub.adj.nnz)


class SubgraphAggregator(LocalAggregator):
    """A sampled subgraph's `LocalAggregator`: its rows are the subgraph's nodes (`ids`: their dataset
    ids, which dropout draws each row's mask by), not the rank's rows."""

    def __init__(self, adj: LocalAdjacency, comm: Comm, ids: torch.Tensor):
        super().__init__(adj, comm, recompute=Recompute())  # no halo: nothing it fetches to replay
        self.ids = ids

    def row_ids(self, layer: int) -> torch.Tensor:
        return self.ids
