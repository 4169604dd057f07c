"""`graphsaint`: GraphSAINT's random-walk sampler (Zeng et al., ICLR 2020), data-parallel
(docs/sampling.md).

Each rank samples from its own part's subgraph (edges to other parts dropped). A subgraph: `roots`
walk roots drawn uniformly (with replacement) from the rank's training nodes, each walking
`walk_length` steps along in-edges (one uniformly drawn in-neighbour per step, self-loop included);
the subgraph is induced by every visited node. Roots and walks draw from a generator keyed by (seed,
epoch, step) (benchmarks/core/draws.py; the pre-sampling's by `presample`), not by the rank: every rank
draws the same numbers, applied to its own part. Normalisation as PyG's GraphSAINTSampler: before
training, subgraphs are pre-sampled until every node was drawn `sample_coverage` times on average,
counting C_v (subgraphs holding node v) and C_uv (holding edge u->v) over S subgraphs. Edge u->v
then carries the full-graph normalised weight (global degrees, as every full-graph method) times
C_v / C_uv, and training node v's loss weight is S / (C_v * global training nodes). Gradients are
all-reduced every step; nothing else crosses ranks.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from benchmarks.base import traffic as cost
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.families.minibatch import Subgraph, SubgraphMethod
from benchmarks.base.options import option
from benchmarks.core.graph import edge_rows
from benchmarks.core.partition import own_edges
from benchmarks.core.sampling import induced_subgraph


def random_walks(indptr: torch.Tensor, indices: torch.Tensor, roots: torch.Tensor, walk_length: int,
                 generator: torch.Generator) -> torch.Tensor:
    """[walk_length + 1, len(roots)]: row 0 the roots, row t+1 a uniformly drawn in-neighbour of row t
    (every node needs one: the graph policy gives each a self-loop). All walkers step together."""
    walks = [roots]
    cur = roots
    for _ in range(walk_length):
        start = indptr[cur]
        deg = indptr[cur + 1] - start
        offset = (torch.rand(cur.shape, generator=generator, device=cur.device) * deg).long().clamp_(max=deg - 1)
        cur = indices[start + offset]
        walks.append(cur)
    return torch.stack(walks)


class Method(SubgraphMethod):
    class About(SubgraphMethod.About):
        approximates = 'trains on random-walk subgraphs, normalised to be unbiased'
        claim = '(Zeng et al., ICLR 2020) large graphs on one device: small memory per step, fast convergence'

    @dataclass(frozen=True)
    class Options(SubgraphMethod.Options):
        # drawn from the rank's training nodes with replacement
        roots: int = option(6000, "random-walk roots per subgraph", ge=1)
        walk_length: int = option(2, "steps per walk", ge=0)
        sample_coverage: float = option(20, "pre-sampled subgraphs until each node was drawn that many times on "
                                            "average; 0: one subgraph", ge=0)
        # GraphSAINT's aggregation (C_v / C_uv) and loss (S / C_v) normalisation
        use_norm: bool = option(True)

    def __init__(self, ctx):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.roots, self.walk_length = options.roots, options.walk_length
        self.use_norm = options.use_norm
        self.indptr, self.indices = own_edges(part)
        train = part.train_mask.nonzero().flatten()
        # A rank without training nodes still takes every step (the all-reduce needs it): its walks
        # start anywhere and its loss weights are zero.
        self.root_pool = train if train.numel() else torch.arange(part.num_local, device=ctx.device)
        self.presample_subgraphs, self.presample_time_s = 0, 0.0
        if self.use_norm:
            t0 = time.perf_counter()
            node_count, edge_count, S = self.presample(float(options.sample_coverage))
            self.presample_time_s, self.presample_subgraphs = time.perf_counter() - t0, S
            self.edge_scale, self.node_weight = normalisation(self.indptr, self.indices, node_count, edge_count, S,
                                                              part.num_train_global)

    # ------------------------------------------------------------------ sampling
    def sample_nodes(self, generator: torch.Generator) -> torch.Tensor:
        """The visited nodes of one subgraph's walks, sorted."""
        pool = self.root_pool
        pick = torch.randint(pool.numel(), (self.roots,), generator=generator, device=pool.device)
        walks = random_walks(self.indptr, self.indices, pool[pick], self.walk_length, generator)
        return torch.unique(walks)

    def sample_subgraph(self, generator: torch.Generator) -> tuple[torch.Tensor, tuple]:
        nodes = self.sample_nodes(generator)
        return nodes, induced_subgraph(self.indptr, self.indices, nodes)

    def presample(self, coverage: float, record=None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(C_v per node, C_uv per edge of the local CSR, S): subgraphs drawn until the nodes drawn
        add up to coverage x nodes (at least one). `record(nodes, subgraph)` sees each one (tests)."""
        n = self.indptr.numel() - 1
        node_count = torch.zeros(n, device=self.indptr.device)
        edge_count = torch.zeros(self.indices.numel(), device=self.indptr.device)
        drawn, S = 0, 0
        generator = self.ctx.draws.generator(self.indptr.device, "presample")  # setup's own draws
        while S == 0 or drawn < coverage * n:
            nodes, sub = self.sample_subgraph(generator)
            node_count[nodes] += 1  # nodes and edge positions are distinct within a subgraph
            edge_count[sub[2]] += 1
            drawn, S = drawn + nodes.numel(), S + 1
            if record is not None:
                record(nodes, sub)
        return node_count, edge_count, S

    def steps_per_epoch(self) -> int:
        # The same on every rank: enough subgraphs for the largest rank to draw each training node
        # once as a root in expectation.
        return max(1, math.ceil(max(self.train_counts) / self.roots))


    def subgraph_batch(self, nodes: torch.Tensor, sub) -> Subgraph:
        part = self.ctx.part
        indptr, indices, positions = sub
        deg = part.deg.index_select(0, nodes)  # global degrees: the full-graph normalised weights
        rows = part.train_mask.index_select(0, nodes).nonzero().flatten()
        if self.use_norm:
            scale = self.edge_scale.index_select(0, positions)
            weights = self.node_weight.index_select(0, nodes.index_select(0, rows))
        else:
            # The rank's batch mean, scaled by its share of the training nodes.
            scale, weights = None, self.local_train / (max(1, rows.numel()) * part.num_train_global)
        # GAT: softmax unscaled
        adj = LocalAdjacency(indptr, indices, deg, deg, scale, attention_ignores_scale=True, kernel=self.ctx.cfg.kernel)
        return Subgraph(nodes, adj, rows, weights)

    def sample(self, step: int) -> Subgraph:
        return self.subgraph_batch(*self.sample_subgraph(self.ctx.draws.generator(self.indptr.device, "walks")))

    def probes(self) -> dict:
        return {**super().probes(), "presample_time_s": self.presample_time_s,
                "presample_subgraphs": self.presample_subgraphs}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(SubgraphMethod.Cost):
        @classmethod
        def shape(cls, options, model, rank):
            """A random-walk subgraph of the rank's own part (`traffic.walk_batch` over the part's degrees:
            the cut edges dropped): one draw per walk step, and the in-edges of its nodes scanned to
            build the induced subgraph."""
            own = cost.degrees_of(rank).part(cost.world(rank))
            nodes, edges, scanned = cost.walk_batch(own, options.roots, options.walk_length, rank.train)
            layers = len(model.layers)
            return cost.Shape(cls.steps(options, rank, options.roots), (nodes,) * layers, (edges,) * layers,
                              (nodes,) * layers, sampled_edges=options.roots * options.walk_length,
                              subgraph_edges=scanned, host_rows=nodes)


def normalisation(indptr: torch.Tensor, indices: torch.Tensor, node_count: torch.Tensor, edge_count: torch.Tensor,
                  S: int, num_train_global: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge scale C_v / C_uv per edge of the CSR, v its destination; loss weight S / (C_v N_train)
    per node). Edges and nodes never pre-sampled get 0: the estimators cover what was seen."""
    dst = edge_rows(indptr)
    seen = edge_count > 0
    edge_scale = torch.where(seen, node_count[dst] / edge_count.clamp(min=1), 0.0)
    node_weight = torch.where(node_count > 0, S / (node_count.clamp(min=1) * num_train_global), 0.0)
    return edge_scale, node_weight
