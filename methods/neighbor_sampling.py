"""`neighbor_sampling`: GraphSAGE-style mini-batch training with per-layer fan-outs (Hamilton et al.,
NeurIPS 2017), data-parallel across workers as DistDGL does it.

Each rank draws mini-batches of `batch_size` seeds from its own training nodes, in the epoch's order
(each training node's place keyed by (seed, epoch, its dataset id): every rank takes its own nodes in
one global order, whatever P); every rank takes the same number of steps per epoch
(ceil(largest rank's training nodes / batch_size); a rank with fewer
training nodes spreads them over as many, smaller batches). For each batch, hop 1 samples
`fanouts[0]` in-neighbours of every seed without replacement, hop 2 samples `fanouts[1]` of every
node the first hop reached (seeds included), and so on (-1: every neighbour). Each hop is one block
(message-flow graph) whose destinations come first among its sources; the model's last layer runs
on hop 1's block. A node's draws at a layer are keyed by (seed, epoch, layer, its dataset id), not by
the step or the rank (benchmarks/core/sampling.py): its sampled in-edges are the same in every batch of the
epoch that reaches it, on whichever rank, whatever P; which nodes a rank's batch holds depends on the
training nodes it owns, i.e. on the partition. Edge weights are the full-graph normalised weights
times deg_v / sampled_v, so
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
Both stores run the same keyed sampler over the same neighbour lists in the same (dataset-id) order,
so their blocks are identical. Evaluation is the shared exact full-graph inference.

Feature cache (`feature_cache`, partitioned store only; docs/sampling.md, "Feature cache"): each
rank keeps the input features of up to `feature_cache` x N other ranks' nodes (N: the graph's nodes;
1.0 holds every remote node), chosen once before training and fetched once from their owners
(`cache_fill`, outside every epoch's bytes); a sampled input node found there is read locally, and
only the misses are fetched (`feature_request`, `feature_fetch`). What it holds (`cache_policy`):
  - `degree`: the remote nodes of highest degree, PaGraph's static policy (Lin et al., SoCC 2020:
    cache the nodes of highest out-degree, the ones most often drawn as neighbours; the suite's
    graphs are symmetric, so the in-degree the store keeps is the out-degree). Each rank's own
    nodes' degrees are sent to every other rank once (`cache_fill`, N x 8 bytes a rank);
  - `presample`: the remote nodes that were input nodes most often over `cache_presample_epochs`
    epochs sampled before training, GNNLab's PreSC (Yang et al., EuroSys 2022: pre-sampling-based
    hotness) and SALIENT++'s simulated vertex-inclusion probabilities (Kaler et al., MLSys 2023;
    its code, MITIBMxGraph/SALIENT_plusplus caching/vip.py `vip_simulation`, counts each
    partition's vertex accesses over 2 simulated epochs, zeroes the partition's own vertices and
    keeps the most accessed; its replication factor alpha is a cache of alpha x N / P rows, i.e.
    `feature_cache` = alpha / P here). Ties (nodes never drawn) go to the lower id. The pre-sampling
    draws are keyed by `presample` and the pre-sampled epoch, so it reads none of training's draws
    (keyed, not a stream: nothing is consumed) and training's batches, samples and dropout masks are
    those of a run without a cache; its hops are counted under `presample` (outside every epoch's bytes).
Rows come from a different place, never with different values: with the same seed, blocks and
losses are those of the run without a cache (tests/methods/test_feature_cache.py). Per rank, the
record's `summary.per_rank[]` has `cache_rows`, `cache_bytes` (rows and ids held), `cache_hits` and
`cache_misses` (remote input rows of every training step, read from the cache or fetched).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.base import traffic as cost
from benchmarks.base.errors import UserError
from benchmarks.families.minibatch import Batch, BlockAggregator, MiniBatchMethod, check_fanouts, per_layer
from benchmarks.base.options import option
from benchmarks.core.sampling import NodeDraws, sample_blocks


class Method(MiniBatchMethod):
    class About(MiniBatchMethod.About):
        approximates = "samples each layer's neighbours (fan-outs) per mini-batch"
        claim = ('(Hamilton et al., NeurIPS 2017) graphs too large for full-batch training: memory per step bounded '
                 'by the fan-outs')

    @dataclass(frozen=True)
    class Options(MiniBatchMethod.Options):
        fanouts: list[int] = option(
            [15, 10, 5], "or -1 for every neighbour; one per layer, seeds' hop first, or one for every layer, "
            "e.g. method.fanouts=[15,10,5] or method.fanouts=[10]", ge=1, also=(-1,))
        batch_size: int = option(512, "seed nodes per worker and step", ge=1)
        # partitioned: owners sample and serve features (counted); replicated: the whole graph on every rank, shared
        store: Literal["partitioned", "replicated"] = option("partitioned")
        # the partitioned store's cache of other ranks' input features, chosen and filled before training
        feature_cache: float = option(0.0, "remote input features each rank caches, as a fraction of the graph's "
                                      "nodes (0: no cache; 1: every remote node)", ge=0, le=1)
        cache_policy: Literal["degree", "presample"] = option(
            "degree", "what the cache holds: degree, the remote nodes of highest degree (PaGraph); presample, the "
            "remote nodes drawn most often over cache_presample_epochs epochs sampled before training "
            "(GNNLab, SALIENT++)")
        cache_presample_epochs: int = option(2, "epochs sampled before training to rank remote nodes "
                                             "(cache_policy=presample)", ge=1)

        def check(self, run) -> None:
            check_fanouts("fanouts", self.fanouts, run)
            if self.feature_cache > 0 and self.store == "replicated":
                raise UserError(f"method.feature_cache={self.feature_cache} caches other ranks' features, but "
                                "method.store=replicated reads every row locally; use method.store=partitioned "
                                "or method.feature_cache=0")
            if (run is not None and self.store == "replicated" and run.comm.quantize != "none"
                    and not run.comm.quantize_grads):
                raise UserError("method.store=replicated fetches no rows from other ranks: "
                                f"comm.quantize={run.comm.quantize} "
                                "would quantise nothing (quantise the gradients with comm.quantize_grads=true, or use "
                                "method.store=partitioned)")

    def __init__(self, ctx):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.fanouts = per_layer(options.fanouts, ctx.cfg.layers)
        self.store = ctx.graph_store(options.store)
        self.lo = int(part.offsets[ctx.rank])
        self.batch_seeds(options.batch_size)
        if options.feature_cache > 0:
            self.fill_cache()

    # ------------------------------------------------------------------ the feature cache
    def fill_cache(self) -> None:
        """Choose this rank's cached remote nodes by `cache_policy` and fetch their rows once. Every
        rank holds min(feature_cache x N, N - its nodes) rows; when that is every remote node on every
        rank, no rank ever asks for a row (known to all from the partition's sizes). Collective."""
        options, part, store = self.ctx.options, self.ctx.part, self.store
        offsets = part.offsets.tolist()
        n = offsets[-1]
        size = int(options.feature_cache * n)
        everywhere = all(size >= n - (hi - lo) for lo, hi in zip(offsets, offsets[1:]))
        score = self.presample_counts() if options.cache_policy == "presample" else self.global_degrees()
        score = score.double()
        score[self.lo:store.hi] = -1  # my own nodes are never cached
        rows = min(size, n - part.num_local)
        chosen = torch.sort(score, descending=True, stable=True).indices[:rows]  # ties: lower id first
        store.fill_cache(chosen, everywhere)

    def global_degrees(self) -> torch.Tensor:
        """Every node's degree: each rank's own nodes' degrees sent to every other rank (`cache_fill`)."""
        mine = self.ctx.part.deg[:self.ctx.part.num_local]
        return torch.cat(self.ctx.comm.all_to_all_v([mine] * self.ctx.world, "cache_fill"))

    def presample_counts(self) -> torch.Tensor:
        """How often each node was an input node of this rank's batches over `cache_presample_epochs`
        epochs sampled as training samples them, with draws keyed by `presample` (training's are keyed
        by their epochs: neither reads the other's). Hops are counted under `presample`. Collective."""
        options, n, draws = self.ctx.options, int(self.ctx.part.offsets[-1]), self.ctx.draws
        counts = torch.zeros(n, dtype=torch.int64, device=self.seed_batches.nodes.device)
        with self.store.counted_as("presample", "presample"):
            for epoch in range(options.cache_presample_epochs):
                for seeds in self.seed_batches.of_epoch(draws.epoch_key("presample", "order", epoch)):
                    _, inputs, _ = sample_blocks(self.store, seeds + self.lo, self.fanouts,
                                                 NodeDraws(draws.epoch_key("presample", "neighbors", epoch)),
                                                 self.ctx.cfg.kernel)
                    counts[inputs] += 1  # input nodes are distinct within a batch
        return counts

    def sample(self, step: int):
        local_seeds, weight = self.seeds(step)
        draws = NodeDraws(self.ctx.draws.epoch_key("neighbors"))  # a node's neighbours: the epoch's, not the step's
        blocks, inputs, edges = sample_blocks(self.store, local_seeds + self.lo, self.fanouts, draws,
                                             self.ctx.cfg.kernel)
        return local_seeds, blocks, inputs, edges, weight

    def fetch(self, sampled) -> Batch:
        local_seeds, blocks, inputs, edges, weight = sampled
        x = self.store.features(inputs, 0)
        rows = torch.arange(local_seeds.numel(), device=x.device)
        return Batch(BlockAggregator(blocks, self.ctx.comm, self.store.dataset_ids(inputs)), x, rows,
                     self.ctx.part.y[local_seeds], weight, edges)

    def probes(self) -> dict:
        out = super().probes()
        if self.ctx.options.store == "partitioned":
            cache = self.store.cache
            out.update(cache_rows=0 if cache is None else int(cache.ids.numel()),
                       cache_bytes=0 if cache is None else cache.nbytes,
                       cache_hits=self.store.cache_hits, cache_misses=self.store.cache_misses)
        return out

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(MiniBatchMethod.Cost):
        #: DistDGL-style training with a PaGraph cache of a tenth of the graph's nodes on every rank
        advise_variants = {"feature_cache=0.1": {"feature_cache": 0.1}}

        @classmethod
        def sampled(cls, options, model, rank):
            """The expected step (`traffic.sampled_shape` over the graph's degrees), the rows each hop adds
            and the share of a step's input rows another rank owns (partitioned store: a walk off the
            METIS part; `traffic.remote_rows`)."""
            degrees, layers = cost.degrees_of(rank), len(model.layers)
            steps = cls.steps(options, rank, options.batch_size)
            seeds = min(options.batch_size, rank.train / steps) if rank.train else options.batch_size
            shape, added = cost.sampled_shape(degrees, seeds, options.fanouts, layers, steps)
            world = cost.world(rank)
            cut = degrees.cut(world) if options.store == "partitioned" and world > 1 else 0.0
            return shape, added, cut

        @classmethod
        def shape(cls, options, model, rank):
            shape, _, _ = cls.sampled(options, model, rank)
            degrees = cost.degrees_of(rank)
            if options.store == "replicated":  # the whole graph on every rank (one copy per machine)
                return dataclasses.replace(shape, host_bytes=max(0.0, degrees.nodes - rank.nodes)
                                           * (cost.in_width(model, 0) * cost.FLOAT
                                              + cost.INDEX * (1 + degrees.edges / degrees.nodes)))
            cached = min(options.feature_cache * degrees.nodes, max(0.0, degrees.nodes - rank.nodes))
            return dataclasses.replace(shape, host_bytes=cached * (cost.in_width(model, 0) * cost.FLOAT + cost.INDEX))

        @classmethod
        def cache_hit_rate(cls, options, rank) -> float:
            """The expected share of remote input rows read from the cache (`traffic.cache_hit_rate`:
            highest degree first; the `presample` policy is taken to hold the same rows)."""
            degrees = cost.degrees_of(rank)
            remote = max(0.0, degrees.nodes - rank.nodes) / degrees.nodes
            return cost.cache_hit_rate(degrees, options.feature_cache, remote)

        @classmethod
        def step_traffic(cls, options, model, rank):
            """Partitioned store, per step: each hop's remote frontier ids to their owners (8 bytes each)
            and back their (count, degree) and every sampled edge's (neighbour, degree) (16 bytes each);
            the input rows not in the cache requested (8 bytes) and fetched (a feature row each)."""
            if options.store == "replicated" or rank.peers == 0:
                return []
            shape, added, cut = cls.sampled(options, model, rank)
            layers, peers, out = len(model.layers), rank.peers, []
            for hop in range(layers):  # hop h samples the frontier of hop h - 1 (model layer L - 1 - h)
                layer = layers - 1 - hop
                remote = cost.remote_rows(added[:hop + 1], cut)
                edges = shape.edges[layer] * remote / max(shape.out[layer], 1e-12)
                out += [cost.Transfer("sample_request", layer, remote * cost.INDEX, 1, peers),
                        cost.Transfer("sample_response", layer, (remote + edges) * 2 * cost.INDEX, 1, peers)]
            misses = cost.remote_rows(added, cut) * (1 - cls.cache_hit_rate(options, rank))
            return out + [cost.Transfer("feature_request", 0, misses * cost.INDEX, 1, peers),
                          cost.Transfer("feature_fetch", 0, misses * cost.in_width(model, 0) * cost.FLOAT, 1, peers)]


