"""`llcg`: Learn Locally, Correct Globally (Ramezani et al., ICLR 2022, Algorithm 2).

PSGD-PA (local steps on each part with cut edges dropped, parameters averaged every `avg_every`
steps), then after every averaging round `correction_steps` steps on the whole graph with their own
Adam (`server_lr`, state kept across rounds). LLCG's server holds the whole graph; here the same
full-graph step runs distributed over the same partition with exact halo exchange, so its traffic
is counted (`correction_fwd`, `correction_bwd`, `correction_grad`). Reconstruction choices
(docs/digest.md): the correction uses every training node and every neighbour (LLCG's code samples
a mini-batch and neighbours; its theory assumes full neighbours).
"""
import torch

from benchmarks.aggregation import HaloAggregator
from benchmarks.errors import UserError
from benchmarks.method import local_loss, sync_gradients
from benchmarks.families.partition_parallel import PartitionParallelMethod


class Method(PartitionParallelMethod):
    allows_gradient_allreduce = False

    @classmethod
    def check_config(cls, method_cfg: dict) -> None:
        super().check_config(method_cfg)
        steps, lr = method_cfg.get("correction_steps"), method_cfg.get("server_lr")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise UserError(f"method.correction_steps={steps!r} must be an integer >= 0 (server steps per round)")
        if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0):
            raise UserError(f"method.server_lr={lr!r} must be a positive number, or null for the training lr")

    def __init__(self, ctx):
        super().__init__(ctx)
        m = ctx.method_cfg
        self.correction_steps = m["correction_steps"]
        self.server_aggregator = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, ("correction_fwd", "correction_bwd"))
        self.server_optimizer = torch.optim.Adam(ctx.model.parameters(), lr=m.get("server_lr") or ctx.cfg["lr"],
                                                 weight_decay=ctx.cfg["weight_decay"])

    def after_average(self) -> None:
        ctx = self.ctx
        for _ in range(self.correction_steps):
            ctx.model.train()
            self.server_optimizer.zero_grad(set_to_none=True)
            local_loss(ctx, ctx.model(ctx.part.x, self.server_aggregator)).backward()
            sync_gradients(ctx, "correction_grad")
            self.server_optimizer.step()
