"""The mini-batch family: what the sampling baselines share, the mini-batch aggregators and the
data-parallel mini-batch loop (the sampler itself is `benchmarks.sampling`).

Data parallelism (DistDGL, PyG + DDP): every rank draws its own mini-batches from its own training
nodes, all ranks take the same number of steps per epoch, and gradients are all-reduced after every
step. Each rank's loss is weighted so that the sum over ranks is an unbiased estimate of the mean
training loss over the whole graph (exactly that mean when a batch covers every training node).

Probes split each step's time into `sampling` (drawing the batch, with any requests to other ranks
it needs), `feature_fetch` (gathering the input rows), `compute` (forward, backward, optimizer) and
`communication` (the gradient all-reduce); they are reported per rank (`summary.per_rank[].phase_time_s`)
with the number of sampled edges and steps.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.aggregation import Aggregator, LocalAdjacency
from benchmarks.comm import Comm
from benchmarks.families.partition_parallel import LocalAggregator
from benchmarks.families.replicas import ReplicaAveraging
from benchmarks.method import RankContext, sync_gradients
from benchmarks.probes import Timer
from benchmarks.sampling import SAMPLER

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


class MiniBatchMethod(ReplicaAveraging):
    """Subclasses define `steps_per_epoch()`, `begin_epoch(epoch)` and `sample(step)` (the batch's
    structure, timed as sampling) and may override `fetch(batch)` (input rows, timed as feature
    fetch); the loop, loss, gradient all-reduce and probes are here.

    `avg_every` (method option, default null; `ReplicaAveraging`): null all-reduces gradients every
    step; k runs local steps (each rank on its own mean loss) and averages parameters every k steps
    (`param_avg`), as PSGD-PA and LLCG's GGS baseline do."""

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        # Local steps minimise the rank's own mean loss: its share of the global mean, rescaled.
        share = self.local_train / ctx.part.num_train_global
        self.loss_scale = 1.0 if self.avg_every is None else 1.0 / max(share, 1e-12)
        # The sampler's own stream, never the dropout masks' (torch's global generator, seeded with
        # seed * 1000 + rank): equal seeds would draw the same numbers for masks and samples.
        self.generator = torch.Generator(device=ctx.device).manual_seed(SAMPLER_SEED + ctx.cfg["seed"] * 7919 + ctx.rank)
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
        self.begin_epoch(epoch)
        steps, total = self.steps_per_epoch(), 0.0
        for step in range(steps):
            self.straggle()
            batch = self.timed("feature_fetch", self.fetch, self.timed("sampling", self.sample, step))
            loss = self.timed("compute", self.forward_backward, batch)
            if self.avg_every is None:
                self.timed("communication", sync_gradients, ctx)
            self.timed("compute", ctx.optimizer.step)
            self.steps_done += 1
            self.timed("communication", self.average_if_due, self.steps_done)
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
