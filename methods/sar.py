"""`sar`: Sequential Aggregation and Rematerialization (Mostafa, MLSys 2022, arXiv 2111.06483).

Each layer aggregates over the rank's source shards one at a time: the local shard first, then in
ring rounds r = 1..P-1 the rows this rank needs from (rank - r) mod P, while sending what
(rank + r) mod P needs, folding each shard's partial aggregate into the output. At most one remote
shard plus `prefetch` shards in flight are resident. A custom autograd function keeps only local
inputs for backward:

- linear aggregations (GCN, SAGE mean): backward computes A_q^T g for every shard and sends it to
  the shard's owner (reverse ring), with no refetch;
- attention (GAT): forward is an online softmax across shards (running max, running sum, running
  weighted sum), so it equals the single-machine softmax; backward rematerialises: it refetches each
  remote shard, recomputes its logits and weights from the saved log-sum-exp, backpropagates and
  sends the source gradients home.

`sar.mode`: `sar` (the above), `sa` (sequential rounds under autograd: fetched rows stay in the
graph, no rematerialisation), `one_shot` (one halo all-to-all per layer, as `full_halo`), so the
paper's memory ablation can be reproduced.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.core.aggregation import Aggregator, HaloAggregator, LocalAdjacency, head_sddmm, head_spmm_t
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.run.method import RankContext
from benchmarks.base.options import option


class Shards:
    """The rank's in-edges split by the owner of their source node. Shard q is a LocalAdjacency over
    (local destinations x the rows of q this rank needs), so every kernel of the runtime applies."""

    def __init__(self, ctx: RankContext):
        part, adj = ctx.part, ctx.adj
        self.rank, self.world = ctx.rank, ctx.world
        n = part.num_local
        counts = part.recv_counts.tolist()
        starts = [n + sum(counts[:q]) for q in range(self.world)]
        starts[self.rank], counts[self.rank] = 0, n
        row_deg = part.deg[:n]
        self.adj: dict[int, LocalAdjacency] = {}
        src, dst = adj.edges()  # not kept on the rank's adjacency: the shards hold the edges from here
        for q in range(self.world):
            lo, size = starts[q], counts[q]
            keep = (src >= lo) & (src < lo + size)
            indptr = torch.zeros(n + 1, dtype=torch.int64, device=src.device)
            indptr[1:] = torch.cumsum(torch.bincount(dst[keep], minlength=n), 0)
            self.adj[q] = LocalAdjacency(indptr, src[keep] - lo, row_deg, part.deg[lo:lo + size],
                                         kernel=adj.kernel, col_ids=part.node_ids[lo:lo + size],
                                         row_ids=part.node_ids[:n])
        del src, dst
        send_counts = part.send_counts.tolist()
        offsets = [sum(send_counts[:q]) for q in range(self.world + 1)]
        self.send_rows = {q: part.send_idx[offsets[q]:offsets[q + 1]] for q in range(self.world)}
        self.recv_counts = part.recv_counts.tolist()

    def ring(self, r: int) -> tuple[int, int]:
        """Round r: (peer I send my rows to, peer whose rows I receive)."""
        return (self.rank + r) % self.world, (self.rank - r) % self.world


class _Pipeline:
    """Runs rounds 1..P-1 of a ring exchange with up to `prefetch` rounds in flight beyond the one
    being consumed. `post(r)` starts round r and returns (its `comm.Pending`, send buffer, payload); iterating
    waits for each round in order, drops its send buffer and yields its payload. Construction posts
    the first rounds at once, so they overlap with whatever the caller computes before iterating
    (the local shard). Nothing here keeps a payload once yielded: a consumer that `del`s it at the
    end of its loop body holds one remote shard, plus `prefetch` in flight."""

    def __init__(self, world: int, post, prefetch: int):
        self.rounds = iter(range(1, world))
        self.post, self.depth = post, prefetch + 1
        self.inflight = deque()
        self._fill()

    def _fill(self):
        while len(self.inflight) < self.depth:
            r = next(self.rounds, None)
            if r is None:
                return
            self.inflight.append(self.post(r))

    def __iter__(self):
        while self.inflight:
            self.inflight[0][0].wait()
            yield self.inflight.popleft()[2]
            self._fill()


class SARAggregator(Aggregator):
    def __init__(self, ctx: RankContext, mode: str, prefetch: int):
        self.ctx, self.comm, self.mode, self.prefetch = ctx, ctx.comm, mode, prefetch
        # Rounds in flight beyond the one consumed (prefetch) share one tag, apart from the blocking
        # exchanges (evaluation): the ring posts them in the same order on both ends of every pair.
        self.channel = ctx.comm.channel("sar.ring", ["halo_fwd", "halo_bwd", "halo_refetch"])
        self.shards = Shards(ctx)

    # ---------------------------------------------------------------- ring transfers
    def post_round(self, h: torch.Tensor, r: int, category: str, layer: int):
        """Start round r of a forward ring: send the rows (rank + r) needs, receive those I need from
        (rank - r). Returns (its `comm.Pending`, send buffer, (r, owner, receive buffer))."""
        s = self.shards
        to, frm = s.ring(r)
        send = h.index_select(0, s.send_rows[to])
        recv = h.new_empty((s.recv_counts[frm], *h.shape[1:]))
        return self.channel.exchange(send, to, recv, frm, category, layer), send, (r, frm, recv)

    def fetch(self, h: torch.Tensor, category: str, layer: int):
        """Remote shards' source rows, round by round: yields (round r, owner q, rows of q I need)."""
        return _Pipeline(self.shards.world, lambda r: self.post_round(h, r, category, layer), self.prefetch)

    def return_grads(self, grad_local: torch.Tensor, layer: int) -> "_GradReturn":
        return _GradReturn(self, grad_local, layer)

    # ---------------------------------------------------------------- the aggregation interface
    def propagate(self, h, norm: str, layer: int):
        if self.mode == "sar":
            return _SARLinear.apply(h, self, norm, layer)
        # SA: the same rounds under autograd; each fetch is a differentiable op whose backward
        # returns the gradient of that round's rows to their owner.
        s = self.shards
        out = s.adj[s.rank].spmm(norm, h)
        for r in range(1, s.world):
            out = out + s.adj[s.ring(r)[1]].spmm(norm, _Fetch.apply(h, self, r, layer))
        return out

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2, dropout: float = 0.0):
        if self.mode == "sar":
            # The fused kernel (forward and rematerialising backward) is written for fp32: under
            # `precision=bf16` its rows are upcast first, so they also travel in fp32.
            with torch.autocast(z.device.type, enabled=False):
                return _SARAttention.apply(z.float(), att_src, att_dst, self, layer, negative_slope, dropout)
        # SA: logits of every shard are kept, then one softmax over all of them.
        s = self.shards
        er = (z * att_dst).sum(-1)
        sources = [(s.rank, z)] + [(s.ring(r)[1], _Fetch.apply(z, self, r, layer)) for r in range(1, s.world)]
        logits = [(s.adj[q], zq, s.adj[q].logits(zq, er, att_src, negative_slope)) for q, zq in sources]
        m = torch.stack([adj.segment(e.detach(), "max") for adj, _, e in logits]).amax(0)
        exps = [(adj, zq, torch.exp(e - m.index_select(0, adj.dst))) for adj, zq, e in logits]
        denom = sum(adj.segment(ex, "sum") for adj, _, ex in exps)
        out = 0
        for adj, zq, ex in exps:
            alpha = ex / denom.index_select(0, adj.dst)
            keep = self.comm.draws.attention_keep(adj, alpha.shape[1], dropout, layer)
            out = out + adj.weighted_sum(alpha if keep is None else alpha * keep.to(alpha.dtype), zq)
        return out


class _GradReturn:
    """Reverse ring: `send(r, g)` ships the gradient of the rows fetched in round r to their owner
    and receives what the peer that fetched from me in round r sends back, added into grad_local.
    At most `prefetch` + 1 returns are in flight; `finish()` completes them."""

    def __init__(self, agg: SARAggregator, grad_local: torch.Tensor, layer: int):
        self.agg, self.grad_local, self.layer = agg, grad_local, layer
        self.pending = deque()

    def send(self, r: int, grad_rows: torch.Tensor) -> None:
        s = self.agg.shards
        peer, owner = s.ring(r)  # I fetched from `owner` in round r; `peer` fetched from me
        recv = self.grad_local.new_empty((s.send_rows[peer].numel(), *self.grad_local.shape[1:]))
        send = grad_rows.contiguous()
        transfer = self.agg.channel.exchange(send, owner, recv, peer, "halo_bwd", self.layer)
        self.pending.append((transfer, peer, recv, send))
        while len(self.pending) > self.agg.prefetch:
            self._complete()

    def _complete(self) -> None:
        transfer, peer, recv, _ = self.pending.popleft()
        transfer.wait()
        self.grad_local.index_add_(0, self.agg.shards.send_rows[peer], recv)

    def finish(self) -> torch.Tensor:
        while self.pending:
            self._complete()
        return self.grad_local


class _Fetch(torch.autograd.Function):
    """SA mode: round r's rows as an autograd node (forward: fetch; backward: send the gradient of
    those rows to their owner and receive the gradient of mine). Every rank creates the same
    sequence of these nodes, so their backward calls pair up across ranks."""

    @staticmethod
    def forward(ctx, h, agg: SARAggregator, r: int, layer: int):
        transfer, _, (_, _, recv) = agg.post_round(h, r, "halo_fwd", layer)
        transfer.wait()
        ctx.agg, ctx.r, ctx.layer, ctx.rows = agg, r, layer, h.shape[0]
        return recv

    @staticmethod
    def backward(ctx, grad):
        returns = ctx.agg.return_grads(grad.new_zeros((ctx.rows, *grad.shape[1:])), ctx.layer)
        returns.send(ctx.r, grad)
        return returns.finish(), None, None, None


class _SARLinear(torch.autograd.Function):
    """Sequential aggregation for a linear aggregation with constant edge weights (GCN, SAGE mean).
    Saves nothing but references to the constant shard matrices."""

    @staticmethod
    def forward(ctx, h, agg: SARAggregator, norm: str, layer: int):
        s = agg.shards
        pipeline = agg.fetch(h, "halo_fwd", layer)  # remote rounds start now, overlapping the local shard
        out = s.adj[s.rank].spmm(norm, h)  # no autograd inside forward: the kernel's plain product
        for _, q, rows in pipeline:
            out += s.adj[q].spmm(norm, rows)
            del rows  # before the next round is posted
        ctx.agg, ctx.norm, ctx.layer = agg, norm, layer
        return out

    @staticmethod
    def backward(ctx, grad):
        s, norm = ctx.agg.shards, ctx.norm
        grad = grad.contiguous()
        returns = ctx.agg.return_grads(s.adj[s.rank].spmm_t(norm, grad), ctx.layer)
        for r in range(1, s.world):  # A_q^T g for every remote shard, sent to its owner q
            returns.send(r, s.adj[s.ring(r)[1]].spmm_t(norm, grad))
        return returns.finish(), None, None, None


def _leaky_grad(s: torch.Tensor, negative_slope: float) -> torch.Tensor:
    """d LeakyReLU(s) / ds, as autograd takes it (slope at s <= 0), applied in place by the caller."""
    return torch.where(s > 0, s.new_ones(()), s.new_full((), negative_slope))


class _SARAttention(torch.autograd.Function):
    """GAT aggregation across shards: a fused kernel (forward online softmax, hand-written
    rematerialising backward). No autograd graph is built, no shard's aggregation is recomputed in
    backward, and the only E-sized tensors are one shard's [E_q, H] logits/weights at a time (the
    `messages` kernel adds its transient E_q x H x C messages); every op covers all heads at once
    except the native CSR products (`head_spmm`, `head_spmm_t`, `head_sddmm`, one call per head).

    Forward, per shard q (sources z_q, [m, H, C]): el = a_src . z_q, e = LeakyReLU(el_u + er_v),
    then the running max m, sum l and weighted sum acc of every destination are rescaled by
    exp(m_old - m_new) and the shard folded in; out = acc / l, lse = m + log l.

    Backward, per shard, with alpha_uv = exp(e_uv - lse_v) (the final softmax), g = dL/dout,
    D_v = g_v . out_v: dz_u += sum_v alpha_uv g_v (transposed CSR), de_uv = alpha_uv (g_v . z_u - D_v)
    (SDDMM), ds = de LeakyReLU'(s); el's gradient (a scatter over sources) goes into dz_u through a_src
    and into a_src's gradient; er's gradient (a segment sum over destinations) is folded into z and a_dst
    once, after all shards."""

    @staticmethod
    def _weights(adj: LocalAdjacency, zq, er, att_src, negative_slope):
        """(s, e) of one shard: pre-activation el_u + er_v and logits LeakyReLU(s), [E_q, H]."""
        el = (zq * att_src).sum(-1)
        s = el.index_select(0, adj.src).add_(er.index_select(0, adj.dst))
        return s, torch.nn.functional.leaky_relu(s, negative_slope)

    @staticmethod
    def _step(adj: LocalAdjacency, zq, er, att_src, negative_slope, state, keep=None):
        """Fold one shard into the running (max m, sum `total`, weighted sum acc), in place. `keep`:
        the attention dropout's scaled mask, applied to the weighted sum only (the softmax's sum is
        over every edge: dropout acts on the normalised coefficients)."""
        m, total, acc = state
        _, e = _SARAttention._weights(adj, zq, er, att_src, negative_slope)
        m_new = torch.maximum(m, adj.segment(e, "max"))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows with no edge yet
        scale = torch.exp(m - safe)  # exp(-inf) = 0 where nothing was accumulated
        p = e.sub_(safe.index_select(0, adj.dst)).exp_()  # e's buffer reused
        total.mul_(scale).add_(adj.segment(p, "sum"))
        acc.mul_(scale.unsqueeze(-1)).add_(adj.weighted_sum(p if keep is None else p * keep, zq))  # no autograd
        return m_new, total, acc

    @staticmethod
    def forward(ctx, z, att_src, att_dst, agg: SARAggregator, layer: int, negative_slope: float,
                dropout: float = 0.0):
        s = agg.shards
        n, heads, ch = z.shape
        pipeline = agg.fetch(z, "halo_fwd", layer)
        er = (z * att_dst).sum(-1)
        state = (z.new_full((n, heads), float("-inf")), z.new_zeros((n, heads)), z.new_zeros((n, heads, ch)))
        keep = agg.comm.draws.attention_keep(s.adj[s.rank], heads, dropout, layer)
        state = _SARAttention._step(s.adj[s.rank], z, er, att_src, negative_slope, state, keep)
        for _, q, rows in pipeline:  # one remote shard at a time: consumed, then dropped
            keep = agg.comm.draws.attention_keep(s.adj[q], heads, dropout, layer)
            state = _SARAttention._step(s.adj[q], rows, er, att_src, negative_slope, state, keep)
            del rows, keep
        m, total, acc = state
        out = acc.div_(total.unsqueeze(-1))  # every node has a self-loop, so the sum is > 0
        lse = m + torch.log(total)
        ctx.save_for_backward(z, att_src, att_dst, out, lse)
        ctx.agg, ctx.layer, ctx.negative_slope, ctx.dropout = agg, layer, negative_slope, dropout
        return out

    @staticmethod
    def _shard_backward(adj: LocalAdjacency, zq, er, att_src, lse, grad, delta, negative_slope, acc, keep=None):
        """Gradient of one shard's contribution with the softmax normaliser at its final value:
        returns d zq; adds er's and att_src's gradients into acc. `keep`: the attention dropout's
        scaled mask k (out_v = sum_u k_uv alpha_uv z_u): dz_u takes k alpha, and de_uv = alpha_uv
        (k_uv g_v . z_u - D_v), D_v = g_v . out_v as without dropout."""
        s, e = _SARAttention._weights(adj, zq, er, att_src, negative_slope)
        alpha = e.sub_(lse.index_select(0, adj.dst)).exp_()
        kept = alpha if keep is None else alpha * keep
        if adj.kernel == "messages":
            g_dst = grad.index_select(0, adj.dst)  # E_q x H x C, transient, shared by both products
            g_z = zq.new_zeros(zq.shape).index_add_(0, adj.src, g_dst * kept.unsqueeze(-1))
            ds = (g_dst * zq.index_select(0, adj.src)).sum(-1)
            del g_dst
        else:
            g_z = head_spmm_t(adj, kept, grad)
            ds = head_sddmm(adj, grad, zq)
        del kept
        if keep is not None:
            ds.mul_(keep)
        ds.sub_(delta.index_select(0, adj.dst)).mul_(alpha).mul_(_leaky_grad(s, negative_slope))
        del s, alpha
        g_el = ds.new_zeros((adj.num_cols, ds.shape[1])).index_add_(0, adj.src, ds)
        acc["er"] += adj.segment(ds, "sum")
        acc["att_src"] += torch.einsum("mh,mhc->hc", g_el, zq).unsqueeze(0)
        return g_z.add_(g_el.unsqueeze(-1) * att_src)

    @staticmethod
    def backward(ctx, grad):
        z, att_src, att_dst, out, lse = ctx.saved_tensors
        agg, s = ctx.agg, ctx.agg.shards
        # Refetch rounds start now and overlap with the local shard's backward.
        refetch = agg.fetch(z, "halo_refetch", ctx.layer)
        grad = grad.contiguous()
        delta = (grad * out).sum(-1)  # D_v = g_v . out_v: the softmax's normalisation term
        er = (z * att_dst).sum(-1)  # destination term, shared by all shards
        acc = {"er": torch.zeros_like(er), "att_src": torch.zeros_like(att_src)}
        args = (er, att_src, lse, grad, delta, ctx.negative_slope, acc)
        heads = z.shape[1]

        def keep(q):  # the forward's dropout mask, drawn again from its key
            return agg.comm.draws.attention_keep(s.adj[q], heads, ctx.dropout, ctx.layer)

        returns = agg.return_grads(_SARAttention._shard_backward(s.adj[s.rank], z, *args, keep(s.rank)), ctx.layer)
        for r, q, rows in refetch:  # rematerialise each remote shard, send its gradient home
            returns.send(r, _SARAttention._shard_backward(s.adj[q], rows, *args, keep(q)))
            del rows
        grad_z = returns.finish()
        # er = (z * att_dst).sum(-1), backpropagated once for all shards.
        g_er = acc["er"].unsqueeze(-1)
        grad_z.add_(g_er * att_dst)
        grad_dst = (g_er * z).sum(0, keepdim=True)
        return grad_z, acc["att_src"], grad_dst, None, None, None, None


class Method(FullGraphMethod):
    """The full-graph step of every exact method, with SAR's aggregator."""
    # GAT's attention dropout, keyed by edge in every mode (Draws.attention_keep over each shard; one_shot: full_halo's)
    applies = FullGraphMethod.applies | {"model.attention_dropout"}
    class About(FullGraphMethod.About):
        claim = ("(Mostafa, MLSys 2022) graphs too large for one machine: per-worker memory that falls linearly "
                 "with the workers, below vanilla domain parallelism's (`full_halo`; 2x for GraphSAGE, 4x for "
                 "GAT: IntelLabs/SAR README)")

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        # sar | sa (sequential aggregation, no rematerialisation) | one_shot (one halo all-to-all, as full_halo)
        mode: Literal["sar", "sa", "one_shot"] = option("sar")
        # remote shards in flight beyond the one being aggregated (0: no overlap)
        prefetch: int = option(1, ge=0, message="method.prefetch must be a non-negative integer (got {value!r})")

    def make_aggregator(self):
        options = self.ctx.options
        if options.mode == "one_shot":
            return HaloAggregator(self.ctx.adj, self.ctx.plan, self.ctx.comm, recompute=self.ctx.recompute)
        return SARAggregator(self.ctx, options.mode, options.prefetch)

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """`one_shot`: full_halo's. Otherwise P - 1 ring rounds of one message each per layer, the next
            round's rows fetched while this one is aggregated (hidden when `prefetch` > 0); backward returns
            the gradients round by round, and GAT under `sar`, whose softmax is not linear, refetches each
            shard first (rematerialisation: `halo_refetch`)."""
            from benchmarks.base.traffic import FLOAT, Transfer, attention, exchanged_layers, full_halo, grad_allreduce
            if options.mode == "one_shot":
                return full_halo(model, rank, cls.layer0_mode(options))
            h, k, ahead = rank.halo, rank.peers, options.prefetch > 0
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank, cls.layer0_mode(options)):
                row = width * FLOAT
                out.append(Transfer("halo_fwd", layer, h * row, k, k, ahead))
                if grad and attention(model) and options.mode == "sar":
                    out.append(Transfer("halo_refetch", layer, h * row, k, k, ahead))
                if grad:
                    out.append(Transfer("halo_bwd", layer, h * row, k, k))
            return out

        @classmethod
        def kept_halo_rows(cls, options, rank):
            """`sar` keeps one shard in flight, plus `prefetch`; `sa` and `one_shot` every fetched row."""
            if options.mode == "sar":
                return rank.halo / max(rank.peers, 1) * (1 + options.prefetch)
            return rank.halo


