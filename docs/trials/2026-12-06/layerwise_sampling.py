"""`layerwise_sampling`: FastGCN-style layer-wise importance sampling (Chen et al., ICLR 2018), drawn
within the layer's neighbourhood as LADIES does: per layer, `layer_size` draws with replacement from
the in-neighbours of the layer's destinations, each with probability proportional to its degree;
a drawn node u's edges are scaled by c_u / (s q_u) (c_u its draws, s the draws, q_u its probability),
so each destination's aggregation is an unbiased estimate of the exact one."""
from dataclasses import dataclass

import torch

from benchmarks.base.options import option
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.families.minibatch import Batch, BlockAggregator, MiniBatchMethod


class Method(MiniBatchMethod):
    class About(MiniBatchMethod.About):              # exact_control: the family's, `single`
        approximates = "samples `layer_size` nodes per layer, by degree, importance-weighted"
        claim = "deep models: a layer's sample does not grow with the fan-out of the layer above"

    class Cost(MiniBatchMethod.Cost):
        not_modelled = "its layer-wise sample is not stated to the cost model yet"

    @dataclass(frozen=True)
    class Options(MiniBatchMethod.Options):
        layer_size: int = option(512, "draws per worker, layer and step; -1: every neighbour", ge=1, also=(-1,))
        batch_size: int = option(256, "seed nodes per worker and step", ge=1)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.batch_seeds(ctx.options.batch_size)
        self.store = ctx.graph_store("partitioned")
        self.lo = int(ctx.part.offsets[ctx.rank])

    def sample(self, step):
        seeds, weight = self.seeds(step)
        dst = seeds + self.lo                        # store ids
        dst_deg = None
        blocks, edges = [], 0
        generator = self.ctx.draws.generator(torch.device("cpu"), "layerwise")
        for layer in reversed(range(self.ctx.cfg.layers)):   # the seeds' hop first
            counts, nbrs, nbr_deg, deg = self.store.hop(dst, -1, layer)   # collective
            dst_deg = deg if dst_deg is None else dst_deg
            block, dst, dst_deg = self.layer_block(dst, dst_deg, counts, nbrs, nbr_deg, generator)
            blocks.insert(0, block)
            edges += block.nnz
        return seeds, blocks, dst, edges, weight

    def layer_block(self, dst, dst_deg, counts, nbrs, nbr_deg, generator):
        """One layer's block: its sources are `dst` then the drawn nodes not among them."""
        s = self.ctx.options.layer_size
        cand, inverse = torch.unique(nbrs, return_inverse=True)
        cand_deg = torch.zeros(cand.numel(), dtype=nbr_deg.dtype, device=nbr_deg.device)
        cand_deg.scatter_(0, inverse, nbr_deg)
        if s == -1 or cand.numel() == 0:
            scale = torch.ones(cand.numel(), dtype=torch.float32, device=cand.device)
        else:
            q = cand_deg.double() / cand_deg.double().sum()
            drawn = torch.multinomial(q.cpu(), s, replacement=True, generator=generator).to(cand.device)
            c = torch.bincount(drawn, minlength=cand.numel()).double()
            scale = (c / (s * q)).float()            # 0 for a candidate never drawn
        kept_edge = scale[inverse] > 0
        new = cand[(scale > 0) & ~torch.isin(cand, dst)]
        sources = torch.cat([dst, new])
        source_deg = torch.cat([dst_deg, cand_deg[torch.searchsorted(cand, new)]])
        order = torch.argsort(sources)               # store id -> position among the sources
        col = order[torch.searchsorted(sources[order], nbrs[kept_edge])]
        rows = torch.repeat_interleave(torch.arange(dst.numel(), device=dst.device), counts)[kept_edge]
        indptr = torch.zeros(dst.numel() + 1, dtype=torch.long, device=dst.device)
        indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=dst.numel()), 0)
        adj = LocalAdjacency(indptr, col, dst_deg, source_deg, edge_scale=scale[inverse][kept_edge],
                             attention_ignores_scale=True, kernel=self.ctx.cfg.kernel)
        return adj, sources, source_deg

    def fetch(self, sampled):
        seeds, blocks, inputs, edges, weight = sampled
        x = self.store.features(inputs, 0)
        aggregator = BlockAggregator(blocks, self.ctx.comm, self.store.dataset_ids(inputs))
        rows = torch.arange(seeds.numel(), device=x.device)
        return Batch(aggregator, x, rows, self.ctx.part.y[seeds], weight, edges)
