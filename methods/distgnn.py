"""`distgnn`: DistGNN's delayed remote partial aggregates, cd-r (Md, Vaidyanathan, et al., "DistGNN:
Scalable Distributed Training for Large-Scale Graph Neural Networks", SC'21, arXiv 2104.06700).

DistGNN partitions by vertex cut: a split vertex has a partial aggregate on every partition holding
some of its in-edges, and the partials are summed at its owner. On the suite's edge-cut partition
(every rank holds its nodes' in-edges, halo nodes as sources) the same quantity is the *remote
partial aggregate*: for a node v owned by rank q, the sum over its in-edges u -> v whose source u
lives on rank p != q of w_uv h_u (w: the layer's `gcn` or `mean` weight), computed on p and sent to
q. The graph is undirected (benchmarks/core/graph.py), so p holds every such edge as its mirror v -> u
with v one of p's halo nodes: p aggregates its own rows over the transposed halo edges (one row per
halo node, `remote` below) and sends them to their owners with `aggregation.halo_transpose`, which
sums what the peers sent. Every layer, every step:

    out_v = sum over local u of w_uv h_u  (exact)  +  R_v  (the remote partial aggregate)

cd-r (`delay: r`): R is computed and sent at epochs t with t mod (r + 1) == 0 (epoch 0 included) and
the owner reuses the last R it received, as a constant, in between (age 0..r epochs). At a sending
epoch the gradient of R goes back to the ranks that computed it (the transpose's backward: an
exchange of the owners' gradients); in between no gradient crosses ranks through the graph. `delay: 0`
sends every epoch: exact (`full_halo` up to float summation order), its exact control.

Not the paper's schedule: DistGNN's cd-r spreads the split vertices over r bins, sends one bin per
epoch asynchronously and uses it r epochs later (steady traffic off the critical path, every
aggregate r epochs old); here every aggregate is refreshed at once every r + 1 epochs and the
refresh blocks (bursty traffic on the critical path, ages 0..r: a mean age of r/2, half cd-r's).
docs/distgnn.md.
Layer 0 is treated like every other layer (its partials are of the owner-side projected inputs).
Linear aggregations only (GCN, SAGE): GAT's softmax does not split into partial sums.

Categories: `partial_agg` (the partials, forward) and `partial_agg_grad` (their gradients).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from benchmarks.core.aggregation import Aggregator, LocalAdjacency, halo_transpose
from benchmarks.base.errors import UserError
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.base.options import option

CATEGORIES = ("partial_agg", "partial_agg_grad")


class PartialAggregator(Aggregator):
    """Local in-edges exactly, remote partial aggregates fresh at sending epochs and stale between."""

    def __init__(self, ctx, delay: int):
        adj, self.comm, self.plan, self.delay = ctx.adj, ctx.comm, ctx.plan, delay
        self.n = n = adj.num_rows
        local = adj.src < n
        # My in-edges from my own rows, with the global degrees (the exact part of every layer).
        counts = torch.bincount(adj.dst[local], minlength=n)
        self.local = LocalAdjacency(torch.cat([counts.new_zeros(1), counts.cumsum(0)]), adj.src[local],
                                    adj.row_deg, adj.col_deg[:n], kernel=adj.kernel)
        # The transposed halo edges: row i = my halo node v_i, columns = my rows u with an edge u -> v_i.
        # Degrees swapped, so `edge_weights` gives w_uv: gcn 1/sqrt(deg_u deg_v), mean 1/deg_v.
        halo = adj.src[~local] - n
        order = torch.argsort(halo, stable=True)  # rows u stay sorted within each halo row
        counts = torch.bincount(halo, minlength=adj.num_cols - n)
        self.remote = LocalAdjacency(torch.cat([counts.new_zeros(1), counts.cumsum(0)]), adj.dst[~local][order],
                                     adj.col_deg[n:], adj.row_deg, kernel=adj.kernel)
        comm = ctx.comm
        comm.register_category(*CATEGORIES)
        self.epoch = 0
        self.received = {}  # (layer, norm) -> (the last R received, the epoch it was sent)
        self.ages = {}  # epoch -> age of the R used by layer 0 this epoch (every layer ages alike)

    def sending(self) -> bool:
        return self.epoch % (self.delay + 1) == 0

    def remote_aggregates(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        key = (layer, norm)
        if self.sending() or key not in self.received:
            got = halo_transpose(self.remote.spmm(norm, h), self.plan, self.comm, self.n, CATEGORIES, layer)
            self.received[key] = (got.detach(), self.epoch)
        else:
            got = self.received[key][0]
        self.ages.setdefault(self.epoch, self.epoch - self.received[key][1])
        return got

    def propagate(self, h, norm: str, layer: int):
        out = self.local.spmm(norm, h)
        return out if self.comm.world == 1 else out + self.remote_aggregates(h, norm, layer)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        raise NotImplementedError("distgnn: attention has no partial aggregates (GCN and SAGE only)")


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        approximates = ('remote partial aggregates all refreshed every `delay` + 1 epochs, blocking, and reused in '
                        'between (ages 0..`delay`)')
        claim = ('(Md et al., SC\'21) CPU clusters with vertex-cut partitions: cd-r sends one bin of partial '
                 'aggregates each epoch, asynchronously, off the critical path; this plugin\'s refresh blocks '
                 '(docs/distgnn.md)')
        exact_control = {"delay": 0}

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        # cd-r: remote partial aggregates sent every r + 1 epochs and reused in between (0: every
        # epoch, exact). The paper's delayed runs use cd-5, its default here.
        delay: int = option(5, "epochs a remote partial aggregate is reused (cd-r's r)", ge=0)

        def check(self, run) -> None:
            if run is not None and run.model_name == "gat":
                raise UserError("method=distgnn sums partial aggregates, which GAT's softmax has none of "
                                "(use model=gcn or model=sage)")

    def make_aggregator(self):
        return PartialAggregator(self.ctx, self.ctx.options.delay)

    def aggregator_for(self, epoch: int):
        self.aggregator.epoch = epoch
        return self.aggregator

    def probes(self) -> dict:
        ages = [self.aggregator.ages[e] for e in sorted(self.aggregator.ages)]
        return {"staleness": {"unit": "epochs since the remote partial aggregates used were sent",
                              "by_epoch": ages, "max": max(ages, default=0)}}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """The gradient all-reduce every step, and every r + 1 epochs, in every exchanged layer, one
            partial aggregate per halo row (sent by the rank whose halo it is) at the layer's exchange
            width, and where gradients flow as many gradient rows back: full_halo's volume / (r + 1)."""
            from benchmarks.base.traffic import FLOAT, Transfer, exchanged_layers, grad_allreduce
            share = 1 / (options.delay + 1)
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank):
                for category in CATEGORIES[:1 + grad]:
                    out.append(Transfer(category, layer, share * rank.halo * width * FLOAT, share, share * rank.peers))
            return out

        @classmethod
        def stale_table_bytes(cls, options, model, rank):
            """The last received remote partial aggregates: one row per local row with a remote in-edge
            (at most the rank's nodes), every layer, at the layer's exchange width."""
            if options.delay == 0:
                return 0.0
            from benchmarks.base.traffic import FLOAT, exchanged_layers
            return sum(rank.nodes * width * FLOAT for _, width, _ in exchanged_layers(model, rank))


