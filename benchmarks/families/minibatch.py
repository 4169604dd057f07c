"""The mini-batch family: what the sampling baselines share, the mini-batch aggregators and the
data-parallel mini-batch loop (the sampler itself is `benchmarks.sampling`).

Data parallelism (DistDGL, PyG + DDP): every rank draws its own mini-batches from its own training
nodes, all ranks take the same number of steps per epoch, and gradients are all-reduced after every
step. Each rank's loss is weighted so that the sum over ranks is an unbiased estimate of the mean
training loss over the whole graph (exactly that mean when a batch covers every training node).

Rounds (`local_steps`, default null): an epoch is one round of K local steps (K_r with LLCG's
growth schedule, `local_steps_rho`), the sampler's passes over the training nodes carried on from
round to round, and `avg_every` counts rounds (parameters averaged at the end of a round); GGS's
regime. Null keeps an epoch one pass over the training nodes and `avg_every` counting steps.

`LocalRounds` (PSGD-PA, LLCG): the partition-parallel methods' rounds of K local steps on the
rank's own part, either neighbour-sampled mini-batches from the part's own subgraph (LLCG's
regime, nothing crosses ranks) or full-partition steps (`local: full`).

Probes split each step's time into `sampling` (drawing the batch, with any requests to other ranks
it needs), `feature_fetch` (gathering the input rows), `compute` (forward, backward, optimizer) and
`communication` (the gradient all-reduce); they are reported per rank (`summary.per_rank[].phase_time_s`)
with the number of sampled edges and steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F

from benchmarks.aggregation import Aggregator, LocalAdjacency
from benchmarks.comm import Comm
from benchmarks.errors import UserError
from benchmarks.families.partition_parallel import LocalAggregator, PartitionParallelMethod
from benchmarks.families.replicas import (AveragingOptions, LocalStepOptions, PeriodicAveragingOptions,
                                          ReplicaAveraging)
from benchmarks.method import RankContext, sync_gradients
from benchmarks.options import option
from benchmarks.partition import own_edges
from benchmarks.probes import Timer
from benchmarks.sampling import SAMPLER, sample_blocks
from benchmarks.stores import ReplicatedStore

PHASES = ("sampling", "feature_fetch", "compute", "communication")
SAMPLER_SEED = 0x5A3B1E00


# --------------------------------------------------------------------------- aggregators
class BlockAggregator(Aggregator):
    """Runs a model on sampled blocks (message-flow graphs): layer i aggregates block i, a CSR from
    its destination rows to its source rows, whose first rows are the destinations themselves.
    Batch-norm statistics are those of this rank's batch (as DDP without SyncBatchNorm)."""

    def __init__(self, blocks: list[LocalAdjacency], comm: Comm):
        self.blocks, self.comm = blocks, comm

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


class MiniBatchMethod(ReplicaAveraging):
    """Subclasses define `steps_per_epoch()`, `begin_epoch(epoch)` and `sample(step)` (the batch's
    structure, timed as sampling) and may override `fetch(batch)` (input rows, timed as feature
    fetch); the loop, loss, gradient all-reduce and probes are here.

    `avg_every` (method option, default null; `ReplicaAveraging`): null all-reduces gradients every
    step; k runs local steps (each rank on its own mean loss) and averages parameters every k steps
    (`param_avg`), as PSGD-PA and LLCG's GGS baseline do. With `local_steps` an epoch is one round
    of K_r steps (the subclass's passes carried on across rounds) and `avg_every` counts rounds."""

    Options = MiniBatchOptions

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        options = ctx.options
        self.round_steps = options.steps_of_round(ctx.cfg.epochs) if options.local_steps else None
        self.cursor = self.passes = 0  # rounds: the step within the subclass's pass, passes begun
        # Local steps minimise the rank's own mean loss: its share of the global mean, rescaled.
        share = self.local_train / ctx.part.num_train_global
        self.loss_scale = 1.0 if self.avg_every is None else 1.0 / max(share, 1e-12)
        # The sampler's own stream, never the dropout masks' (torch's global generator, seeded with
        # seed * 1000 + rank): equal seeds would draw the same numbers for masks and samples.
        self.generator = sampler_generator(ctx)
        self.phase_time = dict.fromkeys(PHASES, 0.0)
        self.steps_done = self.sampled_edges = 0
        # Every rank's training-node count (known to all after one small gather at setup).
        self.train_counts = [int(c) for c in ctx.comm.all_gather_object(self.local_train)]

    def steps_per_epoch(self) -> int:
        raise NotImplementedError

    def begin_epoch(self, epoch: int) -> None:
        pass

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
            if self.round_steps is None:
                step = i
            else:  # a round walks on through the subclass's passes
                if self.cursor == 0:
                    self.begin_epoch(self.passes)
                    self.passes += 1
                step, self.cursor = self.cursor, (self.cursor + 1) % self.steps_per_epoch()
            self.straggle()
            batch = self.timed("feature_fetch", self.fetch, self.timed("sampling", self.sample, step))
            loss = self.timed("compute", self.forward_backward, batch)
            if self.avg_every is None:
                self.timed("communication", sync_gradients, ctx)
            self.timed("compute", ctx.optimizer.step)
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

    def forward_backward(self, batch: Batch) -> float:
        ctx = self.ctx
        # Zeros, not None: every rank then all-reduces the same gradient list, even one whose batch
        # is empty this step.
        ctx.optimizer.zero_grad(set_to_none=False)
        logits = ctx.model(batch.x, batch.aggregator)[batch.rows]
        loss = (F.cross_entropy(logits, batch.labels, reduction="none") * batch.weights).sum()
        (loss * self.loss_scale).backward()
        return loss.item()

    def probes(self) -> dict:
        return {"phase_time_s": dict(self.phase_time), "steps": self.steps_done, "sampled_edges": self.sampled_edges,
                "sampler": SAMPLER}


# --------------------------------------------------------------------------- local rounds (PSGD-PA, LLCG)
@dataclass(frozen=True)
class LocalRoundOptions(LocalStepOptions, PeriodicAveragingOptions):
    """PSGD-PA's and LLCG's local work: rounds (epochs) of `local_steps` steps on the own part."""

    avg_every: int = option(1, "rounds (epochs) between parameter averaging", ge=1)
    # sampled: neighbour-sampled mini-batches from the part's own subgraph (LLCG's regime);
    # full: full-partition steps (local: full, local_steps: 1 is the suite's former psgd_pa)
    local: Literal["sampled", "full"] = option("sampled")
    # K: LLCG's Table 1 uses 8 (Flickr) and 64 (ogbn-arxiv, Reddit); its code's default is 5
    local_steps: int = option(8, "local steps per round (an epoch)", ge=1)
    batch_size: int = option(256, "seed (training) nodes per worker and local step", ge=1)
    fanouts: list[int] = option(
        [10], "or -1 for every neighbour; one per layer, seeds' hop first, or one for every layer, "
        "e.g. method.fanouts=[10,10]", ge=1, also=(-1,))

    def check(self, run) -> None:
        check_fanouts("fanouts", self.fanouts, run)


def check_fanouts(name: str, fanouts: list[int], run) -> None:
    """One fan-out per layer, or one for every layer (`run`: the run being checked; None, nothing to hold them to)."""
    if run is not None and len(fanouts) not in (1, run.layers):
        raise UserError(f"method.{name}={fanouts} has {len(fanouts)} entries but layers={run.layers}; "
                        "give one fan-out per layer, or one for every layer")


def per_layer(fanouts: list[int], layers: int) -> list[int]:
    return list(fanouts) * (layers if len(fanouts) == 1 else 1)


def sampler_generator(ctx: RankContext, salt: int = 0) -> torch.Generator:
    """A sampler's own random stream, never the dropout masks' (torch's global generator)."""
    return torch.Generator(device=ctx.device).manual_seed(SAMPLER_SEED + ctx.cfg.seed * 7919 + ctx.rank + salt)


def sampled_step(ctx: RankContext, optimizer: torch.optim.Optimizer, store, x_of, y: torch.Tensor,
                 train_nodes: torch.Tensor, batch_size: int, fanouts: list[int], generator) -> tuple[float, int]:
    """One Adam/SGD step on the mean loss of `batch_size` seeds drawn without replacement from
    `train_nodes` (store ids), their neighbours sampled from `store`; (loss, sampled edges)."""
    n = train_nodes.numel()
    seeds = train_nodes[torch.randperm(n, generator=generator, device=train_nodes.device)[:batch_size]]
    blocks, inputs, edges = sample_blocks(store, seeds, fanouts, generator, ctx.cfg.kernel)
    ctx.model.train()
    optimizer.zero_grad(set_to_none=True)
    logits = ctx.model(x_of(inputs), BlockAggregator(blocks, ctx.comm))[:seeds.numel()]
    loss = F.cross_entropy(logits, y[seeds])
    loss.backward()
    optimizer.step()
    return loss.item(), edges


class LocalRounds(PartitionParallelMethod):
    """Rounds of K_r local steps on the rank's own part (cut edges dropped), then parameter
    averaging every `avg_every` rounds and `after_average` (LLCG's correction). `local: sampled`
    draws `batch_size` seeds from the part's training nodes and samples `fanouts` neighbours from
    the part's own subgraph (normalised on its own degrees, as `local_block`), all in this rank's
    memory: no traffic. `local: full` takes full-partition steps (`PartitionParallelMethod`).
    Each rank minimises its own mean loss; Adam state persists across rounds."""

    Options = LocalRoundOptions

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.round_steps = options.steps_of_round(ctx.cfg.epochs)
        self.sampled = options.local == "sampled"
        self.steps_done = self.sampled_edges = 0
        if self.sampled:
            indptr, indices = own_edges(part)
            self.own = ReplicatedStore(indptr, indices, part.x)  # local ids, own degrees
            self.train_nodes = part.train_mask.nonzero().squeeze(1)
            self.batch_size = options.batch_size
            self.fanouts = per_layer(options.fanouts, ctx.cfg.layers)
            self.generator = sampler_generator(ctx)

    def local_step(self, epoch: int) -> torch.Tensor:
        """One local step; this rank's share of the global mean training loss."""
        ctx = self.ctx
        if not self.sampled:
            loss_sum = self.forward_backward(epoch, 1.0 / max(1, self.local_train))
            ctx.optimizer.step()
            return loss_sum / ctx.part.num_train_global
        if self.train_nodes.numel() == 0:
            return torch.zeros(())
        loss, edges = sampled_step(ctx, ctx.optimizer, self.own, lambda ids: ctx.part.x[ids], ctx.part.y, self.train_nodes,
                                   self.batch_size, self.fanouts, self.generator)
        self.sampled_edges += edges
        return torch.as_tensor(loss * self.local_train / ctx.part.num_train_global)

    def train_epoch(self, epoch: int) -> torch.Tensor:
        steps = self.round_steps[min(epoch, len(self.round_steps) - 1)]
        total = 0.0
        for _ in range(steps):
            self.straggle()
            total = total + self.local_step(epoch)
            self.steps_done += 1
        if self.average_if_due(epoch + 1):
            self.after_average()
        return total / steps

    def probes(self) -> dict:
        return {"steps": self.steps_done, "sampled_edges": self.sampled_edges}


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

    def fetch(self, sub: Subgraph) -> Batch:
        part = self.ctx.part
        return Batch(LocalAggregator(sub.adj, self.ctx.comm), part.x.index_select(0, sub.nodes), sub.rows,
                     part.y.index_select(0, sub.nodes.index_select(0, sub.rows)), sub.weights, sub.adj.nnz)
