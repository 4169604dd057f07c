"""`cagnet`: CAGNET's 1D algorithm (Tripathy, Yelick, Buluç, "Reducing Communication in Graph
Neural Network Training", SC'20, arXiv 2005.03300; code github.com/PASSIONLab/CAGNET, branch
master at c820812: `gcn_distr.py`, the 1D algorithm, functions `broad_func`, `GCNFunc` and
`oned_partition`; `gcn_distr_15d.py` for 1.5D; README.md). The paper's text was not available
here: the algorithm is as that code implements it.

The adjacency is split in block rows by the partition: rank i holds A_i,: (its rows' in-edges),
cut into column blocks A_ij by the owner j of the source. Every layer runs P stages; in stage j,
rank j broadcasts its whole block H_j (all its rows, not only those other ranks need) and every
rank accumulates A_ij H_j, so out_i = sum_j A_ij H_j. Sparsity-oblivious: the volume does not
depend on the edge cut.

Backward is broadcast-based, as CAGNET's `GCNFunc.backward` (`ag = broad_func(..., grad_output,
...)`): stage j broadcasts rank j's output gradient G_j and rank i accumulates (A^T)_ij G_j. CAGNET
reuses A there because its normalised GCN adjacency is symmetric. Here the graph's structure is
symmetric (the graph policy makes it undirected), so (A^T)_ij has the sparsity of rank i's own
block A_ij, with each edge weighted as its reverse edge: the same weight for `gcn`
(1/sqrt(deg_u deg_v)), 1/deg of the column node for SAGE's `mean` (`_TransposedWeights`).

GAT (not in CAGNET, which trains GCN only): the broadcast blocks give each rank every source row,
so the attention runs over the rank's whole block row at once (softmax across every block). The
blocks are kept for backward (the layer's N rows on every rank), and backward returns each block's
source-row gradients to their owner (a reduce per block, `reduce_bwd`): the attention weights live
with the destinations, so the transposed product cannot be formed from a broadcast of gradients.

Broadcasts are flat: the root sends its block to every other rank, point to point (one message per
receiver), through `Comm` so bytes are counted (P - 1 copies of the block at the root) and
`comm.quantize` applies. CAGNET calls `torch.distributed.broadcast` (a tree or ring under NCCL):
the same bytes reach every rank; the root's link carries them P - 1 times here.

Left out: the 1.5D algorithm (`gcn_distr_15d.py`, replication factor c). It needs P/c block rows,
each replicated on c ranks (dense work replicated, an all-reduce in each replica row), where this
runtime gives each rank its own part; docs/cagnet.md says what it would take. 2D and 3D
likewise.
"""
from __future__ import annotations

import torch

from benchmarks.core.aggregation import Aggregator, HaloAggregator, LocalAdjacency
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.run.method import RankContext

CATEGORIES = ("bcast_fwd", "bcast_bwd", "reduce_bwd")


class _TransposedWeights(LocalAdjacency):
    """A block of A^T on the structure of a block of A (the graph is undirected), sharing that
    block's index arrays: row u, column v carries the weight A gives the edge v <- u, 1/deg_v for
    `mean` (v the column). `gcn`'s weights are symmetric: its blocks serve as they are."""

    def __init__(self, block: LocalAdjacency):
        self.__dict__.update(block.__dict__)  # the structure, shared; the weighted matrices are its own
        self._matrices = {}

    def edge_weights(self, norm: str) -> torch.Tensor:
        if norm == "mean":
            return self.col_deg[self.src].clamp(min=1).reciprocal()
        return super().edge_weights(norm)


class BlockRow:
    """Rank i's block row A_i,: as column blocks: `blocks[j]` is a LocalAdjacency over (my rows x
    all n_j rows of rank j); `transposed(norm)` the blocks (A^T)_ij on the same structure; `whole()`
    the block row over the N global columns at once (GAT's, built on first use). Degrees are
    global (the partition's)."""

    def __init__(self, ctx: RankContext):
        part, adj = ctx.part, ctx.adj
        self.rank, self.world = ctx.rank, ctx.world
        self.offsets = [int(o) for o in part.offsets]
        self.rows = [self.offsets[q + 1] - self.offsets[q] for q in range(self.world)]
        n = part.num_local
        src = self._global_sources(part, adj)
        owner = torch.bucketize(src, part.offsets[1:].to(src.device), right=True)
        row_deg = part.deg[:n]
        self.blocks = {}
        for j in range(self.world):
            keep = owner == j
            indptr = torch.zeros(n + 1, dtype=torch.int64, device=src.device)
            indptr[1:] = torch.cumsum(torch.bincount(adj.dst[keep], minlength=n), 0)
            cols = src[keep] - self.offsets[j]
            col_deg = torch.ones(self.rows[j], dtype=part.deg.dtype, device=src.device)
            col_deg[cols] = part.deg.index_select(0, adj.src[keep])
            self.blocks[j] = LocalAdjacency(indptr, cols, row_deg, col_deg, kernel=adj.kernel)
        self._transposed, self._whole, self._part, self._adj = None, None, part, adj

    def _global_sources(self, part, adj: LocalAdjacency) -> torch.Tensor:
        """The global id of every in-edge's source (the part's columns are [local | halo])."""
        local = self.offsets[self.rank] + torch.arange(part.num_local, device=adj.src.device)
        return torch.cat([local, part.halo_ids]).index_select(0, adj.src)

    def transposed(self, norm: str) -> dict:
        if norm == "gcn":
            return self.blocks
        if self._transposed is None:
            self._transposed = {j: _TransposedWeights(block) for j, block in self.blocks.items()}
        return self._transposed

    def whole(self) -> LocalAdjacency:
        if self._whole is None:
            part, adj = self._part, self._adj
            src = self._global_sources(part, adj)
            col_deg = torch.ones(self.offsets[-1], dtype=part.deg.dtype, device=src.device)
            col_deg[src] = part.deg.index_select(0, adj.src)
            col_ids = torch.zeros(self.offsets[-1], dtype=part.node_ids.dtype, device=src.device)
            col_ids[src] = part.node_ids.index_select(0, adj.src)  # the dataset id of every column an edge reads
            self._whole = LocalAdjacency(adj.indptr, src, part.deg[:part.num_local], col_deg, kernel=adj.kernel,
                                         col_ids=col_ids, row_ids=part.node_ids[:part.num_local])
        return self._whole


class CagnetAggregator(Aggregator):
    """CAGNET 1D: every layer, P broadcast stages of whole blocks (`BlockRow`)."""

    def __init__(self, ctx: RankContext):
        self.comm, self.rank, self.world = ctx.comm, ctx.rank, ctx.world
        self.row = BlockRow(ctx)
        # Stages are blocking (CAGNET's 1D loop); a stage's transfers are posted together and each
        # ordered pair carries at most one message per stage, so one slot serves them all.
        self.channel = ctx.comm.channel("cagnet.stages", CATEGORIES)

    def broadcast(self, h: torch.Tensor, root: int, category: str, layer: int) -> torch.Tensor:
        """Stage `root`: rank `root`'s whole block (its `h`) on every rank, flat: the root sends it to
        each other rank (P - 1 messages, counted at the root); the root's own block is `h` itself."""
        empty = h.new_empty((0, *h.shape[1:]))
        if root == self.rank:
            sends = [self.channel.exchange(h, q, empty, q, category, layer) for q in range(self.world) if q != root]
            for transfer in sends:
                transfer.wait()
            return h
        block = h.new_empty((self.row.rows[root], *h.shape[1:]))
        return self.channel.exchange(empty, root, block, root, category, layer).wait()

    def reduce(self, g: torch.Tensor, category: str, layer: int) -> torch.Tensor:
        """The transpose of broadcasting every block: `g` holds a gradient for every global row; each
        block's rows go to their owner, which sums what every rank sent for its rows (P - 1 messages
        per rank, one to each other rank)."""
        offsets, rank = self.row.offsets, self.rank
        mine = g[offsets[rank]:offsets[rank + 1]].clone()
        received = []
        for r in range(1, self.world):
            to, frm = (rank + r) % self.world, (rank - r) % self.world
            recv = g.new_empty(mine.shape)
            received.append(self.channel.exchange(g[offsets[to]:offsets[to + 1]].contiguous(), to, recv, frm,
                                                  category, layer))
        for transfer in received:
            mine += transfer.wait()
        return mine

    def propagate(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        return _BroadcastSpMM.apply(h, self, norm, layer)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2, dropout: float = 0.0):
        n, heads, ch = z.shape
        z_src = _AllBlocks.apply(z.reshape(n, heads * ch), self, layer).view(-1, heads, ch)
        whole = self.row.whole()
        keep = self.comm.draws.attention_keep(whole, heads, dropout, layer)  # keyed by edge, as every layout
        return whole.attention(z_src, z, att_src, att_dst, negative_slope, keep)


class _BroadcastSpMM(torch.autograd.Function):
    """out_i = sum_j A_ij H_j, H_j broadcast by rank j in stage j; backward dH_i = sum_j (A^T)_ij G_j,
    G_j broadcast likewise. One remote block is resident at a time; nothing is saved but references
    to the constant blocks."""

    @staticmethod
    def forward(ctx, h, agg: CagnetAggregator, norm: str, layer: int):
        ctx.agg, ctx.norm, ctx.layer = agg, norm, layer
        return _stages(agg, agg.row.blocks, h.contiguous(), norm, "bcast_fwd", layer)

    @staticmethod
    def backward(ctx, grad):
        agg = ctx.agg
        return _stages(agg, agg.row.transposed(ctx.norm), grad.contiguous(), ctx.norm, "bcast_bwd",
                       ctx.layer), None, None, None


def _stages(agg: CagnetAggregator, blocks: dict, h: torch.Tensor, norm: str, category: str, layer: int):
    """sum over stages j of blocks[j] @ (rank j's h, broadcast)."""
    out = None
    for j in range(agg.world):
        block = agg.broadcast(h, j, category, layer)
        if blocks[j].nnz:
            part = blocks[j].spmm(norm, block)
            out = part if out is None else out.add_(part)
        del block
    if out is None:  # no in-edge at all (every node has a self-loop, so only for an empty part)
        out = torch.zeros((h.shape[0], *h.shape[1:]), dtype=torch.float32, device=h.device)
    return out


class _AllBlocks(torch.autograd.Function):
    """Every block, broadcast stage by stage and stacked in global row order ([N, width]); backward
    sends each block's gradient rows to their owner, which sums them (`reduce_bwd`)."""

    @staticmethod
    def forward(ctx, h, agg: CagnetAggregator, layer: int):
        ctx.agg, ctx.layer = agg, layer
        h = h.contiguous()
        return torch.cat([agg.broadcast(h, j, "bcast_fwd", layer) for j in range(agg.world)])

    @staticmethod
    def backward(ctx, grad):
        return ctx.agg.reduce(grad.contiguous(), "reduce_bwd", ctx.layer), None, None


class Method(FullGraphMethod):
    """The full-graph step, with CAGNET's 1D aggregation."""
    class About(FullGraphMethod.About):
        claim = ("(Tripathy, Yelick, Buluç, SC'20) predictable, cut-independent traffic: whole blocks broadcast each "
                 "layer, whatever the partition (1D; the paper's 1.5D/2D/3D variants cut it at large P)")

    # The recompute of `memory.checkpoint` broadcasts again (`bcast_fwd_recompute`): there is no
    # halo to keep (`memory.checkpoint_halo`).
    applies = FullGraphMethod.applies - {"memory"} | {"memory.checkpoint", "memory.offload", "model.attention_dropout"}

    def make_aggregator(self):
        ctx = self.ctx
        if ctx.world == 1:  # one block: the whole graph, nothing to broadcast
            return HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute)
        return CagnetAggregator(ctx)

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """Every exchanged layer: P stages, in each of which one rank sends its whole block (n rows at
            the layer's width) to the P - 1 others; counted at the root: (P - 1) n rows and P - 1 messages
            per rank and layer, and 2 (P - 1) calls (its P - 1 sends, and one receive in each other
            stage). Backward the same for the gradients (`bcast_bwd`); GAT instead returns every block's
            source gradients to its owner (`reduce_bwd`: the rank receives (P - 1) n rows, in P - 1
            messages and calls). Unlike the halo's, none of it depends on the edge cut."""
            from benchmarks.base.traffic import FLOAT, Transfer, attention, exchanged_layers, grad_allreduce, world
            p = world(rank)
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank):
                nbytes = (p - 1) * rank.nodes * width * FLOAT
                out.append(Transfer("bcast_fwd", layer, nbytes, 2 * (p - 1), p - 1))
                if grad and attention(model):
                    out.append(Transfer("reduce_bwd", layer, nbytes, p - 1, p - 1))
                elif grad:
                    out.append(Transfer("bcast_bwd", layer, nbytes, 2 * (p - 1), p - 1))
            return out

        @classmethod
        def kept_halo_rows(cls, options, rank):
            """GCN and SAGE keep no remote row for backward; one broadcast block (about a rank's rows) is
            resident at a time. (GAT keeps every block, P - 1 times that: the hook is not told the model.)"""
            return rank.nodes


