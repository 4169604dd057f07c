"""The partition-parallel family: what DIGEST, PSGD-PA and LLCG share; and layer 0's treatments
(`method.layer0`, `layer0_aggregator`), which DIGEST shares with the full-graph methods that cut
boundary traffic (PipeGCN, BNS-GCN, Sancus) and with their exact control, `full_halo`.

Each rank trains on its own part, one full-partition step per epoch here (PSGD-PA and LLCG take
rounds of neighbour-sampled local steps instead by default: `local_rounds.LocalRounds`, with
`local: full` for these full-partition steps). Neighbours in other parts are
either dropped (PSGD-PA, LLCG: the part's own subgraph, normalised on its own degrees) or read from
a table of stale rows (DIGEST: the full row panel, normalised on global degrees). No gradient
crosses ranks through the graph. Parameters stay in step either by a gradient all-reduce every step
(`avg_every: null`) or by local steps with parameter averaging every `avg_every` steps, weighted by
each part's training nodes (`avg_weighting: train_count`, as LLCG's code) or uniformly (1/P, as
LLCG's paper). Local Adam state persists across averaging rounds; only the weights are averaged.

Batch-norm statistics stay on each rank (a per-step all-reduce of them would be the synchronous
traffic these methods avoid); running statistics are averaged with the parameters.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import Aggregator, HaloAggregator, LocalAdjacency, exchange_rows
from benchmarks.families.aggregators import LocalAggregator
from benchmarks.families.replicas import ReplicaAveraging
from benchmarks.run.method import RankContext, loss_share
from benchmarks.base.options import option
from benchmarks.core.partition import Part, own_edges


def local_block(part: Part, kernel: str) -> LocalAdjacency:
    """The part's own subgraph: in-edges from other parts dropped, degrees counted within the part
    (every node keeps its self-loop, so no degree is zero)."""
    indptr, indices = own_edges(part)
    deg = indptr[1:] - indptr[:-1]
    return LocalAdjacency(indptr, indices, deg, deg, kernel=kernel)


#: `method.layer0`: how a halo-exchanging method computes layer 0, exactly in every mode (the input
#: features never change, so a method may fetch the halo's once instead of every step). The modes are
#: different models at dropout > 0 (who draws the halo's masks, and on what), so an approximation is
#: compared with its exact control at the same mode (docs/architecture.md, "Layer 0's treatments and exact controls"):
#:   - `exchanged`: `full_halo`'s layer 0: every step the owners send their rows, which they dropped
#:     out (projected first where the layer projects first), and get the gradients back;
#:   - `cached`: the halo's input features fetched once (category `halo_inputs`) and kept; every step
#:     the *receiver* drops them out with a fresh mask and projects them with the current weights;
#:   - `cached_undropped`: `cached` without the halo's dropout (DIGEST's earlier ablation);
#:   - `precomputed`: the reference codes' `--use-pp` (PipeGCN's and BNS-GCN's `train.py precompute`):
#:     layer 0's aggregate of the undropped features, A x, computed once from the fetched halo
#:     features; every step dropout draws its mask on the aggregate (GCN: dropout(Â x) W; SAGE:
#:     W_l dropout(mean x) + W_r dropout(x)). GAT's aggregate depends on the weights, so it has none
#:     to precompute: there, as in BNS-GCN's code (`precompute` returns the features), it is `cached`.
LAYER0 = ("exchanged", "cached", "cached_undropped", "precomputed")


def layer0_option(default: str):
    return option(default, f"how layer 0 gets its halo: {' | '.join(LAYER0)}")


class CachedHaloInputs:
    """Layer 0's halo rows under `layer0: cached` (and DIGEST's table 0): the halo's input features,
    fetched once (category `halo_inputs`) and kept. A `LocalAggregator` with this halo projects them
    with the current weights, so layer 0's output and gradients are exact. Each step they get dropout
    `p`, drawn by the receiver: keyed by node (benchmarks/core/draws.py), the very mask the owner draws
    under `exchanged` (under `draws=per_rank`, another sample)."""

    def __init__(self, ctx: RankContext, p: float):
        self.ctx, self.p, self.rows = ctx, p, None

    def __call__(self, _h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.rows is None:
            self.rows = exchange_rows(self.ctx.part.x, self.ctx.plan, self.ctx.comm, "halo_inputs", 0)
        part = self.ctx.part  # the receiver draws the mask each owner draws for its rows (benchmarks/core/draws.py)
        return self.ctx.draws.dropout(self.rows, self.p, self.ctx.model.training, ("input", 0),
                                      part.node_ids[part.num_local:])


class PrecomputedAggregate(Aggregator):
    """Layer 0 under `layer0: precomputed`: `propagate` returns dropout(A x) for the rank's rows, A x
    computed once (per normalisation) from its own and the halo's undropped input features, whatever
    `h` it is given (the model's dropped-out x, which SAGE's root term still uses through `targets`).
    x needs no gradient, so nothing flows back through the halo."""

    def __init__(self, ctx: RankContext):
        self.ctx, self.adj, self.comm = ctx, ctx.adj, ctx.comm
        self.halo = CachedHaloInputs(ctx, 0.0)
        self.aggregates = {}

    def aggregate(self, norm: str) -> torch.Tensor:
        if norm not in self.aggregates:
            x = self.ctx.part.x
            sources = x if self.comm.world == 1 else torch.cat([x, self.halo(x, 0)])
            with torch.no_grad():
                self.aggregates[norm] = self.adj.spmm(norm, sources)
        return self.ctx.draws.dropout(self.aggregates[norm], self.ctx.cfg.dropout, self.ctx.model.training,
                                      ("aggregate", 0))

    def propagate(self, h, norm: str, layer: int):
        return self.aggregate(norm).to(h.dtype)

    def propagate_linear(self, h, weight, norm: str, layer: int):
        return F.linear(self.propagate(h, norm, layer), weight)  # (A x) W^T = A (x W^T)


def layer0_aggregator(ctx: RankContext, mode: str) -> Aggregator:
    """The aggregator of layer 0 under `method.layer0=mode` (`LAYER0`), over the rank's whole halo."""
    gat = ctx.cfg.model_name == "gat"
    if mode == "exchanged":
        return HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute)
    if mode == "precomputed" and not gat:
        return PrecomputedAggregate(ctx)
    p = 0.0 if mode == "cached_undropped" else ctx.cfg.dropout
    return LocalAggregator(ctx.adj, ctx.comm, CachedHaloInputs(ctx, p) if ctx.world > 1 else None,
                           recompute=ctx.recompute)


class LayerZeroExact(Aggregator):
    """Layer 0 through `first` (exact over the whole halo: `layer0_aggregator`), deeper layers through
    `sampled` (BNS-GCN's sampled halo, PipeGCN's stale one, DIGEST's tables), which also sums batch-norm
    statistics and draws dropout its own way."""

    def __init__(self, first: Aggregator, sampled: Aggregator, comm):
        self.first, self.sampled, self.comm = first, sampled, comm

    def at(self, layer: int) -> Aggregator:
        return self.first if layer == 0 else self.sampled

    def dropout(self, h, p: float, training: bool, layer: int):
        return self.at(layer).dropout(h, p, training, layer)

    def propagate(self, h, norm: str, layer: int):
        return self.at(layer).propagate(h, norm, layer)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2, **dropout):
        return self.at(layer).attention(z, att_src, att_dst, layer, negative_slope, **dropout)

    def propagate_linear(self, h, weight, norm: str, layer: int):
        return self.at(layer).propagate_linear(h, weight, norm, layer)

    def attention_linear(self, h, weight, heads: int, att_src, att_dst, layer: int, negative_slope: float = 0.2,
                         **dropout):
        return self.at(layer).attention_linear(h, weight, heads, att_src, att_dst, layer, negative_slope, **dropout)

    def node_sum(self, t: torch.Tensor) -> torch.Tensor:
        return self.sampled.node_sum(t)


class PartitionParallelMethod(ReplicaAveraging):
    """Rounds of local steps on the rank's part, here one full-partition step per epoch
    (`local_rounds.LocalRounds`: K_r steps, full-partition or sampled). Subclasses choose the halo
    (`make_aggregator`), may act before each forward (`before_forward`) and after each averaging
    round (`after_average`)."""

    #: fp16: with a gradient all-reduce every step every rank sees the same summed gradients (the
    #: same skipped steps); with local steps each rank scales and skips its own.
    applies = ReplicaAveraging.applies | {"precision=fp16"}

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.aggregator = self.make_aggregator()
        self.steps_done = 0

    def make_aggregator(self) -> Aggregator:
        return LocalAggregator(local_block(self.ctx.part, self.ctx.cfg.kernel), self.ctx.comm,
                               recompute=self.ctx.recompute)

    def before_forward(self, step: int) -> None:
        pass

    def after_average(self) -> None:
        pass

    def part_loss(self, step: int) -> torch.Tensor:
        """Forward on the part; the sum of its training nodes' losses."""
        ctx = self.ctx
        ctx.model.train()
        self.before_forward(step)
        logits = ctx.model(ctx.part.x, self.aggregator)
        mask = ctx.part.train_mask
        return loss_share(logits[mask], ctx.part.y[mask])

    def round_length(self, epoch: int) -> int:
        """Local steps in epoch `epoch`'s round."""
        return 1

    def local_step(self, epoch: int) -> torch.Tensor:
        """One full-partition step; this rank's share of the global mean training loss."""
        ctx = self.ctx
        loss_sum = self.part_loss(epoch)
        if self.avg_every is None:
            self.optimize(loss_sum, 1.0 / ctx.part.num_train_global)
        else:  # Local SGD: each rank minimises its own mean loss; averaging combines the ranks.
            self.optimize(loss_sum, 1.0 / max(1, self.local_train), sync=None)
        return loss_sum.detach() / ctx.part.num_train_global

    def train_epoch(self, epoch: int) -> torch.Tensor:
        steps = self.round_length(epoch)
        total = 0.0
        for _ in range(steps):
            self.straggle()
            total = total + self.local_step(epoch)
            self.steps_done += 1
        if self.average_if_due(epoch + 1):
            self.after_average()
        return total / steps
