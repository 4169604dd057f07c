"""The aggregation interface every model is written against, and the exact halo implementation.

A model asks its aggregator for two things:
  - `propagate(h, norm, layer)`: a linear aggregation over each node's in-edges with constant edge
    weights (`gcn`: 1/sqrt(deg_u deg_v); `mean`: 1/deg_v), for GCN and SAGE;
  - `attention(z, att_src, att_dst, layer)`: GAT's multi-head attention, softmax over each node's
    in-edges.
Layers that project before aggregating call `propagate_linear(h, W, ...)` / `attention_linear`,
which default to projecting and then calling the two above; a method that keeps halo rows of the
layer *input* (DIGEST's stale representations) overrides them to project those rows with the
current weights.
A method decides where the source rows come from; `HaloAggregator` (used by `single`, `full_halo`
and the shared evaluation) fetches all halo rows in one all-to-all per layer.

Kernels (`kernel`, a top-level config key, passed to every `LocalAdjacency` a rank builds: the
rank's context builds its adjacency with the run's kernel, and adjacencies derived from it take
`adj.kernel`):
  - `native` (default where it builds): the same products as `spmm`, by the CPU kernels of
    `benchmarks/core/native.c` (row-parallel CSR products with register tiles and prefetched source rows,
    all heads of an attention product in one pass, SDDMM), and dropout whose mask is a hash of (key,
    element), re-derived in backward rather than kept. fp32 CPU tensors only: anything else (fp64 in
    gradcheck, CUDA) takes `spmm`'s path. A run whose machine cannot build it runs `spmm`, one line
    saying so (`runner.ran_kernel`).
  - `spmm`: sum/mean aggregation is a CSR sparse matmul (int32 indices) inside a custom
    autograd function whose backward multiplies by a precomputed transposed CSR; attention weights
    the CSR per head (`EdgeSpMM`). This keeps only the adjacency for backward (no E x d message
    tensor) and is several times faster than gather + scatter on CPU (docs/measurement.md, "Aggregation kernel").
  - `messages`: what PyG's default path does: gather the source row of every edge
    (E x F; E x H x C for attention), scale it by the edge weight, scatter-add it into its
    destination (`index_add`), all under plain autograd, so attention keeps its E x H x C messages
    for backward. Same results up to float order. Not SAR's papers' vanilla: DGL fuses its builtin
    `copy_u`/`u_mul_e` + `sum`/`mean` into one g-SpMM (dmlc/dgl python/dgl/core.py), as `spmm`
    does (docs/sar.md, "Which baseline").
"""
from __future__ import annotations

import functools
import hashlib
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from benchmarks.core import native
from benchmarks.core.comm import Channel, Comm
from benchmarks.core.recompute import Recompute
from benchmarks.base.errors import choose
from benchmarks.core.graph import edge_rows

warnings.filterwarnings("ignore", message=".*[Ss]parse (CSR tensor support|invariant checks).*")


KERNELS = ("native", "spmm", "messages")


def csr(indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, shape) -> torch.Tensor:
    return torch.sparse_csr_tensor(indptr, indices, values, shape)


class _SpMM(torch.autograd.Function):
    """out = A @ X with backward dX = A^T @ dOut, A^T precomputed (A is constant). `A` and `At` are
    torch CSR tensors (`spmm`) or (indptr, indices, values) triples for `native.spmm`."""

    @staticmethod
    def forward(ctx, A, At, X):
        ctx.At = At
        return native.spmm(*A, X) if isinstance(A, tuple) else A @ X

    @staticmethod
    def backward(ctx, grad):
        At = ctx.At
        return None, None, native.spmm(*At, grad) if isinstance(At, tuple) else At @ grad.contiguous()


class EdgeSpMM(torch.autograd.Function):
    """Multi-head attention aggregation out[v,h] = sum_e alpha[e,h] * z[src_e,h], without ever
    materialising the E x H x C message tensor: forward is one CSR matmul per head, backward is a
    transposed CSR matmul for dz and a sampled dense-dense product (SDDMM) for dalpha."""

    @staticmethod
    def forward(ctx, alpha, z, adj):
        ctx.adj = adj
        ctx.save_for_backward(alpha, z)
        return head_spmm(adj, alpha, z)

    @staticmethod
    def backward(ctx, grad):
        alpha, z = ctx.saved_tensors
        adj = ctx.adj
        grad_alpha = grad_z = None
        if ctx.needs_input_grad[1]:
            grad_z = head_spmm_t(adj, alpha, grad)
        if ctx.needs_input_grad[0]:
            grad_alpha = head_sddmm(adj, grad, z)
        return grad_alpha, grad_z, None


class EdgeSoftmax(torch.autograd.Function):
    """`native`'s GAT softmax, fused: alpha = softmax over each destination's in-edges of
    LeakyReLU(el[src] + er[dst]). It keeps el, er and alpha (one float per edge and head, which the
    weighted sum keeps anyway) where torch's path keeps four; backward recomputes the LeakyReLU's side
    from el and er, sums the logits' gradient by destination (er's) and, through A^T, by source (el's)."""

    @staticmethod
    def forward(ctx, el, er, adj, slope: float):
        alpha = native.edge_softmax(adj.indptr32, adj.indices32, el, er, slope)
        ctx.save_for_backward(el, er, alpha)
        ctx.adj, ctx.slope = adj, slope
        return alpha

    @staticmethod
    def backward(ctx, dalpha):
        el, er, alpha = ctx.saved_tensors
        adj = ctx.adj
        dx, der = native.edge_softmax_backward(adj.indptr32, adj.indices32, el, er, alpha, dalpha, ctx.slope)
        return native.gather_sum(adj.t_indptr32, adj.t_perm32, dx), der, None, None


# Multi-head CSR kernels, no autograd: one native CSR call per head. Measured against one call on a
# block-diagonal (n H x m H) CSR (heads as interleaved rows, indices built once): the per-head calls
# were as fast or faster on CPU (E = 1M, H = 4, C = 64) and need no E x H index copies; the Python
# loop over H costs microseconds.
def head_spmm(adj: "LocalAdjacency", alpha: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """out[v, h] = sum over in-edges e = (u, v) of alpha[e, h] z[u, h]; [num_rows, H, C]."""
    if adj.native(alpha, z):
        return native.head_spmm(adj.indptr32, adj.indices32, alpha, z)
    return torch.stack([adj.with_values(alpha[:, h].contiguous()) @ z[:, h].contiguous()
                        for h in range(z.shape[1])], 1)


def head_spmm_t(adj: "LocalAdjacency", alpha: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The transpose: out[u, h] = sum over out-edges e = (u, v) of alpha[e, h] g[v, h]; [num_cols, H, C]."""
    if adj.native(alpha, g):
        return native.head_spmm(adj.t_indptr32, adj.t_indices32, alpha, g, adj.t_perm32)
    return torch.stack([adj.with_values(alpha[adj.t_perm, h].contiguous(), transposed=True) @ g[:, h].contiguous()
                        for h in range(g.shape[1])], 1)


def head_sddmm(adj: "LocalAdjacency", g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Sampled dense-dense product: out[e, h] = g[v, h] . z[u, h] for every edge e = (u, v); [nnz, H]."""
    if adj.native(g, z):
        return native.head_sddmm(adj.indptr32, adj.indices32, g, z)
    pattern = adj.with_values(torch.zeros(adj.nnz, dtype=g.dtype, device=g.device))
    return torch.stack([torch.sparse.sampled_addmm(pattern, g[:, h].contiguous(), z[:, h].t().contiguous(),
                                                   beta=0.0).values() for h in range(g.shape[1])], 1)


def in_fp32(kernel):
    """An aggregation kernel (a `LocalAdjacency` method) run in at least fp32 whatever the autocast
    around it (`precision`): its half-precision tensor arguments are cast to fp32 (fp32 and fp64 stay
    as they are: gradcheck runs in fp64) and autocast is off inside (CPU's sparse CSR kernels have
    no bf16, and fp32 sums keep the normalisation exact); rows exchanged before it may travel in bf16."""

    @functools.wraps(kernel)
    def run(self, *args):
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
        with torch.autocast(device, enabled=False):
            return kernel(self, *(a.float() if isinstance(a, torch.Tensor) and a.dtype in HALF else a for a in args))

    return run


HALF = (torch.float16, torch.bfloat16)


class LocalAdjacency:
    """A rank's in-edges as CSR over columns [local nodes | halo nodes], the transposed structure,
    and the normalised matrices built on first use. Shared by every aggregator on the rank.

    `edge_scale` (optional, one factor per edge in CSR order) multiplies the normalised weights of
    the linear aggregations (`spmm`, `propagate`): an estimator's correction (deg_v / sampled_v for
    neighbour sampling, GraphSAINT's 1 / alpha_uv, Cluster-GCN's diagonal enhancement, 1/p on a
    sampled halo). Attention has no constant edge weights to scale, so an adjacency with a scale
    refuses `attention` unless built with `attention_ignores_scale=True`, which says that GAT's
    softmax runs over the edges present, unscaled (what the samplers do: the softmax over sampled
    in-edges is their estimate of the full one)."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, row_deg: torch.Tensor, col_deg: torch.Tensor,
                 edge_scale: torch.Tensor | None = None, attention_ignores_scale: bool = False,
                 kernel: str = "spmm", col_ids: torch.Tensor | None = None, row_ids: torch.Tensor | None = None):
        self.kernel = choose("kernel", kernel, KERNELS)
        self.num_rows, self.num_cols = indptr.numel() - 1, col_deg.numel()
        # The dataset id of every column and row (`Part.node_ids`; None: an index is its id; rows default
        # to the first columns, [local | halo]): what keys a per-edge draw (`model.attention_dropout`) by
        # the edge, not by its layout.
        self.col_ids = col_ids
        self.row_ids = row_ids if row_ids is not None or col_ids is None else col_ids[:self.num_rows]
        self.nnz = indices.numel()
        self.indptr = indptr.long()  # int64 offsets, for segment reductions
        self.indptr32, self.indices32 = indptr.int(), indices.int()
        # Global degrees (self-loop included) of destinations and of source columns.
        self.row_deg, self.col_deg = row_deg.to(torch.float32), col_deg.to(torch.float32)
        self.edge_scale, self.attention_ignores_scale = edge_scale, attention_ignores_scale
        # A^T in CSR: int32, 12 bytes an edge with its permutation. The int64 edge lists (`src`, `dst`,
        # `t_perm`: 24 bytes an edge) are made on first use and kept only by the paths that use them
        # every step (`messages`, `spmm`'s attention): at ogbn-products' size they are 0.7 GiB a rank.
        src = indices.long()
        t_perm = torch.argsort(src, stable=True)  # CSR order of A^T
        counts = torch.bincount(src, minlength=self.num_cols)
        self.t_indptr32 = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]).int()
        self.t_indices32 = edge_rows(indptr)[t_perm].int()
        self.t_perm32 = t_perm.int()
        del src, t_perm, counts
        self._matrices = {}

    @functools.cached_property
    def src(self) -> torch.Tensor:
        """Each edge's source column (int64), kept once made."""
        return self.indices32.long()

    @functools.cached_property
    def dst(self) -> torch.Tensor:
        """Each edge's destination row (int64), kept once made."""
        return edge_rows(self.indptr)

    @functools.cached_property
    def t_perm(self) -> torch.Tensor:
        """The position in A of each entry of A^T, in A^T's CSR order (int64), kept once made."""
        return self.t_perm32.long()

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) made for a one-off use (building weights, a method's sub-adjacencies), not kept."""
        return self.indices32.long(), edge_rows(self.indptr)

    def native(self, *tensors: torch.Tensor) -> bool:
        """Whether this call goes through the native kernels (`native.usable`: fp32 on the CPU)."""
        return self.kernel == "native" and native.usable(*tensors)

    def with_values(self, values: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        if transposed:
            return csr(self.t_indptr32, self.t_indices32, values, (self.num_cols, self.num_rows))
        return csr(self.indptr32, self.indices32, values, (self.num_rows, self.num_cols))

    def edge_weights(self, norm: str) -> torch.Tensor:
        src, dst = self.edges()
        deg_dst = self.row_deg[dst]
        if norm == "gcn":
            w = (deg_dst * self.col_deg[src]).rsqrt()
        elif norm == "mean":
            w = deg_dst.clamp(min=1).reciprocal()
        else:
            raise ValueError(f"unknown normalisation '{norm}'; choose one of: gcn, mean")
        return w if self.edge_scale is None else w * self.edge_scale

    def matrix(self, norm: str):
        """(A, A^T) with the given edge normalisation as torch CSR tensors, built once."""
        if norm not in self._matrices:
            w = self.edge_weights(norm)
            self._matrices[norm] = (self.with_values(w),
                                    self.with_values(w[self.t_perm32].contiguous(), transposed=True))
        return self._matrices[norm]

    def native_matrix(self, norm: str):
        """(A, A^T) as (indptr, indices, values) triples for `native.spmm`, built once."""
        key = ("native", norm)
        if key not in self._matrices:
            w = self.edge_weights(norm).float().contiguous()
            self._matrices[key] = ((self.indptr32, self.indices32, w),
                                   (self.t_indptr32, self.t_indices32, w[self.t_perm32].contiguous()))
        return self._matrices[key]

    def weights(self, norm: str) -> torch.Tensor:
        """The normalised edge weights in CSR order, built once (the `messages` kernel's)."""
        key = ("w", norm)
        if key not in self._matrices:
            self._matrices[key] = self.edge_weights(norm)
        return self._matrices[key]

    @in_fp32
    def spmm(self, norm: str, x: torch.Tensor) -> torch.Tensor:
        """Differentiable A @ x with the given normalisation, by this adjacency's kernel."""
        if self.kernel == "messages":
            w = self.weights(norm).view(-1, *([1] * (x.dim() - 1)))
            return self.messages(x, w, self.src, self.dst, self.num_rows)  # w is constant: E x F freed after
        A, At = self.native_matrix(norm) if self.native(x) else self.matrix(norm)
        return _SpMM.apply(A, At, x)

    @in_fp32
    def spmm_t(self, norm: str, g: torch.Tensor) -> torch.Tensor:
        """A^T @ g (no autograd): the gradient of `spmm` with respect to its source rows."""
        if self.kernel == "messages":
            w = self.weights(norm).view(-1, *([1] * (g.dim() - 1)))
            return self.messages(g, w, self.dst, self.src, self.num_cols)
        if self.native(g):
            return native.spmm(*self.native_matrix(norm)[1], g)
        return self.matrix(norm)[1] @ g.contiguous()

    @in_fp32
    def weighted_sum(self, alpha: torch.Tensor, z_src: torch.Tensor) -> torch.Tensor:
        """Differentiable out[v, h] = sum_e alpha[e, h] z_src[u, h] by this adjacency's kernel:
        `spmm` never materialises the E x H x C messages; `messages` gathers them, weights them and
        scatter-adds them under autograd, which keeps them (and alpha) for backward, as PyG does."""
        if self.kernel == "messages":
            return self.messages(z_src, alpha.unsqueeze(-1), self.src, self.dst, self.num_rows)
        return EdgeSpMM.apply(alpha, z_src, self)

    @staticmethod
    def messages(x: torch.Tensor, w: torch.Tensor, frm: torch.Tensor, to: torch.Tensor, rows: int) -> torch.Tensor:
        """The `messages` kernel: gather x's row `frm[e]` for every edge (the E x ... message tensor),
        scale it by w[e], scatter-add it into row `to[e]` of a `rows`-row result."""
        return x.new_zeros((rows, *x.shape[1:])).index_add(0, to, x.index_select(0, frm) * w)

    def logits(self, z_src: torch.Tensor, er: torch.Tensor, att_src, negative_slope: float) -> torch.Tensor:
        """GAT's edge logits LeakyReLU(a_src . z_u + er_v), [nnz, H]."""
        el = (z_src * att_src).sum(-1)  # [num_cols, H]
        return F.leaky_relu(el.index_select(0, self.src) + er.index_select(0, self.dst), negative_slope)

    def segment(self, values: torch.Tensor, reduce: str) -> torch.Tensor:
        """Reduce per-edge values over each destination's in-edges (empty rows: 0 for sum, -inf for max)."""
        return torch.segment_reduce(values, reduce, offsets=self.indptr, axis=0)

    def edge_ids(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each edge's (destination, source) dataset ids, in CSR order."""
        dst = self.dst if self.row_ids is None else self.row_ids.index_select(0, self.dst)
        return dst, self.src if self.col_ids is None else self.col_ids.index_select(0, self.src)

    @in_fp32
    def attention(self, z_src: torch.Tensor, z_dst: torch.Tensor, att_src, att_dst, negative_slope: float,
                  keep: torch.Tensor | None = None):
        """GAT aggregation given all source rows (z_src, [num_cols, H, C]) and destination rows.
        `keep`: GAT's attention dropout, factors of the normalised coefficients ([E, H], CSR order;
        `Draws.attention_keep`)."""
        if self.edge_scale is not None and not self.attention_ignores_scale:
            raise ValueError("this adjacency has an edge_scale, which attention cannot apply; build it with "
                             "attention_ignores_scale=True to softmax over its edges unscaled")
        if self.native(z_src, z_dst):
            el, er = (z_src * att_src).sum(-1), (z_dst * att_dst).sum(-1)
            alpha = EdgeSoftmax.apply(el, er, self, negative_slope)
        else:
            e = self.logits(z_src, (z_dst * att_dst).sum(-1), att_src, negative_slope)
            # Softmax per destination; the max shift is a constant for the gradient, so it is detached.
            ex = torch.exp(e - self.segment(e.detach(), "max").index_select(0, self.dst))
            alpha = ex / self.segment(ex, "sum").index_select(0, self.dst)
        return self.weighted_sum(alpha if keep is None else alpha * keep, z_src)


class HaloPlan:
    """Which of my rows each peer needs (send side) and how many rows each peer sends me.

    The rows I send peer q are in q's halo order (its halo ids, sorted by global id), so q places
    them by position alone. Every plan keeps that rule: the partition builds it so, and
    `keep_halo` restricts both sides with the same rule on global ids, keeping the order."""

    def __init__(self, send_idx: torch.Tensor, send_counts: list[int], recv_counts: list[int]):
        self.send_idx, self.send_counts, self.recv_counts = send_idx, send_counts, recv_counts


def keep_halo(part, adj: LocalAdjacency, plan: HaloPlan, keep: Callable[[torch.Tensor], torch.Tensor],
              edge_scale: torch.Tensor | None = None,
              attention_ignores_scale: bool = False) -> tuple[LocalAdjacency, HaloPlan]:
    """The rank's adjacency and plan with only the halo nodes `keep` selects (a Bernoulli sample of
    the halo, a fixed subset, none at all).

    `keep(node_ids) -> bool mask` must be a deterministic function of the node's dataset id
    (`Part.node_ids`; and of what it closes over, such as seed and epoch: `keep_with_probability`), the
    same on every rank and in every layout: the receiver applies it to its halo's ids, each sender to
    the ids of the rows it sends, and the
    two agree without communicating because the rows a rank sends a peer are in that peer's halo order
    (`HaloPlan`). Returns `keep_halo_rows`'s result for those two masks."""
    ids = part.node_ids
    return keep_halo_rows(part, adj, plan, keep(ids[part.num_local:]), keep(ids.index_select(0, plan.send_idx)),
                          edge_scale, attention_ignores_scale)


def keep_halo_rows(part, adj: LocalAdjacency, plan: HaloPlan, kept_halo: torch.Tensor, kept_sent: torch.Tensor,
                   edge_scale: torch.Tensor | None = None,
                   attention_ignores_scale: bool = False) -> tuple[LocalAdjacency, HaloPlan]:
    """The rank's adjacency and plan restricted by two masks: `kept_halo` (one per halo column, in
    halo order) and `kept_sent` (one per row of `plan.send_idx`). A rule that is not a function of the
    global id alone (BNS-GCN's exact count per pair: whether a node is kept depends on the other
    nodes of its pair) computes the masks itself; sender and receiver must still select the same
    rows of every pair (the rows a rank sends a peer are in that peer's halo order, `HaloPlan`).
    Returns (adjacency over columns [local | kept halo], edges from dropped halo columns removed, row
    order kept; plan sending only the kept rows).

    Normalisation: degrees stay the global ones (`adj`'s), so keeping every halo node gives `adj`
    back and keeping none gives the full aggregation without the cut edges' terms; a caller that
    wants an estimate of the full aggregation passes `edge_scale` (one factor per edge of `adj`,
    e.g. 1/p on halo edges; default `adj`'s own), restricted here to the kept edges."""
    n = part.num_local
    kept_col = torch.cat([kept_halo.new_ones(n), kept_halo])
    new_col = torch.cumsum(kept_col, 0) - 1
    kept_edge = kept_col.index_select(0, adj.src)
    counts = torch.bincount(adj.dst[kept_edge], minlength=adj.num_rows)
    scale = adj.edge_scale if edge_scale is None else edge_scale
    restricted = LocalAdjacency(torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]),
                                new_col.index_select(0, adj.src[kept_edge]), adj.row_deg, adj.col_deg[kept_col],
                                None if scale is None else scale[kept_edge], attention_ignores_scale, adj.kernel,
                                None if adj.col_ids is None else adj.col_ids[kept_col])
    return restricted, HaloPlan(plan.send_idx[kept_sent],
                                [int(k.sum()) for k in kept_sent.split(plan.send_counts)],
                                [int(k.sum()) for k in kept_halo.split(plan.recv_counts)])


def keyed_hash(ids: torch.Tensor, *key) -> torch.Tensor:
    """A pseudo-random value in [0, 2^31) per global id, a different function per `key` (seed, epoch,
    ...), computed alike on every rank and device: a hash of the id, not a random stream (ranks would
    have to draw for every node of the graph to agree)."""
    salt = int.from_bytes(hashlib.blake2b(":".join(map(str, key)).encode(), digest_size=4).digest(), "little")
    low31 = (1 << 31) - 1
    h = (ids ^ salt) & low31
    for odd in (0x6B43A9B5, 0x2C1B3C6D):  # multipliers below 2^31: products stay inside int64
        h = (h * odd) & low31
        h = h ^ (h >> 15)
    return h


def keep_with_probability(p: float, seed: int, epoch: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A `keep_halo` rule keeping each node independently with probability p, a different draw per
    (seed, epoch) and the same on every rank (`keyed_hash`)."""

    def keep(ids: torch.Tensor) -> torch.Tensor:
        return keyed_hash(ids, seed, epoch).double() / (1 << 31) < p

    return keep


class Replay:
    """Rows a checkpointed forward fetched, handed back to its recompute in backward
    (`memory.checkpoint`: the rank's `Recompute`, handed to it) instead of fetched again:
    always for fetches with side effects (a stale table that a sync step replaces, a posted
    exchange), and for plain halo exchanges under `memory.checkpoint_halo=keep` or quantised
    messages (`comm.quantize`: a second exchange would round differently, and the recompute must see
    the forward's rows). Each kept row set is released at its replay."""

    def __init__(self, recompute: Recompute, always: bool):
        self.recompute, self.always, self.kept = recompute, always, {}

    def __call__(self, comm: Comm, key, fetch: Callable[[], torch.Tensor]) -> torch.Tensor:
        recompute = self.recompute
        if recompute.active and key in self.kept:
            return self.kept.pop(key)
        rows = fetch()
        keep = self.always or recompute.halo == "keep" or comm.codec is not None
        if recompute.halo and not recompute.active and keep:
            self.kept[key] = rows.detach()
        return rows


class _HaloExchange(torch.autograd.Function):
    """`halo_exchange`'s autograd: forward `exchange_rows` (or, in a checkpoint's recompute, the rows
    `replay` kept), backward `return_rows` of the halo gradients."""

    @staticmethod
    def forward(ctx, h, plan: HaloPlan, comm: Comm, categories: tuple[str, str], layer, replay: Replay | None):
        ctx.plan, ctx.comm, ctx.layer, ctx.num_rows = plan, comm, layer, h.shape[0]
        ctx.backward_category = categories[1]
        if replay is None:
            return exchange_rows(h, plan, comm, categories[0], layer)
        return replay(comm, layer, lambda: exchange_rows(h, plan, comm, categories[0], layer))

    @staticmethod
    def backward(ctx, grad):
        return return_rows(grad, ctx.plan, ctx.comm, ctx.backward_category, ctx.layer, ctx.num_rows), \
            None, None, None, None, None


class _HaloTranspose(torch.autograd.Function):
    """`halo_transpose`'s autograd: forward `return_rows`, backward `exchange_rows` of the owners'
    gradients (each halo row's gradient is its owner row's)."""

    @staticmethod
    def forward(ctx, halo, plan: HaloPlan, comm: Comm, num_rows: int, categories: tuple[str, str], layer):
        ctx.plan, ctx.comm, ctx.layer, ctx.backward_category = plan, comm, layer, categories[1]
        return return_rows(halo, plan, comm, categories[0], layer, num_rows)

    @staticmethod
    def backward(ctx, grad):
        return exchange_rows(grad, ctx.plan, ctx.comm, ctx.backward_category, ctx.layer), None, None, None, None, None


def halo_exchange(h: torch.Tensor, plan: HaloPlan, comm: Comm, categories: tuple[str, str] = ("halo_fwd", "halo_bwd"),
                  layer=None, replay: Replay | None = None) -> torch.Tensor:
    """The halo exchange, differentiable: my halo rows (in halo order, `HaloPlan`) gathered from
    their owners' `h`. Its backward is `halo_transpose`: each halo row's gradient goes back to its
    owner and is added into the row it came from (a row several peers hold gets the sum).
    `categories`: (forward, backward) traffic; `replay` hands a checkpoint's recompute the forward's
    rows (`Replay`)."""
    return _HaloExchange.apply(h, plan, comm, categories, layer, replay)


def halo_transpose(halo: torch.Tensor, plan: HaloPlan, comm: Comm, num_rows: int,
                   categories: tuple[str, str] = ("halo_bwd", "halo_fwd"), layer=None) -> torch.Tensor:
    """The transpose of `halo_exchange`, differentiable: `halo` holds one row per halo node (in halo
    order), such as a partial aggregate computed for a node another rank owns; each goes to its
    owner, which sums what every peer sent for each of its `num_rows` rows (rows no peer holds are
    zero). Its backward is `halo_exchange` of the owners' gradients. For a method that aggregates
    where the edges are and sends sums to the destination's owner (the reverse of fetching sources).
    `categories`: (forward, backward) traffic; by default the exchange's names in reverse, since the
    forward moves what `halo_exchange`'s backward moves."""
    return _HaloTranspose.apply(halo, plan, comm, num_rows, categories, layer)


def exchange_rows(h: torch.Tensor, plan: HaloPlan, comm: Comm, category: str, layer) -> torch.Tensor:
    """The halo rows of `h` (rows peers need sent, my halo rows received, in halo order); no autograd.
    `h`'s rows are the rank's own, so a lossy codec rounds them keyed by node (`Comm.all_to_all`'s ids)."""
    return comm.all_to_all(h.index_select(0, plan.send_idx), plan.send_counts, plan.recv_counts, category, layer,
                           ids=sent_ids(comm, plan))


def return_rows(halo: torch.Tensor, plan: HaloPlan, comm: Comm, category: str, layer, num_rows: int) -> torch.Tensor:
    """The reverse of `exchange_rows`: each halo row sent to its owner and added into the row it came
    from; `num_rows` rows; no autograd."""
    back = comm.all_to_all(halo.contiguous(), plan.recv_counts, plan.send_counts, category, layer)
    return back.new_zeros((num_rows, *back.shape[1:])).index_add_(0, plan.send_idx, back)


def start_exchange_rows(h: torch.Tensor, plan: HaloPlan, channel: Channel, category: str, layer, slot: int = 0):
    """`exchange_rows` posted on a method's channel (`Comm.channel`) without waiting: a `comm.Pending`
    whose `wait()` returns the rows."""
    return channel.all_to_all_start(h.index_select(0, plan.send_idx), plan.send_counts, plan.recv_counts, category,
                                    layer, slot, ids=sent_ids(channel.comm, plan))


def sent_ids(comm: Comm, plan: HaloPlan) -> torch.Tensor | None:
    """The dataset ids of the rows `plan` sends, for a lossy codec's keyed rounding; None without a
    codec (no lookup on every exchange of a run that sends rows as they are)."""
    return None if comm.codec is None else comm.draws.ids_of(plan.send_idx)


class _AllReduceSum(torch.autograd.Function):
    """y = sum over ranks of x, on every rank; the gradient of a sum is the sum of the gradients."""

    @staticmethod
    def forward(ctx, x, comm: Comm, category: str):
        ctx.comm, ctx.category = comm, category
        return comm.all_reduce(x.clone(), category)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad.clone(), ctx.category), None, None


class Aggregator:
    """The interface models are written against. Subclasses provide `propagate` and `attention`;
    `node_sum` (sums over every node of the graph, for batch-norm statistics) and `dropout` are shared."""

    comm: Comm

    def dropout(self, h: torch.Tensor, p: float, training: bool, layer: int) -> torch.Tensor:
        """The model's dropout of layer `layer`'s input rows, keyed by node (`draws.Draws`): h's rows
        are the rank's own unless `row_ids` says otherwise. An aggregator whose halo rows are dropped
        out by their receiver (PipeGCN's reference) overrides it to keep the undropped rows it sends."""
        return self.comm.draws.dropout(h, p, training, ("input", layer), self.row_ids(layer))

    def row_ids(self, layer: int) -> torch.Tensor | None:
        """The dataset ids of the rows layer `layer` is given (None: the rank's own rows, in order).
        A sampled block or subgraph names its own."""
        return None

    def propagate(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        raise NotImplementedError

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2,
                  dropout: float = 0.0) -> torch.Tensor:
        """GAT's aggregation; `dropout`: of the normalised coefficients, keyed by edge (training only,
        passed only where the method applies `model.attention_dropout`)."""
        raise NotImplementedError

    def targets(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """The rows of `h` whose outputs this layer computes (SAGE's root term): every row in
        full-graph aggregation; in a sampled block, its destinations (the first rows of its sources)."""
        return h

    def propagate_linear(self, h: torch.Tensor, weight: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        """propagate(h W^T): projecting first narrows the rows that travel."""
        return self.propagate(F.linear(h, weight), norm, layer)

    def attention_linear(self, h: torch.Tensor, weight: torch.Tensor, heads: int, att_src, att_dst, layer: int,
                         negative_slope: float = 0.2, dropout: float = 0.0) -> torch.Tensor:
        """attention(z) with z = h W^T viewed as [N, heads, C]."""
        z = F.linear(h, weight).view(h.shape[0], heads, weight.shape[0] // heads)  # also for 0 rows
        return self.attention(z, att_src, att_dst, layer, negative_slope, **({"dropout": dropout} if dropout else {}))

    def node_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of per-rank partial sums, differentiable (backward all-reduces the gradient)."""
        if self.comm.world == 1:
            return t
        return _AllReduceSum.apply(t, self.comm, "norm")


class HaloAggregator(Aggregator):
    """Exact propagation-based aggregation: one all-to-all of every halo row of `plan` per layer
    (forward), its reverse in backward. Pairs with nothing to exchange send nothing
    (`Comm.all_to_all`), so a plan from `keep_halo` that keeps no halo node costs no communication.
    With one rank the halo is empty and this is the whole-graph oracle.
    `categories` name the forward and backward traffic: `("eval", "eval")` keeps the shared
    evaluation apart from training, LLCG's correction steps use their own."""

    def __init__(self, adj: LocalAdjacency, plan: HaloPlan, comm: Comm,
                 categories: tuple[str, str] = ("halo_fwd", "halo_bwd"), *, recompute: Recompute):
        self.adj, self.plan, self.comm, self.categories = adj, plan, comm, categories
        # the rank's checkpointing state (`ctx.recompute`), required: an aggregator that forgot it would
        # fetch twice in a checkpoint's recompute
        self.recompute = recompute
        self.replay = Replay(self.recompute, always=False)

    def sources(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """[local rows | halo rows], the column space of the local adjacency."""
        if self.comm.world == 1:
            return h
        return torch.cat([h, halo_exchange(h, self.plan, self.comm, self.categories, layer, self.replay)])

    def propagate(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        return self.adj.spmm(norm, self.sources(h, layer))

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2, dropout: float = 0.0):
        n, heads, ch = z.shape
        z_src = self.sources(z.reshape(n, heads * ch), layer).view(-1, heads, ch)
        keep = self.comm.draws.attention_keep(self.adj, heads, dropout, layer)  # keyed by edge, not layout
        return self.adj.attention(z_src, z, att_src, att_dst, negative_slope, keep)
