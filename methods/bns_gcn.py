"""`bns_gcn`: BNS-GCN, boundary node sampling (Wan, Li, Li, Kim, Lin, MLSys 2022, arXiv 2203.10983).

Full-graph training on partitions, like `full_halo`, except that each epoch every owner i sends each
receiver j only s_ij = floor(p |B_ij|) of the boundary rows j needs from it (B_ij), drawn uniformly
without replacement, independently per pair (a node two peers need is sampled twice), a fresh draw
every epoch (p = `boundary_fraction`):
  - layer 0 is exact, by default as the authors' code with its required `--use-pp` (`layer0:
    precomputed`: the halo's input features fetched once, category `halo_inputs`, layer 0's
    aggregate computed once and dropped out every step; `families.partition_parallel.LAYER0`);
  - layers >= 1 aggregate over local rows plus the epoch's sampled halo rows (the same sample in
    every layer >= 1, forward and backward; categories `halo_fwd` / `halo_bwd`, as `full_halo`);
    edges from a sampled row of owner i are scaled by 1 / r_ij (r_ij = s_ij / |B_ij|, `scale:
    inverse_ratio`), so each layer's neighbour sum is an unbiased (Horvitz-Thompson) estimate given
    its input; degrees stay the global ones. GAT softmaxes over the edges present, unscaled.
Sender and receiver agree on the sample without sending ids: both rank B_ij by a hash of each global
id keyed by (seed, epoch, i, j) and keep the s_ij smallest; the receiver knows B_ij as its halo ids
from i, the sender as its rows for j, in the same order (`HaloPlan`). p = 1 is the exact control:
`full_halo` with the same `layer0` (plain `full_halo` only without dropout); p = 0 sends no halo
row in layers >= 1 (those rows zeroed, full-degree denominators).
What differs from the paper and the authors' code: docs/bns_gcn.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.core.aggregation import HaloAggregator, HaloPlan, keep_halo_rows, keyed_hash
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import LAYER0, LayerZeroExact, layer0_aggregator, layer0_option
from benchmarks.base.options import option


def kept_count(p: float, boundary: int) -> int:
    """s_ij = floor(p |B_ij|): how many of a pair's boundary rows are kept."""
    return math.floor(p * boundary)


def sample_pairs(ids: torch.Tensor, counts: list[int], pairs: list[tuple[int, int]], p: float, seed: int,
                 epoch: int, per_pair: bool = False) -> torch.Tensor:
    """Keep mask over `ids` (dataset ids, one segment of `counts[k]` ids per (owner, receiver) pair
    `pairs[k]`): in each segment the `kept_count` ids of smallest `keyed_hash(id, seed, epoch)`, ties
    broken by position. A uniform sample without replacement that depends only on the segment's ids
    and order, so both ends of a pair compute the same one. The hash is the node's, not the pair's
    (`draws=layout`): which of a pair's rows are kept depends on the layout only through which rows
    the pair has, as BNS-GCN defines it; `per_pair` (`draws=per_rank`) adds the pair to the key, an
    independent draw per pair as the authors' per-process generators give."""
    keep = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    start = 0
    for segment, pair in zip(ids.split(counts), pairs):
        order = torch.argsort(keyed_hash(segment, seed, epoch, *(pair if per_pair else ())), stable=True)
        keep[start + order[:kept_count(p, segment.numel())]] = True
        start += segment.numel()
    return keep


def boundary_sample(part, plan: HaloPlan, p: float, seed: int, epoch: int,
                    per_pair: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept halo columns, kept sent rows) of this rank for the epoch: as receiver, from each owner i;
    as owner, for each receiver j."""
    me, peers = part.rank, range(part.num_parts)
    kept_halo = sample_pairs(part.node_ids[part.num_local:], plan.recv_counts, [(i, me) for i in peers], p, seed,
                             epoch, per_pair)
    kept_sent = sample_pairs(part.node_ids.index_select(0, plan.send_idx), plan.send_counts,
                             [(me, j) for j in peers], p, seed, epoch, per_pair)
    return kept_halo, kept_sent


def inverse_ratio_scale(part, adj, plan: HaloPlan, p: float) -> torch.Tensor:
    """One factor per edge of `adj`: 1 from local columns, |B_ij| / s_ij from a halo column owned by
    peer i (1 where s_ij = 0: those edges are all dropped)."""
    inverse = [b / kept_count(p, b) if kept_count(p, b) else 1.0 for b in plan.recv_counts]
    halo = torch.repeat_interleave(torch.tensor(inverse, dtype=torch.float32),
                                   torch.tensor(plan.recv_counts, dtype=torch.int64))
    column = torch.cat([torch.ones(part.num_local), halo]).to(adj.src.device)
    return column.index_select(0, adj.src)


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        approximates = 'a random fraction p of the boundary rows each epoch, rescaled'
        claim = '(Wan et al., MLSys 2022) many partitions with large boundaries: halo bytes and memory cut by about p'
        exact_control = {"boundary_fraction": 1.0}

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        # p: each pair keeps floor(p |B_ij|) of its boundary rows in layers >= 1 (1: exact, the control)
        boundary_fraction: float = option(0.1, "share of each pair's boundary rows sent per epoch", ge=0, le=1)
        # inverse_ratio: kept rows weigh |B_ij| / s_ij (unbiased, the authors'); none: dropped rows just vanish
        scale: Literal["inverse_ratio", "none"] = option("inverse_ratio")
        # the authors' scripts all set `--use-pp` (their init_buffer refuses to run without it)
        layer0: Literal[LAYER0] = layer0_option("precomputed")

    def __init__(self, ctx):
        self.p = ctx.options.boundary_fraction
        self.kept_epoch0 = None  # rows received from each owner per layer >= 1 at epoch 0
        self.kept_total = 0  # rows received per layer >= 1, all epochs
        super().__init__(ctx)
        self.edge_scale = (inverse_ratio_scale(ctx.part, ctx.adj, ctx.plan, self.p)
                           if ctx.options.scale == "inverse_ratio" else None)
        self.first = layer0_aggregator(ctx, ctx.options.layer0)

    def make_aggregator(self):
        return None  # a new one every epoch (aggregator_for)

    def aggregator_for(self, epoch: int):
        ctx = self.ctx
        kept_halo, kept_sent = boundary_sample(ctx.part, ctx.plan, self.p, ctx.cfg.seed, epoch,
                                               per_pair=ctx.cfg.draws == "per_rank")
        adj, plan = keep_halo_rows(ctx.part, ctx.adj, ctx.plan, kept_halo, kept_sent, self.edge_scale,
                                   attention_ignores_scale=True)
        if self.kept_epoch0 is None:
            self.kept_epoch0 = plan.recv_counts
        self.kept_total += sum(plan.recv_counts)
        return LayerZeroExact(self.first, HaloAggregator(adj, plan, ctx.comm, recompute=ctx.recompute), ctx.comm)

    def probes(self) -> dict:
        boundary = self.ctx.plan.recv_counts
        by_owner = self.kept_epoch0 or [0] * len(boundary)
        return {"boundary_rows_kept": {
            "unit": ("halo rows this rank receives per layer >= 1 (its boundary rows from each owner: "
                     "boundary_by_owner)"),
            "by_owner_epoch0": by_owner, "boundary_by_owner": boundary, "total_all_epochs": self.kept_total,
            "fraction": sum(by_owner) / sum(boundary) if sum(boundary) else 0.0,
        }}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """full_halo's pattern over `boundary_fraction` of each pair's boundary rows."""
            from benchmarks.base.traffic import FLOAT, exchanged_layers, grad_allreduce, halo_pair
            out = [grad_allreduce(model)]
            for layer, width, grad in exchanged_layers(model, rank, cls.layer0_mode(options)):
                out += halo_pair(layer, rank, width * FLOAT, grad, share=options.boundary_fraction)
            return out

        @classmethod
        def kept_halo_rows(cls, options, rank):
            """The sampled boundary rows."""
            return rank.halo * options.boundary_fraction


