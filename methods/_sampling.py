"""What the sampling baselines share (not a method itself: the leading underscore keeps it out of
the registry): the neighbour sampler, mini-batch aggregators and the data-parallel mini-batch loop.

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
from benchmarks.method import RankContext, sync_gradients
from benchmarks.probes import Timer
from methods._partition_parallel import LocalAggregator, ReplicaAveraging

PHASES = ("sampling", "feature_fetch", "compute", "communication")
SAMPLER_SEED = 0x5A3B1E00


def _pyg_lib_neighbor_sample():
    """pyg-lib's compiled neighbour sampler, or None when pyg-lib is not installed."""
    try:
        from pyg_lib.sampler import neighbor_sample
        return neighbor_sample
    except ImportError:
        return None


#: Which implementation `sample_neighbors` uses by default: pyg-lib's when it is installed.
SAMPLER = "pyg-lib" if _pyg_lib_neighbor_sample() is not None else "torch"


# --------------------------------------------------------------------------- the sampler
def concat_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """cat([arange(s, s + l) for s, l in zip(starts, lengths)]), without a Python loop."""
    total = int(lengths.sum())
    shift = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths, output_size=total)
    return shift.add_(torch.arange(total, device=starts.device))


def sample_neighbors(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor, fanout: int,
                     generator: torch.Generator, sampler: str = SAMPLER) -> tuple[torch.Tensor, torch.Tensor]:
    """For each node of `nodes`, min(fanout, degree) of its in-edges drawn uniformly without
    replacement (all of them when fanout < 0). Returns (counts per node, positions of the drawn
    edges in the CSR's `indices`, grouped by node in the order of `nodes`).

    `torch` is vectorised (no Python loop over nodes), in three regimes, each uniform over the
    size-k subsets of a node's edges:
      - degree <= k: every edge;
      - k < degree <= 2k: k smallest of `degree` random keys (top-k over a padded [n, 2k] matrix);
      - degree > 2k: k draws with replacement, duplicates redrawn until none is left. Redrawing
        treats every value alike, so the resulting set is uniform; with degree > 2k a redraw round
        rarely finds more than a few duplicates.
    `pyg-lib` calls pyg-lib's compiled sampler one hop at a time (same distribution; its random
    stream is its own, seeded from torch's global generator, not `generator`)."""
    if sampler == "pyg-lib" and fanout >= 0 and indptr.device.type == "cpu":  # pyg-lib samples on the CPU
        row, _, _, edge_id, *_ = _pyg_lib_neighbor_sample()(indptr, indices, nodes, [fanout], replace=False,
                                                             directed=True, return_edge_id=True)
        order = torch.argsort(row, stable=True)
        return torch.bincount(row, minlength=nodes.numel()), edge_id[order]
    start = indptr[nodes]
    deg = indptr[nodes + 1] - start
    counts = deg if fanout < 0 else deg.clamp(max=fanout)
    out_ptr = torch.cumsum(counts, 0) - counts  # where each node's edges start in the output
    positions = torch.empty(int(counts.sum()), dtype=torch.int64, device=indptr.device)
    every = deg <= fanout if fanout >= 0 else torch.ones_like(deg, dtype=torch.bool)
    if every.any():
        idx = every.nonzero().squeeze(1)
        positions[concat_ranges(out_ptr[idx], counts[idx])] = concat_ranges(start[idx], counts[idx])
    if fanout >= 0:
        k = fanout
        cols = torch.arange(k, device=indptr.device)
        medium = ((deg > k) & (deg <= 2 * k)).nonzero().squeeze(1)
        if medium.numel():
            keys = torch.rand((medium.numel(), 2 * k), generator=generator, device=indptr.device)
            keys.masked_fill_(torch.arange(2 * k, device=indptr.device) >= deg[medium, None], 2.0)
            offsets = keys.topk(k, dim=1, largest=False, sorted=False).indices
            positions[(out_ptr[medium, None] + cols).reshape(-1)] = (start[medium, None] + offsets).reshape(-1)
        large = (deg > 2 * k).nonzero().squeeze(1)
        if large.numel():
            offsets = _distinct_draws(deg[large], k, generator)
            positions[(out_ptr[large, None] + cols).reshape(-1)] = (start[large, None] + offsets).reshape(-1)
    return counts, positions


def _distinct_draws(deg: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """[n, k] distinct uniform integers in [0, deg_i) per row (deg_i > 2k)."""
    draws = (torch.rand((deg.numel(), k), generator=generator, device=deg.device) * deg[:, None]).long()
    rows = torch.arange(deg.numel(), device=deg.device)
    while rows.numel():
        sub, _ = draws[rows].sort(dim=1)
        dup = torch.zeros_like(sub, dtype=torch.bool)
        dup[:, 1:] = sub[:, 1:] == sub[:, :-1]
        has = dup.any(1)
        rows, sub, dup = rows[has], sub[has], dup[has]
        fresh = (torch.rand(sub.shape, generator=generator, device=deg.device) * deg[rows, None]).long()
        draws[rows] = torch.where(dup, fresh, sub)
    return draws


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
def induced_subgraph(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor,
                     num_cols: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The subgraph of an in-edge CSR induced by `nodes` (distinct ids; every column of `indices`
    below `num_cols`, by default the CSR's row count, i.e. a square CSR). Returns (indptr, indices,
    positions): row i is node nodes[i], columns are relabelled to positions in `nodes`, and
    positions[e] is where edge e sits in the original `indices`. Every in-edge of a chosen node
    whose source is also chosen is kept, in the original order within the row. Vectorised: the
    work is the in-degree sum of `nodes`, plus one O(num_cols) relabelling table."""
    device = indptr.device
    num_cols = indptr.numel() - 1 if num_cols is None else num_cols
    nodes = nodes.long()
    relabel = torch.full((num_cols,), -1, dtype=torch.int64, device=device)
    relabel[nodes] = torch.arange(nodes.numel(), device=device)
    start = indptr.index_select(0, nodes)
    deg = indptr.index_select(0, nodes + 1) - start
    positions = concat_ranges(start, deg)  # every in-edge of the chosen nodes, grouped by node
    cols = relabel.index_select(0, indices.index_select(0, positions))
    inside = cols >= 0
    # Kept edges before each node's first edge: the subgraph's row pointers, without a row per edge.
    kept_before = torch.cat([inside.new_zeros(1, dtype=torch.int64), torch.cumsum(inside, 0)])
    sub_indptr = kept_before.index_select(0, torch.cat([deg.new_zeros(1), torch.cumsum(deg, 0)]))
    keep = inside.nonzero().squeeze(1)
    return sub_indptr, cols.index_select(0, keep), positions.index_select(0, keep)


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
