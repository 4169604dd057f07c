"""`cluster_gcn`: Cluster-GCN (Chiang et al., KDD 2019), data-parallel (docs/sampling.md).

At setup each rank cuts its own part's subgraph (edges to other parts dropped) into `num_parts`
clusters with METIS. Each step it trains the full model on the subgraph induced by `clusters_per_batch`
(q) clusters drawn without replacement (a fresh permutation of its clusters per epoch, consumed q
at a time; keyed by (seed, epoch), not the rank: every rank permutes its own clusters' numbers alike),
between-cluster edges among the chosen ones restored, normalised on the degrees within
that subgraph, with the optional diagonal enhancement `diag_lambda`. Gradients are all-reduced
every step; nothing else crosses ranks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from benchmarks.base import traffic as cost
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.base.errors import UserError
from benchmarks.base.options import option
from benchmarks.core.partition import metis
from benchmarks.families.minibatch import Subgraph, SubgraphMethod
from benchmarks.core.graph import concat_ranges, edge_rows
from benchmarks.core.partition import own_edges
from benchmarks.core.sampling import induced_subgraph


def metis_clusters(indptr: torch.Tensor, indices: torch.Tensor, num_parts: int, seed: int) -> torch.Tensor:
    """Cluster id of every node of a square in-edge CSR (symmetric; self-loops ignored), by METIS
    balanced on nodes. Clusters METIS leaves empty get one node each from the largest clusters, so
    every cluster has a node (num_parts <= nodes)."""
    n = indptr.numel() - 1
    if num_parts == 1:
        return torch.zeros(n, dtype=torch.int64)
    clusters = metis(indptr, indices, num_parts, seed)
    sizes = torch.bincount(clusters, minlength=num_parts)
    for empty in (sizes == 0).nonzero().flatten().tolist():  # rare: a handful of clusters at most
        largest = int(sizes.argmax())
        node = int((clusters == largest).nonzero()[-1])
        clusters[node] = empty
        sizes[largest] -= 1
        sizes[empty] += 1
    return clusters


class Method(SubgraphMethod):
    class About(SubgraphMethod.About):
        approximates = 'trains on subgraphs of METIS clusters (cut edges dropped)'
        claim = '(Chiang et al., KDD 2019) graphs too large for full-batch on one device: small memory per step'

    @dataclass(frozen=True)
    class Options(SubgraphMethod.Options):
        num_parts: int = option(16, "METIS clusters per rank, of the rank's own part", ge=1)
        # q: steps per epoch = ceil(num_parts / q)
        clusters_per_batch: int = option(4, "clusters per mini-batch, at most num_parts", ge=1)
        # self-loop weights x (1 + diag_lambda)
        diag_lambda: float = option(0.0, "diagonal enhancement; 0: plain normalisation", ge=0)

        def check(self, run) -> None:
            c, q = self.num_parts, self.clusters_per_batch
            if q > c:
                raise UserError(f"method.clusters_per_batch={q} exceeds method.num_parts={c}; use at most {c}")


    @classmethod
    def check_partition(cls, run, partition_stats: dict) -> None:
        options, sizes = run.method, partition_stats["nodes_per_rank"]
        smallest = min(sizes)
        if options.num_parts > smallest:
            raise UserError(f"method.num_parts={options.num_parts} exceeds the {smallest} nodes of rank "
                            f"{sizes.index(smallest)}'s part; use at most {smallest}")

    def __init__(self, ctx):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.num_parts, self.q = options.num_parts, options.clusters_per_batch
        self.diag_lambda = float(options.diag_lambda)
        self.indptr, self.indices = own_edges(part)
        clusters = metis_clusters(self.indptr, self.indices, self.num_parts, ctx.cfg.seed).to(ctx.device)
        # Nodes grouped by cluster (ascending ids within a cluster); cluster c is
        # members[start[c]:start[c] + size[c]].
        self.members = torch.argsort(clusters, stable=True)
        self.size = torch.bincount(clusters, minlength=self.num_parts)
        self.start = torch.cumsum(self.size, 0) - self.size

    def steps_per_epoch(self) -> int:
        return math.ceil(self.num_parts / self.q)  # the same on every rank: num_parts is

    def begin_epoch(self, epoch: int) -> None:
        generator = self.ctx.draws.generator(self.members.device, "clusters", epoch)
        self.order = torch.randperm(self.num_parts, generator=generator, device=self.members.device)

    def batch_nodes(self, chosen: torch.Tensor) -> torch.Tensor:
        """The union of the chosen clusters, cluster after cluster."""
        return self.members[concat_ranges(self.start[chosen], self.size[chosen])]

    def sample(self, step: int) -> Subgraph:
        part = self.ctx.part
        chosen = self.order[step * self.q:(step + 1) * self.q].to(self.members.device)
        nodes = self.batch_nodes(chosen)
        indptr, indices, _ = induced_subgraph(self.indptr, self.indices, nodes)
        deg = indptr[1:] - indptr[:-1]  # within the batch subgraph, self-loop included
        # Diagonal enhancement: self-loops weigh 1 + diag_lambda in linear aggregation (GAT's softmax
        # runs over the batch's edges unscaled). Edge ends from the CSR: self-loops sit where column = row.
        scale = 1.0 + self.diag_lambda * (indices == edge_rows(indptr)).float() if self.diag_lambda else None
        adj = LocalAdjacency(indptr, indices, deg, deg, scale, attention_ignores_scale=True, kernel=self.ctx.cfg.kernel)
        rows = part.train_mask.index_select(0, nodes).nonzero().flatten()
        # Each cluster is in a step's batch with probability |chosen| / num_parts, so this weight makes
        # the sum over ranks an unbiased estimate of the global mean loss (exactly it when q = num_parts).
        weight = self.num_parts / (chosen.numel() * part.num_train_global)
        return Subgraph(nodes, adj, rows, weight)

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(SubgraphMethod.Cost):
        #: Smaller batches of a large part: the default's 4 of 16 clusters is a quarter of the part a step.
        advise_variants = {"num_parts=256": {"num_parts": 256}}

        @classmethod
        def shape(cls, options, model, rank):
            """`clusters_per_batch` of `num_parts` clusters of the rank's own part (`traffic.cluster_batch`);
            a cluster cut inside the part cuts what a METIS cut of the graph into P x num_parts parts cuts
            beyond the cut into P. Building the batch's subgraph scans its nodes' own in-edges."""
            degrees, world = cost.degrees_of(rank), cost.world(rank)
            outer = degrees.cut(world)
            inner = (degrees.cut(world * options.num_parts) - outer) / (1 - outer)
            own = rank.edges * (1 - outer)
            nodes, edges = cost.cluster_batch(rank.nodes, own, max(0.0, inner), options.num_parts,
                                              options.clusters_per_batch)
            layers = len(model.layers)
            return cost.Shape(math.ceil(options.num_parts / options.clusters_per_batch), (nodes,) * layers,
                              (edges,) * layers, (nodes,) * layers, subgraph_edges=nodes * own / rank.nodes,
                              host_rows=nodes)

