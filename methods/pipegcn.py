"""`pipegcn`: PipeGCN (Wan, Li, Wolfe, Kyrillidis, Kim, Lin, ICLR 2022, arXiv 2203.10428): `full_halo`
with every communicating layer's halo exchange pipelined by one epoch, as the authors' code
(GATECH-EIC/PipeGCN `helper/feature_buffer.py`, `module/model.py`) does it.

Epoch t aggregates, at every layer l >= 1, the halo rows its peers sent during epoch t-1, and adds
into its boundary rows' gradients the halo gradients its peers sent back during epoch t-1. The rows
are the layer's *input* h (the reference's `buffer.update(i, h)` before `layer(g, h)`), so the
receiver projects them with the current weights W_t: a stale feature, never a stale weight (the
setting of the paper's convergence analysis); the gradients sent back are those of that input.
What epoch t sends (its own rows in forward, the gradient of the halo rows it used in backward) is
posted without waiting and waited for at its first use, the same layer of epoch t+1, so the
transfer overlaps the rest of epoch t and the parameter all-reduce. Pipelining moves traffic in
time and removes none; rows of the layer input are wider than `full_halo`'s where a layer projects
first (GCN, GAT, narrowing SAGE layers), so those layers move more bytes. The parameter-gradient
all-reduce stays fresh, every step (`Method.optimize`).

Dropout (`halo_dropout`): `receiver` (the reference: `buffer.update` then `dropout`) sends the
undropped input and each receiver drops the (stale) halo rows out every step with this step's mask
of each node (keyed by node: the mask its owner draws now; under `draws=per_rank`, the receiver's
own, as the reference's per-process generators draw it); `sender` sends the rows its owner dropped
out a step earlier (`full_halo`'s masks, one epoch stale with the rows). Layer 0 (`layer0`, default
`precomputed`: the authors' `--use-pp`, which every shipped script sets) is exact and fetches the
halo's input features once (category `halo_inputs`); `families.partition_parallel.LAYER0`.

`epoch0: zeros` (the authors' code): epoch 0 has received nothing and uses zero halo rows and zero
boundary gradients. `epoch0: sync`: epoch 0 exchanges exactly, and epoch 1 uses what epoch 0 sent,
as any later epoch does. `pipeline: false`: every exchange is waited for at once: exact (its exact
control; with `halo_dropout: sender`, `full_halo` with the same `layer0`, unless smoothing is on).

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

from benchmarks.core.aggregation import Aggregator, Replay, start_exchange_rows
from benchmarks.core.comm import Pending
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import (LAYER0, LayerZeroExact, LocalAggregator, layer0_aggregator,
                                                     layer0_option)
from benchmarks.base.options import option

class StaleBlock:
    """One layer's halo traffic in one direction (forward rows or backward gradients).

    `swap(outgoing, epoch)` posts `outgoing` (through `post`) and returns the block to use now:
    pipelined, what the previous post received (waited for here, its first use), zeros before any;
    not pipelined (and at epoch 0 with `epoch0: sync`), what this post receives, waited for at once.
    A post is waited for before the next one of the same block is made, so one transfer per block is
    ever in flight (each block on its own channel slot; the runtime waits for the last, `Comm.drain`).
    With `smooth`, every receipt R updates S = gamma S + (1 - gamma) R (S = 0 before the first) and
    S is returned instead of R. Waits and block ages are kept for the probes."""

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


class _StaleHalo(torch.autograd.Function):
    """The halo block of a layer from `forward.swap` (a constant: no gradient reaches its owner
    through autograd), given the rows `rows` this rank sends. Backward hands the gradient of the
    halo block to `backward.swap`, which posts it to the owners, and adds the boundary gradients it
    returns into the rows they were sent from (`send_idx`: which of my rows each peer holds as halo)."""

    @staticmethod
    def forward(ctx, rows, forward: StaleBlock, backward: StaleBlock, send_idx, epoch: int, comm, layer: int,
                replay: Replay):
        ctx.backward, ctx.send_idx, ctx.epoch, ctx.shape = backward, send_idx, epoch, rows.shape
        # A checkpoint's recompute (memory.checkpoint) gets this step's stale block back: swapping
        # again would post a second time and take the block meant for the next epoch. A copy: the
        # block itself stays with `forward` (smoothing updates it), outside this step's graph.
        return replay(comm, layer, lambda: forward.swap(rows.detach(), epoch)).clone()

    @staticmethod
    def backward(ctx, grad):
        boundary = ctx.backward.swap(grad.contiguous(), ctx.epoch)
        return grad.new_zeros(ctx.shape).index_add_(0, ctx.send_idx, boundary), None, None, None, None, None, None, None


class PipelinedAggregator(LocalAggregator):
    """Layers >= 1: [local rows | halo block], the halo block being the owners' layer inputs of one
    epoch earlier (`_StaleHalo`), projected with the current weights where the layer projects
    (`LocalAggregator.projected_sources`); batch-norm statistics over the whole graph, as `full_halo`.
    With `halo_dropout: receiver` the model's dropout keeps each layer's undropped input, which is what
    is sent, and the received block gets this rank's own mask. Layer 0 goes elsewhere
    (`LayerZeroExact`). `epoch` is set by the method before each step."""

    def __init__(self, ctx, options):
        # `halo` only says whether there is one (LocalAggregator.sources); `halo_rows` below replaces its use
        super().__init__(ctx.adj, ctx.comm, halo=self.halo_rows if ctx.world > 1 else None, recompute=ctx.recompute)
        self.ctx, self.plan, self.epoch = ctx, ctx.plan, 0
        self.receiver_dropout = options.halo_dropout == "receiver"
        self.undropped = {}  # layer -> its undropped input this step (halo_dropout: receiver)
        self.stale_replay = Replay(ctx.recompute, always=True)
        plan, comm = ctx.plan, ctx.comm
        settings = dict(pipeline=options.pipeline, gamma=options.gamma, epoch0=options.epoch0)
        # Posts of every layer and direction are in flight together: one slot (tag) per layer on a
        # channel per direction, apart from the blocking exchanges (evaluation, layer 0's inputs).
        forward = comm.channel("pipegcn.halo_fwd", ["halo_fwd"])
        backward = comm.channel("pipegcn.halo_bwd", ["halo_bwd"])
        self.blocks = {}  # layer -> (forward rows, backward gradients)
        for layer in range(1, ctx.cfg.layers):
            fwd = StaleBlock(lambda rows, layer=layer: start_exchange_rows(
                rows, plan, forward, "halo_fwd", layer, slot=layer),
                sum(plan.recv_counts), f"halo_fwd/{layer}", smooth=options.smooth_features, **settings)
            bwd = StaleBlock(lambda grad, layer=layer: backward.all_to_all_start(
                grad, plan.recv_counts, plan.send_counts, "halo_bwd", layer, slot=layer),
                sum(plan.send_counts), f"halo_bwd/{layer}", smooth=options.smooth_grads, **settings)
            self.blocks[layer] = (fwd, bwd)

    def dropout(self, h, p: float, training: bool, layer: int):
        if self.receiver_dropout:
            self.undropped[layer] = h  # read, not popped: a checkpointed layer's recompute reads it again
        return super().dropout(h, p, training, layer)

    def halo_rows(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        sent = self.undropped[layer] if self.receiver_dropout else h
        block = _StaleHalo.apply(sent, *self.blocks[layer], self.plan.send_idx, self.epoch, self.comm, layer,
                                 self.stale_replay)
        if not self.receiver_dropout:
            return block
        # this epoch's mask of each halo node, drawn by the receiver (under draws=per_rank its own)
        part = self.ctx.part
        return self.ctx.draws.dropout(block, self.ctx.cfg.dropout, self.ctx.model.training, ("input", layer),
                                      part.node_ids[part.num_local:])

    def node_sum(self, t: torch.Tensor) -> torch.Tensor:
        return Aggregator.node_sum(self, t)


def age_summary(ages: list[int | None]) -> dict:
    known = [a for a in ages if a is not None]
    return {"min": min(known, default=None), "max": max(known, default=None),
            "mean": statistics.fmean(known) if known else None, "zeros_used": len(ages) - len(known)}


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        approximates = 'halo rows and gradients one epoch stale, exchange pipelined'
        claim = '(Wan et al., ICLR 2022) communication-bound full-graph training: exchange hidden behind compute'
        exact_control = {"pipeline": False, "smooth_features": False, "smooth_grads": False}

    @dataclass(frozen=True)
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
        # receiver: the owner sends its undropped layer input, each receiver draws its own mask (the
        # reference's `buffer.update` then `dropout`); sender: the rows its owner dropped out (full_halo's)
        halo_dropout: Literal["receiver", "sender"] = option("receiver")
        # the authors' scripts all set `--use-pp`
        layer0: Literal[LAYER0] = layer0_option("precomputed")

    def make_aggregator(self):
        ctx = self.ctx
        self.pipelined = PipelinedAggregator(ctx, ctx.options)
        return LayerZeroExact(layer0_aggregator(ctx, ctx.options.layer0), self.pipelined, ctx.comm)

    def aggregator_for(self, epoch: int):
        self.pipelined.epoch = epoch
        return self.aggregator

    def probes(self) -> dict:
        blocks = [b for pair in self.pipelined.blocks.values() for b in pair]
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

    # ------------------------------------------------------------------ the cost model's hooks
    #: A record from before `method.layer0` cached layer 0's inputs.

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """Last epoch's layer inputs (at the layer's input width: the receiver projects them) and
            their gradients, in every exchanged layer, sent without waiting under `pipeline`."""
            from benchmarks.base.traffic import FLOAT, exchanged_layers, grad_allreduce, halo_pair, in_width
            out = [grad_allreduce(model)]
            for layer, _, _ in exchanged_layers(model, rank, cls.layer0_mode(options)):
                out += halo_pair(layer, rank, in_width(model, layer) * FLOAT, True, hidden=options.pipeline)
            return out

        @classmethod
        def stale_table_bytes(cls, options, model, rank):
            """Last epoch's halo rows and their gradients, every layer >= 1."""
            from benchmarks.base.traffic import stale_tables
            return stale_tables(model, rank, copies=2)


