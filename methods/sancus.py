"""`sancus`: staleness-aware communication avoidance (Peng et al., "SANCUS", PVLDB 15(9), 2022) on the
suite's halo exchange.

One exact full-graph step per epoch (`full_halo`'s loop), except that a halo block is not re-sent
while it has barely changed:
  - layer 0: the halo's input features never change, so they are exchanged once (category
    `halo_inputs`) and cached; each step projects them locally with the current weights, so layer 0's
    gradients stay exact (the authors' code also caches the first layer's raw features);
  - layers >= 1, forward and backward: the rows a rank sends one peer in one (layer, direction) form
    a block. The sender keeps C, the block it last sent that peer, and a, how many consecutive
    epochs it skipped it. It skips (the peer reuses its cached copy) while a < `max_staleness` and
    ||B - C||_F / (||C||_F + eps) <= `threshold`. The decisions go to the peers in one tiny
    all-to-all of one-byte flags per (layer, direction) (category `skip_flags`; only for pairs that
    may skip, so `max_staleness: 0` sends none) before the rows (`halo_fwd` / `halo_bwd`, as
    `full_halo`), so both ends of every pair agree on the counts. Skipped blocks send nothing.
  - backward: the gradients of a rank's halo rows go back to their owners under the same rule
    (`skip_grads`), the owner reusing the gradient block it last received; the owner adds them into
    its boundary rows. With skipped forward rows the receiver's halo rows are a cached constant, and
    their gradient still reaches the owner through the backward send.
`threshold: 0` skips only blocks equal bit for bit to the cached one, so it equals `full_halo` with
the same `layer0` (its exact control).

The paper's layout (CAGNET 1D) broadcasts whole blocks of rows to every rank; here only the halo
rows each peer needs move, so bytes are not the paper's. Reconstructions: docs/sancus.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.core.aggregation import HaloAggregator, Replay
from benchmarks.core.comm import Comm
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import LAYER0, LayerZeroExact, layer0_aggregator, layer0_option
from benchmarks.base.options import option

EPS = 1e-12  # keeps the relative change finite for an all-zero cached block


class SkippingExchange:
    """One (layer, direction) of the exchange, in blocks: the rows for peer q (`send_counts[q]` of
    them, in peer order) are one block, and so are the rows from peer s (`recv_counts[s]`).

    Both ends of a pair keep the same counter a (consecutive skips) and know whether the receiver
    holds a copy, so both know which pairs may skip this time; only those exchange a flag, and the
    rows then move for the pairs that did not skip. The receiver keeps the last block each sender
    sent and returns it for a skipped one."""

    def __init__(self, comm: Comm, send_counts: list[int], recv_counts: list[int], threshold: float,
                 max_staleness: int, category: str, layer: int):
        self.comm, self.send_counts, self.recv_counts = comm, send_counts, recv_counts
        self.threshold, self.max_staleness, self.category, self.layer = threshold, max_staleness, category, layer
        world = len(send_counts)
        self.sent = [None] * world  # q -> the block last sent to q (C)
        self.sent_skips = [0] * world  # q -> consecutive skips towards q (a)
        self.received = [None] * world  # s -> the block last received from s
        self.received_skips = [0] * world
        # Probes: sends decided (blocks with rows), skipped, the oldest cached block ever used, and
        # per step the peers skipped towards / by, as bit masks (bit q = peer q).
        self.decided = self.skipped = self.max_used = 0
        self.sent_log, self.received_log = [], []

    def may_skip(self, cached, skips: int, rows: int, peer: int) -> bool:
        return rows > 0 and peer != self.comm.rank and cached is not None and skips < self.max_staleness

    def unchanged(self, block: torch.Tensor, cached: torch.Tensor) -> bool:
        """rel_change <= threshold. In float64, so a difference of one ulp is never 0: threshold 0
        skips only a block equal bit for bit to the cached one (a NaN never compares, so it is sent)."""
        change = torch.linalg.vector_norm(block - cached, dtype=torch.float64)
        return bool(change <= self.threshold * (torch.linalg.vector_norm(cached, dtype=torch.float64) + EPS))

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        """rows: what every peer would get (`send_counts` rows each, in peer order); returns what
        every peer sent or last sent (`recv_counts` rows each)."""
        comm = self.comm
        blocks = rows.split(self.send_counts)
        may_send = [self.may_skip(self.sent[q], self.sent_skips[q], n, q) for q, n in enumerate(self.send_counts)]
        may_recv = [self.may_skip(self.received[s], self.received_skips[s], n, s)
                    for s, n in enumerate(self.recv_counts)]
        skip = [m and self.unchanged(blocks[q], self.sent[q]) for q, m in enumerate(may_send)]
        skipped_by = [False] * len(may_recv)
        if any(may_send) or any(may_recv):
            flags = torch.tensor([s for s, m in zip(skip, may_send) if m], dtype=torch.uint8, device=rows.device)
            got = comm.all_to_all(flags, [int(m) for m in may_send], [int(m) for m in may_recv], "skip_flags",
                                  self.layer).tolist()
            for s in (s for s, m in enumerate(may_recv) if m):
                skipped_by[s] = bool(got.pop(0))
        send = torch.cat([b for b, s in zip(blocks, skip) if not s] or [rows[:0]])
        out = comm.all_to_all(send, [0 if s else n for n, s in zip(self.send_counts, skip)],
                              [0 if s else n for n, s in zip(self.recv_counts, skipped_by)], self.category, self.layer)
        # The sender's side: remember what went, count what did not.
        for q, n in enumerate(self.send_counts):
            if n == 0 or q == comm.rank:
                continue
            self.decided += 1
            if skip[q]:
                self.skipped += 1
                self.sent_skips[q] += 1
                self.max_used = max(self.max_used, self.sent_skips[q])
            else:
                self.sent[q], self.sent_skips[q] = blocks[q].clone(), 0
        # The receiver's side: a fresh block where one came, the cached one where it was skipped.
        fresh = iter(out.split([0 if s else n for n, s in zip(self.recv_counts, skipped_by)]))
        halo = []
        for s, n in enumerate(self.recv_counts):
            block = next(fresh)
            if skipped_by[s]:
                self.received_skips[s] += 1
                block = self.received[s]
            elif n:
                self.received[s], self.received_skips[s] = block, 0
            halo.append(block)
        self.sent_log.append(sum(1 << q for q, s in enumerate(skip) if s))
        self.received_log.append(sum(1 << s for s, k in enumerate(skipped_by) if k))
        return torch.cat(halo)

    def probes(self) -> dict:
        return {"sends": self.decided, "skipped": self.skipped,
                "skipped_fraction": self.skipped / self.decided if self.decided else 0.0,
                "max_staleness_used": self.max_used, "block_rows": list(self.send_counts),
                "skipped_to": self.sent_log, "skipped_by": self.received_log}


class _SkippingHalo(torch.autograd.Function):
    """Forward: my halo rows, through the forward exchange. Backward: their gradients back to their
    owners through the backward exchange (rows for peer q = the gradient of q's rows in my halo),
    added into the rows they came from."""

    @staticmethod
    def forward(ctx, h, send_idx: torch.Tensor, forward: SkippingExchange, backward: SkippingExchange,
                replay: Replay):
        ctx.send_idx, ctx.backward, ctx.num_rows = send_idx, backward, h.shape[0]
        # A checkpoint's recompute (memory.checkpoint) gets this step's rows back: deciding again
        # would count a second send and move the skip counters.
        return replay(forward.comm, forward.layer, lambda: forward(h.detach().index_select(0, send_idx)))

    @staticmethod
    def backward(ctx, grad):
        back = ctx.backward(grad.contiguous())
        out = grad.new_zeros((ctx.num_rows, *grad.shape[1:]))
        out.index_add_(0, ctx.send_idx, back)
        return out, None, None, None, None


class SancusAggregator(HaloAggregator):
    """Layers >= 1 as `HaloAggregator` (the layer's rows, projected first where the model does, with
    gradients), through the skipping exchange; layer 0 goes elsewhere (`LayerZeroExact`)."""

    def __init__(self, ctx, threshold: float, max_staleness: int, skip_grads: bool):
        super().__init__(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute)
        self.skip_replay = Replay(ctx.recompute, always=True)
        plan = ctx.plan
        self.exchanges = {
            layer: (SkippingExchange(ctx.comm, plan.send_counts, plan.recv_counts, threshold, max_staleness,
                                     "halo_fwd", layer),
                    SkippingExchange(ctx.comm, plan.recv_counts, plan.send_counts, threshold,
                                     max_staleness if skip_grads else 0, "halo_bwd", layer))
            for layer in range(1, ctx.cfg.layers)}

    def sources(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.comm.world == 1:
            return h
        return torch.cat([h, _SkippingHalo.apply(h, self.plan.send_idx, *self.exchanges[layer], self.skip_replay)])

    def probes(self) -> dict:
        return {f"{direction}/{layer}": exchange.probes()
                for layer, pair in self.exchanges.items() for direction, exchange in zip(("fwd", "bwd"), pair)}


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        approximates = 'halo blocks not re-sent while they change less than a threshold'
        claim = '(Peng et al., PVLDB 2022) slowly changing embeddings: skipped broadcasts cut halo bytes'
        exact_control = {"threshold": 0.0}

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        # relative change ||B - C||_F / ||C||_F under which a block is not re-sent (0: only identical
        # blocks, exact); with dropout 0.5 a forward block changes by ~0.5-1 every epoch from the
        # masks alone, hence a default near 1 (measured in docs/sancus.md)
        threshold: float = option(1.0, "relative change under which a halo block is not re-sent", ge=0)
        # epochs a peer may go on using a cached block (0: never skip, full_halo)
        max_staleness: int = option(10, "epochs a cached halo block may be reused", ge=0)
        skip_grads: bool = option(True, "apply the rule to the halo gradients too")
        # the public code (light-dist-gnn) caches the first layer's raw input features
        layer0: Literal[LAYER0] = layer0_option("cached")

    def make_aggregator(self):
        ctx, o = self.ctx, self.ctx.options
        self.skipping = SancusAggregator(ctx, o.threshold, o.max_staleness, o.skip_grads)
        return LayerZeroExact(layer0_aggregator(ctx, o.layer0), self.skipping, ctx.comm)

    def probes(self) -> dict:
        return {"sancus": self.skipping.probes()}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """An upper bound: full_halo's traffic (which blocks are skipped depends on how fast rows change)."""
            from benchmarks.base.traffic import full_halo
            return full_halo(model, rank, cls.layer0_mode(options))

        @classmethod
        def stale_table_bytes(cls, options, model, rank):
            """The cached blocks: last sent halo rows of every layer >= 1."""
            from benchmarks.base.traffic import stale_tables
            return stale_tables(model, rank)


