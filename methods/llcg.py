"""`llcg`: Learn Locally, Correct Globally (Ramezani et al., ICLR 2022, Algorithm 2).

PSGD-PA (local steps on each part with cut edges dropped, parameters averaged every `avg_every`
steps), then after every averaging round `correction_steps` steps on the whole graph with their own
Adam (`server_lr`, state kept across rounds). LLCG's server holds the whole graph; here the same
full-graph step runs distributed over the same partition with exact halo exchange, so its traffic
is counted (`correction_fwd`, `correction_bwd`, `correction_grad`). Reconstruction choices
(docs/digest.md): the correction uses every training node and every neighbour (LLCG's code samples
a mini-batch and neighbours; its theory assumes full neighbours).
"""
from dataclasses import dataclass
from typing import Optional

import torch

from benchmarks.aggregation import HaloAggregator
from benchmarks.method import local_loss, sync_gradients
from benchmarks.families.partition_parallel import PartitionParallelMethod
from benchmarks.families.replicas import PeriodicAveragingOptions
from benchmarks.options import option


class Method(PartitionParallelMethod):
    @dataclass
    class Options(PeriodicAveragingOptions):
        # full-graph steps after each averaging round (LLCG's server_updates)
        correction_steps: int = option(1, ge=0, message="method.correction_steps={value!r} must be an integer >= 0 "
                                                        "(server steps per averaging round)")
        server_lr: Optional[float] = option(None, "the correction's Adam learning rate; null: the training lr", gt=0)

    def __init__(self, ctx):
        super().__init__(ctx)
        options = ctx.options
        self.correction_steps = options.correction_steps
        self.server_aggregator = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, ("correction_fwd", "correction_bwd"))
        self.server_optimizer = torch.optim.Adam(ctx.model.parameters(), lr=options.server_lr or ctx.cfg["lr"],
                                                 weight_decay=ctx.cfg["weight_decay"])

    def after_average(self) -> None:
        ctx = self.ctx
        for _ in range(self.correction_steps):
            ctx.model.train()
            self.server_optimizer.zero_grad(set_to_none=True)
            local_loss(ctx, ctx.model(ctx.part.x, self.server_aggregator)).backward()
            sync_gradients(ctx, "correction_grad")
            self.server_optimizer.step()
