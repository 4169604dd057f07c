"""`saint_node`: GraphSAINT's node sampler (Zeng et al., ICLR 2020), with independent draws: each step
keeps each node of the rank's own part with probability p_v = min(1, budget * deg_v / sum of the
part's degrees) and trains on the subgraph the kept nodes induce. The normalisations are GraphSAINT's,
in closed form since the draws are independent: an edge u -> v is scaled by 1 / alpha_uv =
p_v / p_uv = 1 / p_u (1 for a self-loop), a training node's loss by 1 / p_v, so the aggregation and
the loss are unbiased estimates of the own part's full-batch ones."""
from dataclasses import dataclass

import torch

from benchmarks.base.options import option
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.partition import own_edges
from benchmarks.core.sampling import NodeDraws, induced_subgraph
from benchmarks.families.minibatch import Subgraph, SubgraphMethod


class Method(SubgraphMethod):
    class About(SubgraphMethod.About):               # exact_control: the family's, `single`
        approximates = "trains on subgraphs induced by nodes drawn by degree, cut edges dropped"
        claim = "large graphs: a step's cost is set by the budget, not by the neighbourhood's growth"

    class Cost(SubgraphMethod.Cost):
        not_modelled = "its node-sampled subgraphs are not stated to the cost model yet"

    @dataclass(frozen=True)
    class Options(SubgraphMethod.Options):
        budget: int = option(1000, "expected nodes drawn per worker and step (before the cap p_v <= 1)", ge=1)

    def __init__(self, ctx):
        super().__init__(ctx)
        part = ctx.part
        self.indptr, self.indices = own_edges(part)
        self.ids = part.node_ids[:part.num_local]
        deg = part.deg[:part.num_local].double()
        self.p = (ctx.options.budget * deg / deg.sum()).clamp(max=1.0)
        nodes_per_rank = (part.offsets[1:] - part.offsets[:-1]).max().item()
        self.steps = -(-nodes_per_rank // ctx.options.budget)   # an epoch: about every node once

    def steps_per_epoch(self):
        return self.steps

    def begin_epoch(self, epoch):
        pass

    def sample(self, step):
        ctx = self.ctx
        u = NodeDraws(ctx.draws.key("saint_node"))(self.ids, 1)[:, 0].to(self.p.device)
        nodes = torch.nonzero(u < self.p).flatten()
        indptr, indices, _ = induced_subgraph(self.indptr, self.indices, nodes)
        p = self.p[nodes]
        rows_of_edges = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), indptr.diff())
        scale = torch.where(indices == rows_of_edges, 1.0, 1.0 / p[indices]).float()
        deg = ctx.part.deg.index_select(0, nodes)
        adj = LocalAdjacency(indptr, indices, deg, deg, edge_scale=scale, attention_ignores_scale=True,
                             kernel=ctx.cfg.kernel)
        train = torch.nonzero(ctx.part.train_mask[nodes]).flatten()
        weights = (1.0 / (p[train] * ctx.part.num_train_global)).float()
        return Subgraph(nodes, adj, train, weights)
