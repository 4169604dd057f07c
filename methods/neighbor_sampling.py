"""`neighbor_sampling`: GraphSAGE-style mini-batch training with per-layer fan-outs (Hamilton et al.,
NeurIPS 2017), data-parallel across workers as DistDGL does it.

Each rank draws mini-batches of `batch_size` seeds from its own training nodes; every rank takes the
same number of steps per epoch (ceil(largest rank's training nodes / batch_size); a rank with fewer
training nodes spreads them over as many, smaller batches). For each batch, hop 1 samples
`fanouts[0]` in-neighbours of every seed without replacement, hop 2 samples `fanouts[1]` of every
node the first hop reached (seeds included), and so on (-1: every neighbour). Each hop is one block
(message-flow graph) whose destinations come first among its sources; the model's last layer runs
on hop 1's block. Edge weights are the full-graph normalised weights times deg_v / sampled_v, so
each sampled aggregation is an unbiased estimate of the full one and equals it when every
neighbour is taken (mean aggregation becomes the mean over the sampled neighbours; GAT's softmax
runs over the sampled in-edges).

Graph stores (`store`):
  - `replicated`: every rank reads the whole graph (CSR and input features). On one machine the
    arrays are memory-mapped from the partition cache, so the ranks share one copy in the page cache.
    No sampling or feature traffic.
  - `partitioned`: every rank holds its part only. Each hop sends the frontier's ids to their
    owners, who sample from their own in-edges and answer with (neighbour id, neighbour degree)
    pairs (`sample_request`, `sample_response`); input features are fetched from their owners
    (`feature_request`, `feature_fetch`). This is DistDGL's layout with the sampling done where
    the edges live.
Both stores run the same sampler over the same neighbour lists, so their blocks have the same
distribution. Evaluation is the shared exact full-graph inference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.errors import UserError
from benchmarks.families.minibatch import Batch, BlockAggregator, MiniBatchMethod, check_fanouts, per_layer
from benchmarks.options import option
from benchmarks.sampling import sample_blocks


class Method(MiniBatchMethod):
    approximates = "samples each layer's neighbours (fan-outs) per mini-batch"
    claim = 'graphs too large for full-batch training: memory per step bounded by the fan-outs'
    @dataclass(frozen=True)
    class Options(MiniBatchMethod.Options):
        fanouts: list[int] = option(
            [15, 10, 5], "or -1 for every neighbour; one per layer, seeds' hop first, or one for every layer, "
            "e.g. method.fanouts=[15,10,5] or method.fanouts=[10]", ge=1, also=(-1,))
        batch_size: int = option(512, "seed nodes per worker and step", ge=1)
        # partitioned: owners sample and serve features (counted); replicated: the whole graph on every rank, shared
        store: Literal["partitioned", "replicated"] = option("partitioned")

        def check(self, run) -> None:
            check_fanouts("fanouts", self.fanouts, run)
            if run is not None and self.store == "replicated" and run.comm.quantize != "none" and not run.comm.quantize_grads:
                raise UserError(f"method.store=replicated fetches no rows from other ranks: comm.quantize={run.comm.quantize} "
                                "would quantise nothing (quantise the gradients with comm.quantize_grads=true, or use "
                                "method.store=partitioned)")

    def __init__(self, ctx):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.fanouts = per_layer(options.fanouts, ctx.cfg.layers)
        self.store = ctx.graph_store(options.store)
        self.lo = int(part.offsets[ctx.rank])
        self.train_nodes = part.train_mask.nonzero().squeeze(1)
        self.steps = max(1, -(-max(self.train_counts) // options.batch_size))
        # Batch s of rank r holds the s-th of `steps` near-equal slices of r's training nodes, so
        # every rank knows the global batch size of every step without communicating.
        slices = torch.tensor([[len(s) for s in torch.arange(c).tensor_split(self.steps)] for c in self.train_counts])
        self.global_batch = slices.sum(0).clamp(min=1).tolist()

    def steps_per_epoch(self) -> int:
        return self.steps

    def begin_epoch(self, epoch: int) -> None:
        perm = torch.randperm(self.train_nodes.numel(), generator=self.generator, device=self.train_nodes.device)
        self.batches = self.train_nodes[perm].tensor_split(self.steps)

    def sample(self, step: int):
        local_seeds = self.batches[step]
        blocks, inputs, edges = sample_blocks(self.store, local_seeds + self.lo, self.fanouts, self.generator,
                                             self.ctx.cfg.kernel)
        return local_seeds, blocks, inputs, edges, 1.0 / self.global_batch[step]

    def fetch(self, sampled) -> Batch:
        local_seeds, blocks, inputs, edges, weight = sampled
        x = self.store.features(inputs, 0)
        rows = torch.arange(local_seeds.numel(), device=x.device)
        return Batch(BlockAggregator(blocks, self.ctx.comm), x, rows, self.ctx.part.y[local_seeds], weight, edges)
