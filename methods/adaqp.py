"""`adaqp`: AdaQP, adaptive message quantisation and parallelisation (Wan, Zhao, Wu, MLSys 2023;
code raywan-110/AdaQP). `full_halo` with two changes (docs/savers.md, "AdaQP"):

- **Per-row bit widths.** Every halo message (a forward row, a backward halo gradient) travels
  quantised to 2, 4 or 8 bits (`benchmarks.core.quantize.Codec`: stochastic rounding, per-row fp32 offset
  and scale, unbiased), one all-to-all per width. Every row starts at 8 bits. Each epoch the sender
  adds the row's variance term D/6 (max - min)^2 to its trace; every `assign_cycle` epochs, before the
  step (untimed, `Method.between_epochs`), rank 0 gathers every row's score (trace x squared
  aggregation weight), chooses the widths of each layer and direction (`assign_widths`: lambda times the
  variance against 1 - lambda times the modelled transfer time, both normalised between their
  all-8-bit and all-2-bit values) and sends every rank the widths of the rows it sends and receives
  (category `adaqp_assign`), so both ends of each transfer agree.
- **Central / marginal split.** Inner nodes with no in-neighbour on another rank (central) are
  aggregated from local rows while the halo rows are in flight; the others (marginal) once they have
  arrived. Backward overlaps the same way: the halo gradients are posted as soon as they are known
  and added to the local gradients once those are complete. Same sums as `full_halo`, in another order.

The paper's modes: Vanilla is `bits=32 overlap=false`, AdaQP-p `bits=32` (both `full_halo` up to
float summation order), AdaQP-q `overlap=false`, AdaQP the defaults. `bits=8|4|2` fixes every row's
width (the code's `uniform` scheme).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch

from benchmarks.core.aggregation import Aggregator, LocalAdjacency, Replay
from benchmarks.base.errors import UserError
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.base.options import option
from benchmarks.core.quantize import Codec

WIDTHS = (2, 4, 8)  # the widths an assignment chooses from (the paper's BITS_SET)
FULL = 32  # full precision: rows travel as they are
DIRECTIONS = ("halo_fwd", "halo_bwd")  # also the categories their bytes are counted under


# --------------------------------------------------------------------------- the assignment
class _Downgrades(NamedTuple):
    """One channel's downgrades in the order the solver takes them (k = 0 .. steps): the bytes and
    variance of the channel after the first k."""

    rows: int
    order: np.ndarray  # rows by decreasing score
    group_rows: np.ndarray  # rows in each group (of the rows with a non-zero score, in `order`)
    step_group: np.ndarray  # each step's group
    stage: np.ndarray  # each step's kind: 0: 8 -> 4, 1: 4 -> 2
    prefix_bytes: np.ndarray
    prefix_var: np.ndarray


def assign_widths(channels: list[np.ndarray], width: int, variance_weight: float,
                  group_size: int) -> list[np.ndarray]:
    """Bit widths (2, 4 or 8 per row) for one layer and direction: `channels[c]` holds the scores of
    the rows one sender sends one receiver (variance at b bits = score / (2^b - 1)^2), each row
    `width` elements wide. Minimises

        lambda (V - V8) / (V2 - V8) + (1 - lambda) (T - T2) / (T8 - T2)

    V: the total variance; T: the bytes of the busiest channel (with one latency and bandwidth for
    every channel, the alpha-beta time of the bottleneck, normalised, is its bytes normalised);
    V8, T8 / V2, T2: their values with every row at 8 / at 2 bits.

    Solver (in place of the paper's MILP): a row with score 0 is exact at any width (or nobody
    aggregates it) and goes at 2 bits; each channel's other rows are sorted by score and cut into
    groups of `group_size`. A channel's downgrades (8 -> 4 and 4 -> 2 of each group) are ordered by
    variance added per byte saved; the order is convex (each group's 8 -> 4 comes before its 4 -> 2),
    so each prefix of it is the channel's least-variance assignment for its bytes (the greedy optimum
    of this multiple-choice knapsack, exact at every prefix). For every candidate bound tau on the
    busiest channel's bytes (every prefix's bytes of every channel) each channel takes its shortest
    prefix within tau; the objective is evaluated at every tau and the best kept (the smallest tau on
    ties). Exact up to one group per channel left whole at each tau; O(G log G) for G groups."""
    levels = {b: (1 << b) - 1 for b in WIDTHS}
    row_bytes = {b: Codec(f"int{b}").payload_bytes(1, width) for b in WIDTHS}
    inverse = {b: 1.0 / levels[b] ** 2 for b in WIDTHS}
    plans = []
    for scores in channels:
        scores = np.asarray(scores, dtype=np.float64)
        n, live = scores.shape[0], int((scores > 0).sum())
        order = np.argsort(-scores, kind="stable")  # rows with score 0 last: they stay at 2 bits
        starts = np.arange(0, live, group_size)
        group_score = np.add.reduceat(scores[order[:live]], starts) if live else np.zeros(0)
        group_rows = np.diff(np.append(starts, live))
        groups = np.arange(group_rows.shape[0])
        step_group = np.concatenate([groups, groups])
        stage = np.repeat([0, 1], groups.shape[0])  # 0: 8 -> 4, 1: 4 -> 2
        saved = np.concatenate([group_rows * (row_bytes[8] - row_bytes[4]), group_rows * (row_bytes[4] - row_bytes[2])])
        added = np.concatenate([group_score * (inverse[4] - inverse[8]), group_score * (inverse[2] - inverse[4])])
        ratio = np.full(saved.shape, np.inf)
        np.divide(added, saved, out=ratio, where=saved > 0)  # a downgrade that saves nothing comes last
        steps = np.lexsort((step_group, stage, ratio))
        start_bytes = live * row_bytes[8] + (n - live) * row_bytes[2]
        prefix_bytes = start_bytes - np.concatenate([[0], np.cumsum(saved[steps])]).astype(np.int64)
        prefix_var = group_score.sum() * inverse[8] + np.concatenate([[0.0], np.cumsum(added[steps])])
        plans.append(_Downgrades(n, order, group_rows, step_group[steps], stage[steps], prefix_bytes, prefix_var))

    total_score = sum(float(p.prefix_var[0]) for p in plans) / inverse[8]
    v8, v2 = total_score * inverse[8], total_score * inverse[2]
    largest = max((p.rows for p in plans), default=0)
    t8, t2 = largest * row_bytes[8], largest * row_bytes[2]
    taus = np.unique(np.concatenate([p.prefix_bytes for p in plans])) if plans else np.zeros(1, np.int64)
    taus = taus[taus >= max((int(p.prefix_bytes[-1]) for p in plans), default=0)]  # bounds every channel meets
    variance, busiest = np.zeros(taus.shape), np.zeros(taus.shape, np.int64)
    for p in plans:
        k = np.searchsorted(-p.prefix_bytes, -taus, side="left")  # the shortest prefix within tau
        variance += p.prefix_var[k]
        busiest = np.maximum(busiest, p.prefix_bytes[k])
    objective = (variance_weight * (variance - v8) / (v2 - v8 if v2 > v8 else 1.0)
                 + (1 - variance_weight) * (busiest - t2) / (t8 - t2 if t8 > t2 else 1))
    tau = taus[int(np.argmin(objective))]

    out = []
    for p in plans:
        k = int(np.searchsorted(-p.prefix_bytes, -tau, side="left"))
        group_bits = np.full(p.group_rows.shape, 8, dtype=np.int8)
        group_bits[p.step_group[:k][p.stage[:k] == 0]] = 4
        group_bits[p.step_group[:k][p.stage[:k] == 1]] = 2
        bits = np.full(p.rows, 2, dtype=np.int8)
        bits[p.order[:p.group_rows.sum()]] = np.repeat(group_bits, p.group_rows)
        out.append(bits)
    return out


# --------------------------------------------------------------------------- mixed-width exchange
class MixedWidthTransfer:
    """One layer's rows in flight in one direction, one all-to-all per width: `wait()` returns them
    in order (every width's rows placed where they belong)."""

    def __init__(self, out: torch.Tensor, parts: list):
        self.out, self.parts = out, parts

    def wait(self) -> torch.Tensor:
        for pending, recv_index in self.parts:
            rows = pending.wait()
            if recv_index is not None:
                self.out.index_copy_(0, recv_index, rows)
        return self.out


class Route:
    """The rows of one width in one (direction, layer): which of the rows sent and received have it,
    and how many go to / come from each peer. Index None: every row has this width."""

    def __init__(self, bits: int, send_bits: torch.Tensor, recv_bits: torch.Tensor, send_counts, recv_counts):
        self.bits = bits
        send, recv = send_bits == bits, recv_bits == bits
        self.send_index = None if bool(send.all()) and bool(recv.all()) else send.nonzero().view(-1)
        self.recv_index = None if self.send_index is None else recv.nonzero().view(-1)
        self.send_counts = [int(m.sum()) for m in send.split(send_counts)]
        self.recv_counts = [int(m.sum()) for m in recv.split(recv_counts)]
        self.empty = not any(self.send_counts) and not any(self.recv_counts)


class Widths:
    """Each halo row's bit width per (direction, layer), the traces the assignment reads, and the
    posting of rows at their widths. Rows sent forward are `plan.send_idx`'s (in its order), received
    forward the halo's; backward the reverse."""

    def __init__(self, ctx, bits, variance_weight: float, group_size: int):
        self.ctx, self.comm, self.plan = ctx, ctx.comm, ctx.plan
        self.adaptive = bits == "adaptive"
        self.variance_weight, self.group_size = variance_weight, group_size
        # Forward rows are nodes' rows: their rounding is keyed by node (`post`, benchmarks/core/draws.py);
        # backward rows are partial gradient sums, the layout's own: rounded from the rank's stream.
        generator = torch.Generator(ctx.device).manual_seed(7_000_003 * (ctx.cfg.seed + 1) + ctx.rank)
        self.codecs = {b: Codec(f"int{b}", generator) for b in WIDTHS}
        self.codecs[FULL] = None
        # One all-to-all per width in flight together: a channel per direction, one slot (tag) per
        # width, apart from the blocking exchanges (evaluation, setup).
        self.channels = {d: ctx.comm.channel(f"adaqp.{d}", [d]) for d in DIRECTIONS}
        plan = ctx.plan
        self.counts = {"halo_fwd": (plan.send_counts, plan.recv_counts),
                       "halo_bwd": (plan.recv_counts, plan.send_counts)}
        # The exchanges the model makes: (direction, layer) -> row width.
        self.keys = {}
        for layer, (width, needs_grad) in enumerate(ctx.model.exchanges()):
            if width:
                self.keys[("halo_fwd", layer)] = width
                if needs_grad:
                    self.keys[("halo_bwd", layer)] = width
        start = 8 if self.adaptive else int(bits)
        self.bits = {key: (torch.full((sum(self.counts[key[0]][0]),), start, dtype=torch.int8, device=ctx.device),
                           torch.full((sum(self.counts[key[0]][1]),), start, dtype=torch.int8, device=ctx.device))
                     for key in self.keys}
        self.routes = {key: self.route(key) for key in self.keys}
        self.norms = {}  # layer -> the normalisation its aggregation weights rows with
        self.assignments, self.assign_s = [], 0.0
        if self.adaptive and ctx.world > 1:
            self.setup_scores()

    def route(self, key) -> list[Route]:
        send_bits, recv_bits = self.bits[key]
        routes = [Route(b, send_bits, recv_bits, *self.counts[key[0]]) for b in (*WIDTHS, FULL)]
        return [r for r in routes if not r.empty]

    # ------------------------------------------------------------------ posting rows
    def post(self, rows: torch.Tensor, key) -> MixedWidthTransfer:
        """Post `rows` (the rows sent in `key`'s direction, in order) at their widths."""
        direction, layer = key
        if self.adaptive and not self.ctx.recompute.active:
            self.trace(rows, key)
        out = rows.new_empty((sum(self.counts[direction][1]), *rows.shape[1:]))
        ids = self.comm.draws.ids_of(self.plan.send_idx) if direction == "halo_fwd" else None
        parts = []
        for route in self.routes[key]:
            send = rows if route.send_index is None else rows.index_select(0, route.send_index)
            sent = ids if ids is None or route.send_index is None else ids.index_select(0, route.send_index)
            pending = self.channels[direction].all_to_all_start(send, route.send_counts, route.recv_counts, direction,
                                                                layer, slot=route.bits, codec=self.codecs[route.bits],
                                                                ids=sent)
            if route.recv_index is None:
                out = pending.out  # every row has this width: the received tensor is the result
            parts.append((pending, route.recv_index))
        return MixedWidthTransfer(out, parts)

    # ------------------------------------------------------------------ tracing and assignment
    def setup_scores(self) -> None:
        """Once: each receiver's aggregation weight of every halo row (the sum of its edges'
        normalised weights, per normalisation; the paper's `agg_scores`) sent to the row's owner, and
        the matrix of rows each rank sends each other (rank 0 solves for every channel). Category
        `setup`, like the partition's own exchange plan."""
        ctx, plan, adj = self.ctx, self.plan, self.ctx.adj
        halo = adj.src >= adj.num_rows
        weights = torch.stack([torch.zeros(adj.num_cols, device=ctx.device).index_add_(
            0, adj.src[halo], adj.edge_weights(norm)[halo])[adj.num_rows:] for norm in ("gcn", "mean")], 1)
        received = self.comm.all_to_all(weights, plan.recv_counts, plan.send_counts, "setup")
        self.weights = {"gcn": received[:, 0], "mean": received[:, 1]}
        matrix = torch.zeros(ctx.world, ctx.world, dtype=torch.int64, device=ctx.device)
        matrix[ctx.rank] = torch.tensor(plan.send_counts, device=ctx.device)
        self.matrix = self.comm.all_reduce(matrix, "setup").cpu().numpy()  # [p, q]: rows p sends q forward
        self.traces = {key: torch.zeros(len(self.bits[key][0]), device=ctx.device) for key in self.keys}

    def trace(self, rows: torch.Tensor, key) -> None:
        """Add each sent row's variance term D/6 (max - min)^2 (the variance of a b-bit stochastic
        rounding is this over (2^b - 1)^2, on average over where values fall between levels)."""
        if rows.shape[0]:
            flat = rows.detach().reshape(rows.shape[0], -1).float()
            spread = flat.amax(1) - flat.amin(1)
            self.traces[key] += flat.shape[1] / 6 * spread * spread

    def scores(self, key) -> torch.Tensor:
        """Trace x squared aggregation weight: a forward row's error enters each receiving node's sum
        with its edge weight; a halo gradient (backward) is added once into its owner's gradient."""
        direction, layer = key
        if direction == "halo_bwd":
            return self.traces[key]
        return self.traces[key] * self.weights[self.norms.get(layer, "mean")] ** 2

    def reassign(self, epoch: int) -> None:
        """Rank 0 gathers every rank's row scores, solves every (direction, layer) and sends each rank
        the widths of the rows it sends and receives (both ends of a transfer get the same widths);
        the traces start again. Collective; category `adaqp_assign`."""
        ctx, world = self.ctx, self.ctx.world
        start = time.perf_counter()
        mine = torch.cat([self.scores(key) for key in self.keys]).float()
        gathered = self.comm.all_to_all_v([mine if q == 0 else mine[:0] for q in range(world)], "adaqp_assign")
        if ctx.rank == 0:
            replies = self.solve([g.cpu().numpy() for g in gathered])
            replies = [torch.from_numpy(r).to(ctx.device) for r in replies]
        else:
            replies = [torch.zeros(0, dtype=torch.int8, device=ctx.device)] * world
        widths = self.comm.all_to_all_v(replies, "adaqp_assign")[0]
        for key in self.keys:
            send, recv = self.bits[key]
            self.bits[key] = (widths[:len(send)], widths[len(send):len(send) + len(recv)])
            widths = widths[len(send) + len(recv):]
            self.routes[key] = self.route(key)
            self.traces[key].zero_()
        seconds = time.perf_counter() - start
        self.assign_s += seconds
        self.assignments.append({"epoch": epoch, "seconds": seconds, "widths": self.histogram()})

    def solve(self, scores: list[np.ndarray]) -> list[np.ndarray]:
        """Rank 0: every rank's scores (its sent rows, keys in order) -> every rank's widths (its sent
        rows, then its received rows, keys in order)."""
        world, matrix = len(scores), self.matrix
        offsets, replies = [0] * world, [[] for _ in range(world)]
        for key, width in self.keys.items():
            # rows[p][q]: how many rows p sends q in this direction, in p's order by q
            rows = matrix if key[0] == "halo_fwd" else matrix.T
            channels = {}
            for p in range(world):
                ends = offsets[p] + np.concatenate([[0], np.cumsum(rows[p])])
                for q in range(world):
                    if rows[p][q]:
                        channels[(p, q)] = scores[p][ends[q]:ends[q + 1]]
                offsets[p] = int(ends[-1])
            chosen = dict(zip(channels, assign_widths(list(channels.values()), width, self.variance_weight,
                                                      self.group_size)))
            empty = np.zeros(0, dtype=np.int8)
            for r in range(world):
                replies[r].append(np.concatenate([chosen.get((r, q), empty) for q in range(world)]
                                                 + [chosen.get((p, r), empty) for p in range(world)]))
        return [np.concatenate(r) if r else np.zeros(0, np.int8) for r in replies]

    def histogram(self) -> dict:
        """Rows this rank sends at each width, per '<direction>/<layer>' (the current assignment)."""
        out = {}
        for d, layer in self.keys:
            sent = self.bits[(d, layer)][0]
            counts = {str(b): int((sent == b).sum()) for b in (*WIDTHS, FULL)}
            out[f"{d}/{layer}"] = {b: n for b, n in counts.items() if n}
        return out


# --------------------------------------------------------------------------- autograd
class _Departure(torch.autograd.Function):
    """Identity on a layer's input. Its backward runs once every local use of the input has given
    its gradient (the central and marginal aggregations'), so the halo gradients posted meanwhile
    (`_Arrival.backward`) are waited for only now, and added into the rows they came from."""

    @staticmethod
    def forward(ctx, h, aggregator, layer):
        ctx.aggregator, ctx.layer = aggregator, layer
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad):
        received = ctx.aggregator.in_flight.pop(ctx.layer).wait()
        return grad.index_add(0, ctx.aggregator.plan.send_idx, received.to(grad.dtype)), None, None


class _Arrival(torch.autograd.Function):
    """Forward: the halo rows posted before the central aggregation, waited for now (or replayed in
    a checkpoint's recompute). Backward: the halo gradients posted back to their owners at their
    widths; `_Departure.backward` waits for them."""

    @staticmethod
    def forward(ctx, h, fetch, aggregator, layer):
        ctx.aggregator, ctx.layer = aggregator, layer
        return fetch()

    @staticmethod
    def backward(ctx, grad):
        agg = ctx.aggregator
        agg.in_flight[ctx.layer] = agg.widths.post(grad.contiguous(), ("halo_bwd", ctx.layer))
        return None, None, None, None


def rows_of(adj: LocalAdjacency, rows: torch.Tensor, num_cols: int) -> LocalAdjacency:
    """`adj` restricted to `rows` (ascending) and to its first `num_cols` columns (which those rows'
    edges must stay within), each row's edges in their order, global degrees kept."""
    kept = torch.zeros(adj.num_rows, dtype=torch.bool, device=rows.device).index_fill_(0, rows, True)
    kept_edge = kept.index_select(0, adj.dst)
    counts = (adj.indptr[1:] - adj.indptr[:-1]).index_select(0, rows)
    scale = None if adj.edge_scale is None else adj.edge_scale[kept_edge]
    return LocalAdjacency(torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]), adj.src[kept_edge],
                          adj.row_deg[rows], adj.col_deg[:num_cols], scale, adj.attention_ignores_scale, adj.kernel)


class AdaQPAggregator(Aggregator):
    """Halo rows at their assigned widths; with `overlap`, central rows (no in-neighbour on another
    rank) aggregated from local rows while the halo rows travel, marginal rows after."""

    def __init__(self, ctx, widths: Widths, overlap: bool):
        self.adj, self.plan, self.comm, self.widths, self.overlap = ctx.adj, ctx.plan, ctx.comm, widths, overlap
        self.in_flight = {}  # layer -> the halo gradients posted in backward
        # Quantised rows must not be fetched again by a checkpoint's recompute (they would round
        # differently from the forward's): the forward's rows are replayed.
        self.replay = Replay(ctx.recompute, always=True)
        adj, n = ctx.adj, ctx.adj.num_rows
        marginal = torch.zeros(n, dtype=torch.bool, device=ctx.device)
        marginal[adj.dst[adj.src >= n]] = True
        self.central_rows, self.marginal_rows = (~marginal).nonzero().view(-1), marginal.nonzero().view(-1)
        self.central_adj = rows_of(adj, self.central_rows, n)  # local columns only
        self.marginal_adj = rows_of(adj, self.marginal_rows, adj.num_cols)
        self.unsplit = torch.argsort(torch.cat([self.central_rows, self.marginal_rows]))

    def aggregate(self, h: torch.Tensor, layer: int, aggregate):
        """`aggregate(adj, sources, rows)`: the aggregation of `rows` (None: all) of `adj` over
        `sources` ([local | halo] columns, or local only for the central rows)."""
        if self.comm.world == 1:
            return aggregate(self.adj, h, None)
        h = _Departure.apply(h, self, layer)
        replayed = self.replay.recompute.active and layer in self.replay.kept
        posted = None if replayed else self.widths.post(h.detach().index_select(0, self.plan.send_idx),
                                                        ("halo_fwd", layer))
        if self.overlap:
            central = aggregate(self.central_adj, h, self.central_rows)  # while the halo rows travel
        halo = _Arrival.apply(h, lambda: self.replay(self.comm, layer, lambda: posted.wait()), self, layer)
        sources = torch.cat([h, halo])
        if not self.overlap:
            return aggregate(self.adj, sources, None)
        marginal = aggregate(self.marginal_adj, sources, self.marginal_rows)
        return torch.cat([central, marginal]).index_select(0, self.unsplit)

    def propagate(self, h: torch.Tensor, norm: str, layer: int) -> torch.Tensor:
        self.widths.norms[layer] = norm
        return self.aggregate(h, layer, lambda adj, sources, rows: adj.spmm(norm, sources))

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        # Attention weights change every step; a row's score uses the mean weights (1 / in-degree),
        # the attention weights' average.
        self.widths.norms[layer] = "mean"
        n, heads, ch = z.shape

        def attend(adj, sources, rows):
            z_src = sources.view(-1, heads, ch)
            z_dst = z_src[:n] if rows is None else z_src.index_select(0, rows)
            return adj.attention(z_src, z_dst, att_src, att_dst, negative_slope)

        return self.aggregate(z.reshape(n, heads * ch), layer, attend)


# --------------------------------------------------------------------------- the method
class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        approximates = 'halo rows quantised per row to 2, 4 or 8 bits'
        claim = ('(Wan, Zhao, Wu, MLSys 2023) communication-bound multi-GPU training: fewer halo bytes, transfer '
                 'overlapped with central aggregation')
        exact_control = {"bits": 32}  # AdaQP-p: full_halo up to float order

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        # adaptive: per-row widths from {2, 4, 8}, re-assigned every assign_cycle epochs (AdaQP);
        # 8 | 4 | 2: every row at that width; 32: full precision (Vanilla / AdaQP-p: full_halo's bytes)
        bits: Literal["adaptive", 32, 8, 4, 2] = option("adaptive", "halo message widths")
        # aggregate central rows while the halo rows travel (AdaQP-p); false: wait, then aggregate all
        overlap: bool = option(True, "overlap central aggregation with the halo transfer")
        assign_cycle: int = option(20, "epochs between bit-width assignments", ge=1)
        # lambda: 1 minimises the variance alone (every row with a non-zero score at 8 bits), 0 the
        # busiest channel's transfer alone (it goes at 2 bits)
        variance_weight: float = option(0.5, "lambda, the variance's weight against the transfer time",
                                        ge=0, le=1)
        # rows of a channel sorted by score are assigned in groups of this many (the paper's 100-2000
        # keep its MILP small; the solver here handles every row on its own)
        group_size: int = option(1, "rows per assignment group", ge=1)

        def check(self, run) -> None:
            if run is not None and run.comm.quantize != "none":
                raise UserError("method=adaqp chooses its halo messages' widths itself (method.bits); "
                                "set comm.quantize=none")

    def __init__(self, ctx):
        options = ctx.options
        self.widths = Widths(ctx, options.bits, options.variance_weight, options.group_size)
        self.overlap, self.assign_cycle = options.overlap, options.assign_cycle
        super().__init__(ctx)

    def make_aggregator(self):
        return AdaQPAggregator(self.ctx, self.widths, self.overlap)

    def between_epochs(self, epoch: int) -> None:
        """The assignment runs between steps and is kept out of the epoch time, as the paper's."""
        if self.widths.adaptive and self.ctx.world > 1 and epoch and epoch % self.assign_cycle == 0:
            self.widths.reassign(epoch)

    def probes(self) -> dict:
        return {"adaqp": {
            "widths": self.widths.histogram(),  # rows this rank sends at each width, at the end
            "assign_s": self.widths.assign_s,  # outside the epoch times
            "assignments": self.widths.assignments,  # each: the epoch from which it holds, its seconds, widths
        }}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """full_halo's pattern with each row as `bits`-wide codes plus an fp32 offset and scale (32:
            plain fp32 rows); `adaptive` at 8 bits, every row's starting width. Sent while the central
            rows are aggregated under `overlap`."""
            import math

            from benchmarks.base.traffic import FLOAT, exchanged_layers, grad_allreduce, halo_pair
            bits = 8 if options.bits == "adaptive" else int(options.bits)
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank, cls.layer0_mode(options)):
                row = width * FLOAT if bits == 32 else math.ceil(width * bits / 8) + 2 * FLOAT
                out += halo_pair(layer, rank, row, grad, hidden=options.overlap)
            return out

