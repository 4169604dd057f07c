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

import torch

from benchmarks.errors import UserError, choose
from benchmarks.families.minibatch import Batch, BlockAggregator, MiniBatchMethod
from benchmarks.families.replicas import check_positive_int
from benchmarks.sampling import sample_blocks

STORES = ("replicated", "partitioned")


class Method(MiniBatchMethod):
    @classmethod
    def check_config(cls, method_cfg: dict) -> None:
        super().check_config(method_cfg)
        fanouts = method_cfg.get("fanouts")
        if not isinstance(fanouts, list) or not fanouts or not all(
                isinstance(k, int) and not isinstance(k, bool) and (k >= 1 or k == -1) for k in fanouts):
            raise UserError(f"method.fanouts={fanouts!r} must be a list of positive integers (or -1 for every "
                            "neighbour), one per layer, seeds' hop first, or one for every layer, e.g. "
                            "method.fanouts=[15,10,5] or method.fanouts=[10]")
        check_positive_int("batch_size", method_cfg.get("batch_size"), "seed nodes per worker and step")
        choose("method.store", method_cfg.get("store"), STORES)

    @classmethod
    def check_run(cls, cfg: dict) -> None:
        super().check_run(cfg)
        fanouts = cfg["method"]["fanouts"]
        if len(fanouts) not in (1, cfg["layers"]):
            raise UserError(f"method.fanouts={fanouts} has {len(fanouts)} entries but layers={cfg['layers']}; "
                            "give one fan-out per layer, or one for every layer")

    def __init__(self, ctx):
        super().__init__(ctx)
        m, part = ctx.method_cfg, ctx.part
        self.fanouts = list(m["fanouts"]) * (ctx.cfg["layers"] if len(m["fanouts"]) == 1 else 1)
        self.store = ctx.graph_store(m["store"])
        self.lo = int(part.offsets[ctx.rank])
        self.train_nodes = part.train_mask.nonzero().squeeze(1)
        self.steps = max(1, -(-max(self.train_counts) // m["batch_size"]))
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
        blocks, inputs, edges = sample_blocks(self.store, local_seeds + self.lo, self.fanouts, self.generator)
        return local_seeds, blocks, inputs, edges, 1.0 / self.global_batch[step]

    def fetch(self, sampled) -> Batch:
        local_seeds, blocks, inputs, edges, weight = sampled
        x = self.store.features(inputs, 0)
        rows = torch.arange(local_seeds.numel(), device=x.device)
        return Batch(BlockAggregator(blocks, self.ctx.comm), x, rows, self.ctx.part.y[local_seeds], weight, edges)
