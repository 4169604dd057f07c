"""The full-graph family: one exact full-graph step per epoch (`single`, `full_halo`, `sar`)."""
from __future__ import annotations

import torch

from benchmarks.core.aggregation import HaloAggregator
from benchmarks.run.method import Method, RankContext, local_loss


class FullGraphMethod(Method):
    """One full-graph step per epoch: forward through `aggregator_for(epoch)`, loss over the global
    training set, backward, gradient all-reduce, optimizer step. Methods that differ only in how
    neighbour rows reach a layer override `make_aggregator` (built once); methods whose aggregation
    changes every step (a halo resampled each epoch, BNS-GCN) override `aggregator_for`."""

    applies = Method.applies | {"precision=fp16"}  # the step goes through Method.optimize

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.aggregator = self.make_aggregator()

    def make_aggregator(self):
        return HaloAggregator(self.ctx.adj, self.ctx.plan, self.ctx.comm, recompute=self.ctx.recompute)

    def aggregator_for(self, epoch: int):
        """The aggregator of this epoch's step: the one `make_aggregator` built, unless overridden
        (e.g. `HaloAggregator(*aggregation.keep_halo(...), ctx.comm, recompute=ctx.recompute)` with a
        per-epoch keep rule).
        Called on every rank at the start of every step, inside the timed epoch."""
        return self.aggregator

    def train_epoch(self, epoch: int) -> torch.Tensor:
        ctx = self.ctx
        self.straggle()
        ctx.model.train()
        loss = local_loss(ctx, ctx.model(ctx.part.x, self.aggregator_for(epoch)))
        self.optimize(loss)
        return loss.detach()
