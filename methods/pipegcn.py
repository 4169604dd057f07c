"""`pipegcn`: PipeGCN (Wan, Li, Wolfe, Kyrillidis, Kim, Lin, ICLR 2022, arXiv 2203.10428): `full_halo`
with every communicating layer's halo exchange pipelined by one epoch.

Epoch t aggregates, at every layer l >= 1, the halo rows its peers sent during epoch t-1, and adds
into its boundary rows' gradients the halo gradients its peers sent back during epoch t-1. What
epoch t sends (its own rows in forward, the gradient of the halo rows it used in backward) is
posted without waiting and waited for at its first use, the same layer of epoch t+1, so the
transfer overlaps the rest of epoch t and the parameter all-reduce. The rows sent are those
`full_halo` sends (projected rows where the layer projects first, GAT's z), so the bytes per epoch
are `full_halo`'s: pipelining moves traffic in time and removes none. The parameter-gradient
all-reduce stays fresh, every step (`sync_gradients`).

Layer 0 (the authors' `--use-pp`, which every shipped script sets): the halo's input features
never change, so they are exchanged once, exactly (category `halo_inputs`), cached and projected
with the current weights on the receiving rank: layer 0 is exact and never communicates again.

`epoch0: zeros` (the authors' code): epoch 0 has received nothing and uses zero halo rows and zero
boundary gradients. `epoch0: sync`: epoch 0 exchanges exactly (it is `full_halo`'s step), and
epoch 1 uses what epoch 0 sent, as any later epoch does. `pipeline: false`: every exchange is
waited for at once (exact, `full_halo`, unless smoothing is on).

Smoothing (PipeGCN-F/-G/-GF: `smooth_features`, `smooth_grads`; aliases in conf/method/): each
receipt R updates S = gamma S + (1 - gamma) R (S = 0 before the first, no bias correction, as the
authors' code), and S is used in place of R.

What is the paper's and what is reconstructed: docs/pipegcn.md.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Literal

import torch

from benchmarks.aggregation import HaloAggregator, Replay, start_exchange_rows
from benchmarks.comm import Pending
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import CachedHaloInputs, LayerZeroExact, LocalAggregator
from benchmarks.options import option

# p2p tags of the posted exchanges, one per layer and direction: apart from the blocking exchanges
# (tag 0: evaluation, layer 0's inputs) that run while these are in flight, and from DIGEST's (1000 + layer).
FORWARD_TAG, BACKWARD_TAG = 2000, 3000


class StaleBlock:
    """One layer's halo traffic in one direction (forward rows or backward gradients).

    `swap(outgoing, epoch)` posts `outgoing` (through `post`) and returns the block to use now:
    pipelined, what the previous post received (waited for here, its first use), zeros before any;
    not pipelined (and at epoch 0 with `epoch0: sync`), what this post receives, waited for at once.
    A post is waited for before the next one of the same tag is made, so one transfer per tag is
    ever in flight. With `smooth`, every receipt R updates S = gamma S + (1 - gamma) R (S = 0
    before the first) and S is returned instead of R. Waits and block ages are kept for the probes."""

    def __init__(self, post: Callable[[torch.Tensor], Pending], rows: int, name: str, pipeline: bool = True,
                 smooth: bool = False, gamma: float = 0.95, epoch0: str = "zeros"):
        self.post, self.rows, self.name = post, rows, name
        self.pipeline, self.smooth, self.gamma, self.epoch0 = pipeline, smooth, gamma, epoch0
        self.in_flight: tuple[Pending, int] | None = None  # (transfer, epoch that posted it)
        self.block: torch.Tensor | None = None  # what `swap` returns: the last receipt, or S
        self.sent_at: int | None = None  # the epoch whose post filled `block`
        self.waits: list[tuple[int, float]] = []  # (epoch, seconds blocked) per wait
        self.ages: list[int | None] = []  # per use: epochs since the post it came from (None: zeros)

    def swap(self, outgoing: torch.Tensor, epoch: int) -> torch.Tensor:
        if self.in_flight is not None:
            self.receive(epoch)
        self.in_flight = (self.post(outgoing), epoch)
        if not self.pipeline or (epoch == 0 and self.epoch0 == "sync"):
            self.receive(epoch)
        self.ages.append(None if self.sent_at is None else epoch - self.sent_at)
        if self.block is None:  # nothing received yet: the authors' zero-filled buffers
            return outgoing.new_zeros((self.rows, *outgoing.shape[1:]))
        return self.block

    def receive(self, epoch: int) -> None:
        transfer, self.sent_at = self.in_flight
        self.in_flight = None
        received = transfer.wait()
        self.waits.append((epoch, transfer.waited_s))  # measured as every wait is (comm.Pending)
        if not self.smooth:
            self.block = received
        elif self.block is None:
            self.block = (1 - self.gamma) * received
        else:
            self.block = self.gamma * self.block + (1 - self.gamma) * received

    def drain(self) -> None:
        """Wait for the last post (after training: nothing uses it)."""
        if self.in_flight is not None:
            self.in_flight[0].wait()
            self.in_flight = None


class _PipelinedSources(torch.autograd.Function):
    """[rows | halo block] with the halo block from `forward.swap` (a constant: no gradient reaches
    its owner through autograd). Backward hands the gradient of the halo block to `backward.swap`,
    which posts it to the owners, and adds the boundary gradients it returns into the rows they
    were sent from (`send_idx`: which of my rows each peer holds as halo)."""

    @staticmethod
    def forward(ctx, rows, forward: StaleBlock, backward: StaleBlock, send_idx, epoch: int, comm, layer: int,
                replay: Replay):
        ctx.backward, ctx.send_idx, ctx.epoch, ctx.num_rows = backward, send_idx, epoch, rows.shape[0]
        # A checkpoint's recompute (memory.checkpoint) gets this step's stale block back: swapping
        # again would post a second time and take the block meant for the next epoch.
        return torch.cat([rows, replay(comm, layer, lambda: forward.swap(rows.detach(), epoch))])

    @staticmethod
    def backward(ctx, grad):
        n = ctx.num_rows
        boundary = ctx.backward.swap(grad[n:].contiguous(), ctx.epoch)
        return grad[:n].index_add(0, ctx.send_idx, boundary), None, None, None, None, None, None, None


class PipelinedAggregator(HaloAggregator):
    """Layers >= 1 as `HaloAggregator`, their halo rows and gradients one epoch stale
    (`_PipelinedSources`); layer 0 goes elsewhere (`LayerZeroExact`). `epoch` is set by the method
    before each step."""

    def __init__(self, ctx, options):
        super().__init__(ctx.adj, ctx.plan, ctx.comm)
        self.ctx, self.epoch = ctx, 0
        self.stale_replay = Replay(always=True)
        plan, comm = ctx.plan, ctx.comm
        settings = dict(pipeline=options.pipeline, gamma=options.gamma, epoch0=options.epoch0)
        self.blocks = {}  # layer -> (forward rows, backward gradients)
        for layer in range(1, ctx.cfg["layers"]):
            fwd = StaleBlock(lambda rows, layer=layer: start_exchange_rows(
                rows, plan, comm, "halo_fwd", layer, FORWARD_TAG + layer),
                sum(plan.recv_counts), f"halo_fwd/{layer}", smooth=options.smooth_features, **settings)
            bwd = StaleBlock(lambda grad, layer=layer: comm.all_to_all_start(
                grad, plan.recv_counts, plan.send_counts, "halo_bwd", layer, BACKWARD_TAG + layer),
                sum(plan.send_counts), f"halo_bwd/{layer}", smooth=options.smooth_grads, **settings)
            self.blocks[layer] = (fwd, bwd)

    def sources(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.comm.world == 1:
            return h
        return _PipelinedSources.apply(h, *self.blocks[layer], self.plan.send_idx, self.epoch, self.comm, layer,
                                       self.stale_replay)


def age_summary(ages: list[int | None]) -> dict:
    known = [a for a in ages if a is not None]
    return {"min": min(known, default=None), "max": max(known, default=None),
            "mean": statistics.fmean(known) if known else None, "zeros_used": len(ages) - len(known)}


class Method(FullGraphMethod):
    @dataclass
    class Options(FullGraphMethod.Options):
        # true: epoch t uses the halo rows and gradients sent in epoch t-1, sent without waiting;
        # false: every exchange is waited for at once (no staleness; full_halo unless smoothing is on)
        pipeline: bool = option(True)
        # PipeGCN-F: received halo rows are smoothed, S = gamma S + (1 - gamma) R, S used instead
        smooth_features: bool = option(False)
        # PipeGCN-G: received boundary gradients are smoothed the same way
        smooth_grads: bool = option(False)
        gamma: float = option(0.95, "the smoothing's decay", ge=0, lt=1)
        # zeros: epoch 0 uses zero halo rows and gradients (the authors' code); sync: epoch 0 exchanges exactly
        epoch0: Literal["zeros", "sync"] = option("zeros")

    def make_aggregator(self):
        ctx = self.ctx
        self.pipelined = PipelinedAggregator(ctx, ctx.options)
        first = LocalAggregator(ctx.adj, ctx.comm, CachedHaloInputs(ctx, ctx.cfg["dropout"]) if ctx.world > 1 else None)
        return LayerZeroExact(first, self.pipelined, ctx.comm)

    def aggregator_for(self, epoch: int):
        self.pipelined.epoch = epoch
        return self.aggregator

    def probes(self) -> dict:
        blocks = [b for pair in self.pipelined.blocks.values() for b in pair]
        for b in blocks:
            b.drain()
        waits = [s for b in blocks for epoch, s in b.waits if epoch > 0]
        options = self.ctx.options
        return {
            "sync": {
                "pipeline": options.pipeline, "epoch0": options.epoch0,
                "critical_path_s": sum(waits),  # blocked on halo exchanges after epoch 0
                "waits": len(waits), "max_wait_s": max(waits, default=0.0),
                "epoch0_s": sum(s for b in blocks for epoch, s in b.waits if epoch == 0),
            },
            "staleness": {
                "unit": "epochs between the epoch that sent a halo block (rows or gradients) and the epoch that "
                        "used it; zeros_used: uses before anything was received (zero block)",
                "by_layer": {b.name: age_summary(b.ages) for b in blocks},
                "by_epoch": blocks[0].ages if blocks else [],  # every layer and direction ages alike
            },
        }
