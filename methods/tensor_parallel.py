"""`tensor_parallel`: generic GNN tensor parallelism (features sliced across ranks, the graph not
partitioned), with two layout switches each way around every aggregation. It is not NeutronTP (Ai,
Yuan, Ling, Wang, Zhang, Fu, Chen, Gu, Yu, "NeutronTP: Load-Balanced Distributed Full-Graph GNN
Training with Tensor Parallelism", PVLDB 18(2):173-186, 2024, arXiv 2412.20379), whose tensor
parallelism it shares but whose first contribution, decoupled training (the NN operations apart from
aggregation, about two layout switches fewer per layer), it does not have: its bytes are those of
the coupled variant NeutronTP improves on (docs/tensor_parallel.md). No public code of NeutronTP was
found, and of the paper only its abstract (arxiv.org/html/2412.20379v1) and third-party summaries.

Every rank holds the WHOLE graph structure (built here from the partition cache's replicated graph,
`RankContext.graph_store("replicated")`, as the samplers' stores are) and, during aggregation, a
slice of the feature dimension: rank q owns columns [c_q, c_q+1) of the width d (equal slices, the
first d mod P one column wider). Aggregating its slice over every edge of the graph needs no halo
and gives every rank the same work whatever the partition's skew (the load balance NeutronTP claims).

The dense parts (projection, bias, activation, dropout, the loss) need whole rows, so between them
the layout switches by all-to-all (NeutronTP's split and gather):
  - rows -> columns (`_ToColumns`): rank i sends peer q its rows' slice q (n_i x d_q) and receives
    every rank's rows of its own slice, stacked into N x d_i;
  - aggregate: A (N x N, global degrees) times the N x d_i slice, by the run's kernel;
  - columns -> rows (`_ToRows`): rank i sends peer q q's rows of its slice (n_q x d_i) and gets back
    its own rows, whole (n_i x d).
Backward runs the same two switches on the gradients, in reverse (`layout_bwd`), and A^T.

GAT: the attention logits need whole rows. Each rank computes a_src . z and a_dst . z for its own
rows (whole, before the switch) and all-gathers them (`logits_fwd`, N x 2H on every rank); every rank
then runs the softmax over every edge and head of the graph (replicated work) and weights its
channel slice (a slice may span heads: one weighted sum per head it touches). The softmax's backward
on a rank sees only its slice's share of each edge's d alpha; the shares add up, because the
logits' gradient is linear in them, so the all-gather's backward sums each row's partial logit
gradients at its owner (`logits_bwd`).

Absent, against NeutronTP: decoupled training (NeutronTP runs the NN operations and all graph
propagation as separate phases, so layouts switch once per epoch, not per layer: a different model,
APPNP-like, not the suite's GCN/SAGE/GAT); chunked, pipelined scheduling for graphs beyond one
device's memory. Switches are blocking point-to-point transfers (an all-to-all of unequal widths,
through `Comm` so bytes are counted and `comm.quantize` applies), not NCCL's all-to-all.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import Aggregator, EdgeSoftmax, HaloAggregator, LocalAdjacency
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.run.method import RankContext

CATEGORIES = ("layout_fwd", "layout_bwd", "logits_fwd", "logits_bwd")


def column_slices(width: int, world: int) -> list[tuple[int, int]]:
    """Rank q's columns [lo, hi) of a `width`-wide row: equal slices, the first width mod P ranks one
    column wider (a rank may have none when width < P)."""
    base, extra = divmod(width, world)
    starts = [q * base + min(q, extra) for q in range(world + 1)]
    return [(starts[q], starts[q + 1]) for q in range(world)]


class TensorParallelAggregator(Aggregator):
    """Aggregation over the whole graph on this rank's column slice, between two layout switches."""

    def __init__(self, ctx: RankContext):
        self.comm, self.rank, self.world = ctx.comm, ctx.rank, ctx.world
        self.offsets = [int(o) for o in ctx.part.offsets]
        self.rows = [self.offsets[q + 1] - self.offsets[q] for q in range(self.world)]
        store = ctx.graph_store("replicated")  # whole in-edge CSR in the partition's numbering; collective
        deg = store.deg
        self.adj = LocalAdjacency(store.indptr.to(ctx.device), store.indices.to(ctx.device), deg.to(ctx.device),
                                  deg.to(ctx.device), kernel=ctx.cfg.kernel,
                                  col_ids=None if store.node_ids is None else store.node_ids.to(ctx.device))
        # One switch at a time; within a switch each ordered pair carries one message.
        self.channel = ctx.comm.channel("tensor_parallel.layout", CATEGORIES)

    # ---------------------------------------------------------------- the all-to-all of unequal widths
    def switch(self, pieces: list[torch.Tensor | None], shapes: list[tuple], category: str, layer: int):
        """Send pieces[q] to every other rank q and receive a tensor of shapes[q] from it, in rounds
        r = 1..P-1 (to rank + r, from rank - r), posted together and then waited for. Returns the
        received tensors by rank (None for this rank). Empty pieces are skipped on both ends."""
        received = [None] * self.world
        pending = []
        for r in range(1, self.world):
            to, frm = (self.rank + r) % self.world, (self.rank - r) % self.world
            recv = pieces[to].new_empty(shapes[frm])
            pending.append((frm, self.channel.exchange(pieces[to], to, recv, frm, category, layer)))
        for frm, transfer in pending:
            received[frm] = transfer.wait()
        return received

    def to_columns(self, h: torch.Tensor, category: str, layer: int) -> torch.Tensor:
        """My rows, whole (n_i x d) -> every row, my slice (N x d_i)."""
        slices = column_slices(h.shape[1], self.world)
        lo, hi = slices[self.rank]
        pieces = [h[:, a:b].contiguous() for a, b in slices]
        received = self.switch(pieces, [(n, hi - lo) for n in self.rows], category, layer)
        received[self.rank] = pieces[self.rank]
        return torch.cat(received)

    def to_rows(self, y: torch.Tensor, width: int, category: str, layer: int) -> torch.Tensor:
        """Every row, my slice (N x d_i) -> my rows, whole (n_i x width)."""
        slices = column_slices(width, self.world)
        pieces = [y[self.offsets[q]:self.offsets[q + 1]] for q in range(self.world)]
        mine = self.rows[self.rank]
        received = self.switch(pieces, [(mine, b - a) for a, b in slices], category, layer)
        received[self.rank] = pieces[self.rank]
        return torch.cat(received, 1)

    def all_gather(self, h: torch.Tensor, category: str, layer: int) -> torch.Tensor:
        """My rows to every rank: every rank's rows, stacked in global order."""
        received = self.switch([h] * self.world, [(n, *h.shape[1:]) for n in self.rows], category, layer)
        received[self.rank] = h
        return torch.cat(received)

    def reduce_rows(self, g: torch.Tensor, category: str, layer: int) -> torch.Tensor:
        """all_gather's transpose: each rank's gradient of every row; each row's sum at its owner."""
        pieces = [g[self.offsets[q]:self.offsets[q + 1]].contiguous() for q in range(self.world)]
        mine = self.rows[self.rank]
        received = self.switch(pieces, [(mine, *g.shape[1:])] * self.world, category, layer)
        out = pieces[self.rank].clone()
        for q, rows in enumerate(received):
            if q != self.rank:
                out += rows
        return out

    # ---------------------------------------------------------------- the aggregation interface
    def propagate(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        cols = _ToColumns.apply(h, self, layer)
        out = self.adj.spmm(norm, cols) if cols.shape[1] else cols.clone()  # an empty slice when width < P
        return _ToRows.apply(out, self, h.shape[1], layer)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2, dropout: float = 0.0):
        n, heads, ch = z.shape
        logits = torch.cat([(z * att_src).sum(-1), (z * att_dst).sum(-1)], 1)  # my rows, [n, 2H]
        logits, cols = _LogitsAndColumns.apply(logits, z.reshape(n, heads * ch), self, layer)
        with torch.autocast(z.device.type, enabled=False):
            alpha = edge_softmax(self.adj, logits[:, :heads].float().contiguous(),
                                 logits[:, heads:].float().contiguous(), negative_slope)
        if dropout:  # every rank drops the same coefficients of the whole graph, keyed by edge
            alpha = alpha * self.comm.draws.attention_keep(self.adj, heads, dropout, layer)
        lo, hi = column_slices(heads * ch, self.world)[self.rank]
        out = []
        for head in range(lo // ch, (hi + ch - 1) // ch if hi > lo else lo // ch):
            a, b = max(lo, head * ch) - lo, min(hi, (head + 1) * ch) - lo
            seg = self.adj.weighted_sum(alpha[:, head:head + 1].contiguous(), cols[:, a:b].contiguous().unsqueeze(1))
            out.append(seg.squeeze(1))
        out = torch.cat(out, 1) if out else cols.clone()
        return _ToRows.apply(out, self, heads * ch, layer).view(n, heads, ch)


def edge_softmax(adj: LocalAdjacency, el: torch.Tensor, er: torch.Tensor, negative_slope: float) -> torch.Tensor:
    """GAT's attention weights over each destination's in-edges, from the logits' two halves
    (el per source, er per destination, [N, H]): what `LocalAdjacency.attention` computes from the
    rows, by the same kernel."""
    if adj.native(el, er):
        return EdgeSoftmax.apply(el, er, adj, negative_slope)
    e = F.leaky_relu(el.index_select(0, adj.src) + er.index_select(0, adj.dst), negative_slope)
    ex = torch.exp(e - adj.segment(e.detach(), "max").index_select(0, adj.dst))
    return ex / adj.segment(ex, "sum").index_select(0, adj.dst)


class _ToColumns(torch.autograd.Function):
    """rows -> columns; backward: the gradient's columns -> rows."""

    @staticmethod
    def forward(ctx, h, agg: TensorParallelAggregator, layer: int):
        ctx.agg, ctx.layer, ctx.width = agg, layer, h.shape[1]
        return agg.to_columns(h, "layout_fwd", layer)

    @staticmethod
    def backward(ctx, grad):
        return ctx.agg.to_rows(grad.contiguous(), ctx.width, "layout_bwd", ctx.layer), None, None


class _ToRows(torch.autograd.Function):
    """columns -> rows; backward: the gradient's rows -> columns."""

    @staticmethod
    def forward(ctx, y, agg: TensorParallelAggregator, width: int, layer: int):
        ctx.agg, ctx.layer = agg, layer
        return agg.to_rows(y, width, "layout_fwd", layer)

    @staticmethod
    def backward(ctx, grad):
        return ctx.agg.to_columns(grad.contiguous(), "layout_bwd", ctx.layer), None, None, None


class _LogitsAndColumns(torch.autograd.Function):
    """GAT's two transfers as one autograd node: every rank's logits on every rank (all-gather) and z
    switched to columns. Backward always runs both reverses, in one order: a rank whose slice is
    empty (width < P) has no gradient for the logits (its weighted sums use no attention weight) and
    would otherwise skip the logits' reverse the others run, and two separate nodes would be free to
    run in different orders on ranks whose graphs differ so."""

    @staticmethod
    def forward(ctx, logits, z, agg: TensorParallelAggregator, layer: int):
        ctx.agg, ctx.layer, ctx.width = agg, layer, z.shape[1]
        return agg.all_gather(logits.contiguous(), "logits_fwd", layer), agg.to_columns(z, "layout_fwd", layer)

    @staticmethod
    def backward(ctx, grad_logits, grad_cols):  # a missing gradient arrives as zeros (materialize_grads)
        agg, layer = ctx.agg, ctx.layer
        return (agg.reduce_rows(grad_logits.contiguous(), "logits_bwd", layer),
                agg.to_rows(grad_cols.contiguous(), ctx.width, "layout_bwd", layer), None, None)


class Method(FullGraphMethod):
    """The full-graph step, with tensor-parallel aggregation."""
    class About(FullGraphMethod.About):
        claim = ("(Ai et al., PVLDB 2024: its GNN tensor parallelism, not its decoupled training) load "
                 "balance: every rank aggregates the whole graph on an equal slice of the features, no halo, whatever "
                 "the partition's skew")

    # The recompute of `memory.checkpoint` switches layouts again (`layout_fwd_recompute`): there is
    # no halo to keep (`memory.checkpoint_halo`).
    applies = FullGraphMethod.applies - {"memory"} | {"memory.checkpoint", "memory.offload", "model.attention_dropout"}

    def make_aggregator(self):
        ctx = self.ctx
        if ctx.world == 1:  # one slice: every column, the whole graph; nothing to switch
            return HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute)
        return TensorParallelAggregator(ctx)

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """Every exchanged layer of width d: two layout switches forward (`layout_fwd`) and, where
            gradients flow, two backward (`layout_bwd`), each of P - 1 messages and calls. A switch moves
            the rank's n rows less its own slice one way and every other rank's rows of its slice the
            other; stated as n d (P - 1) / P each, which summed over ranks is exact when the slices are
            equal (P divides d) or the parts are (the error is sum_i (n_i - N/P)(d_i - d/P)). GAT adds the
            logits' all-gather (each rank's n x 2H to every
            other rank, `logits_fwd`) and its reverse (`logits_bwd`). Nothing depends on the edge cut."""
            from benchmarks.base.traffic import FLOAT, Transfer, exchanged_layers, grad_allreduce, world
            p = world(rank)
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank):
                messages = min(width, p) - 1 if width < p else p - 1  # a rank without columns sends none
                switch = rank.nodes * width * (p - 1) / p * FLOAT
                out.append(Transfer("layout_fwd", layer, 2 * switch, 2 * (p - 1), 2 * messages))
                if grad:
                    out.append(Transfer("layout_bwd", layer, 2 * switch, 2 * (p - 1), 2 * messages))
                heads = getattr(model.layers[layer], "heads", None)
                if heads:
                    logits = (p - 1) * rank.nodes * 2 * heads * FLOAT
                    out.append(Transfer("logits_fwd", layer, logits, p - 1, p - 1))
                    out.append(Transfer("logits_bwd", layer, logits, p - 1, p - 1))
            return out

        @classmethod
        def kept_halo_rows(cls, options, rank):
            """No halo: a layer holds its N x d/P slice (about a rank's rows at full width) in and out of
            the aggregation. GAT's softmax over all E edges and heads on every rank is the cost model's
            through `held_structure` (the edges a rank aggregates over)."""
            return rank.nodes

        @classmethod
        def held_structure(cls, options, rank):
            """The whole graph on every rank: P times a rank's part (the largest rank's, where the
            projection is given it: on the safe side)."""
            from benchmarks.base.traffic import world
            return rank.nodes * world(rank), rank.edges * world(rank)


