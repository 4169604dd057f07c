"""Local rounds (PSGD-PA, LLCG): the partition-parallel methods' rounds of K local steps on the rank's
own part, then parameter averaging. A local step is either a neighbour-sampled mini-batch from the
part's own subgraph (LLCG's regime, nothing crosses ranks; on the mini-batch family's
`BlockAggregator`) or a full-partition step (`local: full`, `PartitionParallelMethod`'s).

Draws (benchmarks/core/draws.py): each local step sets `ctx.draws.at(epoch, step)`; a sampled step's seeds
are the `batch_size` training nodes first in an order keyed by (seed, epoch, step, node) and its
neighbours are keyed by (seed, epoch, step, layer, node), never by the rank. What a rank samples
still depends on the partition: its training nodes and its part's own edges.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.base import traffic as cost
from benchmarks.families.minibatch import BlockAggregator, check_fanouts, per_layer
from benchmarks.families.partition_parallel import PartitionParallelMethod
from benchmarks.families.replicas import LocalStepOptions, PeriodicAveragingOptions
from benchmarks.run.method import Method, RankContext, loss_share
from benchmarks.base.options import option
from benchmarks.core.partition import own_edges
from benchmarks.core.sampling import NodeDraws, in_id_order, keyed_order, sample_blocks
from benchmarks.core.stores import ReplicatedStore


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


def sampled_batch(ctx: RankContext, store, train_nodes: torch.Tensor, batch_size: int, fanouts: list[int],
                  what: tuple) -> tuple[torch.Tensor, list, torch.Tensor, int]:
    """`batch_size` seeds drawn without replacement from `train_nodes` (store ids), the first in an
    order keyed by (`what`, node), and their neighbours sampled from `store` keyed by (`what`, layer,
    node), at the draws' position: (seeds, blocks, input nodes, sampled edges)."""
    draws = ctx.draws
    seeds = train_nodes[keyed_order(store.dataset_ids(train_nodes), draws.key("seeds", *what))[:batch_size]]
    blocks, inputs, edges = sample_blocks(store, seeds, fanouts, NodeDraws(draws.key("neighbors", *what)),
                                          ctx.cfg.kernel)
    return seeds, blocks, inputs, edges


def sampled_step(method: Method, optimizer: torch.optim.Optimizer, store, x_of, y: torch.Tensor, batch,
                 scaler: torch.amp.GradScaler | None = None) -> tuple[float, int]:
    """One local Adam/SGD step (`method.optimize`, no gradient sum) on the mean loss of a
    `sampled_batch`'s seeds; (loss, sampled edges)."""
    ctx = method.ctx
    seeds, blocks, inputs, edges = batch
    ctx.model.train()
    logits = ctx.model(x_of(inputs), BlockAggregator(blocks, ctx.comm, store.dataset_ids(inputs)))[:seeds.numel()]
    loss = loss_share(logits, y[seeds], total=seeds.numel())
    method.optimize(loss, sync=None, optimizer=optimizer, scaler=scaler)
    return loss.item(), edges


class LocalRounds(PartitionParallelMethod):
    """Rounds of K_r local steps on the rank's own part (cut edges dropped), then parameter
    averaging every `avg_every` rounds and `after_average` (LLCG's correction). `local: sampled`
    draws `batch_size` seeds from the part's training nodes and samples `fanouts` neighbours from
    the part's own subgraph (normalised on its own degrees, as `local_block`), all in this rank's
    memory: no traffic. `local: full` takes full-partition steps (`PartitionParallelMethod`).
    Each rank minimises its own mean loss; Adam state persists across rounds. The loop is
    `PartitionParallelMethod.train_epoch`'s, with a round of K_r steps."""

    Options = LocalRoundOptions
    # Nothing passes through Comm's codec: the part's own rows, and parameter averages sent as they are.
    applies = PartitionParallelMethod.applies - {"comm"}

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.round_steps = options.steps_of_round(ctx.cfg.epochs)
        self.sampled = options.local == "sampled"
        self.sampled_edges = self.step_of_round = 0
        if self.sampled:
            indptr, indices = own_edges(part)
            ids = part.node_ids[:part.num_local]  # local ids, own degrees; dataset ids key the draws and masks
            self.own = ReplicatedStore(indptr, in_id_order(indptr, indices, ids), part.x, ids)
            self.train_nodes = part.train_mask.nonzero().squeeze(1)
            self.batch_size = options.batch_size
            self.fanouts = per_layer(options.fanouts, ctx.cfg.layers)


    def round_length(self, epoch: int) -> int:
        return self.round_steps[min(epoch, len(self.round_steps) - 1)]

    def train_epoch(self, epoch: int) -> torch.Tensor:
        self.step_of_round = 0
        return super().train_epoch(epoch)

    def local_step(self, epoch: int) -> torch.Tensor:
        """One local step; this rank's share of the global mean training loss."""
        ctx = self.ctx
        ctx.draws.at(epoch, self.step_of_round)  # every local step draws afresh (batch, neighbours, dropout)
        self.step_of_round += 1
        if not self.sampled:
            return super().local_step(epoch)
        if self.train_nodes.numel() == 0:
            return torch.zeros(())
        batch = sampled_batch(ctx, self.own, self.train_nodes, self.batch_size, self.fanouts, ("local",))
        loss, edges = sampled_step(self, ctx.optimizer, self.own, lambda ids: ctx.part.x[ids], ctx.part.y, batch)
        self.sampled_edges += edges
        return torch.as_tensor(loss * self.local_train / ctx.part.num_train_global)

    def probes(self) -> dict:
        return {"steps": self.steps_done, "sampled_edges": self.sampled_edges}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(PartitionParallelMethod.Cost):
        @classmethod
        def shape(cls, options, model, rank):
            """A round of `local_steps` steps (its growth, `local_steps_rho`, not modelled): sampled
            batches from the part's own subgraph (`traffic.sampled_shape` over the part's degrees), or
            full-partition steps on its own edges."""
            degrees, world = cost.degrees_of(rank), cost.world(rank)
            layers = len(model.layers)
            if options.local == "full":
                edges = rank.edges * (1 - degrees.cut(world))
                return cost.Shape(options.local_steps, (rank.nodes,) * layers, (edges,) * layers,
                                  (rank.nodes,) * layers, on_host=False, gathered=False)
            seeds = min(rank.train, options.batch_size) if rank.train else options.batch_size
            shape, _ = cost.sampled_shape(degrees.part(world), seeds, options.fanouts, layers, options.local_steps)
            return shape

        @classmethod
        def traffic(cls, options, model, rank):
            """The parameter average every `avg_every` rounds (model state, an all-reduce)."""
            state = cost.parameters(model) * cost.FLOAT
            return [cost.Transfer("param_avg", None, state / options.avg_every, 1 / options.avg_every, 0,
                                  collective=True)]
