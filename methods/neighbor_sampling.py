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

import os
import shutil
from pathlib import Path

import numpy as np
import torch

from benchmarks.aggregation import LocalAdjacency
from benchmarks.errors import UserError, choose
from benchmarks.partition import load_part
from methods._partition_parallel import check_positive_int
from methods._sampling import Batch, BlockAggregator, MiniBatchMethod, concat_ranges, sample_neighbors

STORES = ("replicated", "partitioned")


def relabel(dst: torch.Tensor, neighbors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Source nodes of a block, destinations first: (column of each neighbour, source node ids =
    `dst` followed by the neighbours not among them, in id order)."""
    both = torch.cat([dst, neighbors])
    unique, inverse = torch.unique(both, return_inverse=True)
    first = torch.full((unique.numel(),), both.numel(), dtype=torch.int64, device=dst.device)
    first.scatter_reduce_(0, inverse, torch.arange(both.numel(), device=dst.device), "amin")
    new = first >= dst.numel()
    column = torch.where(new, dst.numel() + torch.cumsum(new, 0) - 1, first)
    return column[inverse[dst.numel():]], torch.cat([dst, unique[new]])


class ReplicatedStore:
    """The whole graph, read locally: global in-edge CSR, degrees and features."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor):
        self.indptr, self.indices, self.x = indptr, indices, x
        self.deg = indptr[1:] - indptr[:-1]

    def hop(self, nodes, fanout: int, generator, layer: int):
        """(sampled per node, neighbour ids, neighbour degrees, degrees of `nodes`)."""
        counts, positions = sample_neighbors(self.indptr, self.indices, nodes, fanout, generator)
        neighbors = self.indices[positions]
        return counts, neighbors, self.deg[neighbors], self.deg[nodes]

    def features(self, nodes, layer: int):
        return self.x[nodes]


def replicated_store(ctx) -> ReplicatedStore:
    """One in-process rank: its part is the whole graph. Several ranks: the whole graph assembled
    once from every part of the partition cache into `<cache>/replicated/` and memory-mapped
    copy-on-write (read-only use, so every rank shares the same pages)."""
    part = ctx.part
    if ctx.world == 1:
        return ReplicatedStore(part.indptr, part.indices, part.x)
    folder = Path(ctx.partition_folder) / "replicated"
    names = ("indptr", "indices", "x")
    # Each machine's first rank builds it (under torchrun, machines may not share a file system).
    if int(os.environ.get("LOCAL_RANK", ctx.rank)) == 0 and not folder.is_dir():
        tmp = folder.with_name(f"replicated.tmp-{os.uname().nodename}-{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            arrays = {name: [] for name in names}
            edges = 0
            for p in range(part.num_parts):
                q = load_part(ctx.partition_folder, p)
                lo = int(q.offsets[p])
                global_of_col = torch.cat([lo + torch.arange(q.num_local), q.halo_ids])
                arrays["indptr"].append(q.indptr[1:] + edges if p else q.indptr + edges)
                arrays["indices"].append(global_of_col[q.indices])
                arrays["x"].append(q.x)
                edges += q.indices.numel()
            for name in names:
                np.save(tmp / f"{name}.npy", torch.cat(arrays[name]).numpy())
            os.replace(tmp, folder)
        except OSError:  # another machine or run built it meanwhile
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    ctx.comm.barrier()
    try:
        tensors = [torch.from_numpy(np.load(folder / f"{name}.npy", mmap_mode="c")) for name in names]
    except (OSError, ValueError) as e:
        raise UserError(f"damaged replicated-graph cache {folder} ({e}); delete that folder and rerun") from e
    return ReplicatedStore(*(t.to(ctx.device) if ctx.device.type != "cpu" else t for t in tensors))


class PartitionedStore:
    """This rank's part only; neighbours of other ranks' nodes are sampled by their owners and
    their features fetched from them, through counted all-to-alls."""

    def __init__(self, ctx):
        part = self.part = ctx.part
        self.comm, self.offsets = ctx.comm, part.offsets.to(ctx.device)
        self.lo = int(part.offsets[ctx.rank])
        self.global_of_col = torch.cat([self.lo + torch.arange(part.num_local, device=ctx.device), part.halo_ids])

    def by_owner(self, nodes):
        """(order grouping `nodes` by owner, the grouped ids split per owner)."""
        owner = torch.bucketize(nodes, self.offsets[1:], right=True)
        order = torch.argsort(owner, stable=True)
        sizes = torch.bincount(owner, minlength=self.comm.world).tolist()
        return order, list(nodes[order].split(sizes))

    def hop(self, nodes, fanout: int, generator, layer: int):
        part = self.part
        order, asked = self.by_owner(nodes)
        requests = self.comm.all_to_all_v(asked, "sample_request", layer)
        # Serve every requester (myself included) with one sampler call over my own in-edges.
        local = torch.cat(requests) - self.lo
        counts, positions = sample_neighbors(part.indptr, part.indices, local, fanout, generator)
        cols = part.indices[positions]
        meta = torch.stack([counts, part.deg[local]], 1)
        edges = torch.stack([self.global_of_col[cols], part.deg[cols]], 1)
        sizes = [r.numel() for r in requests]
        edge_sizes = [int(c.sum()) for c in counts.split(sizes)]
        answers = [torch.cat([m, e]) for m, e in zip(meta.split(sizes), edges.split(edge_sizes))]
        replies = self.comm.all_to_all_v(answers, "sample_response", layer)
        metas = torch.cat([r[:len(a)] for r, a in zip(replies, asked)])
        edges = torch.cat([r[len(a):] for r, a in zip(replies, asked)])
        # Back from owner order to the order of `nodes`.
        counts = torch.empty_like(metas[:, 0])
        counts[order] = metas[:, 0]
        deg = torch.empty_like(counts)
        deg[order] = metas[:, 1]
        # The j-th request's edges (owner order) go where node order[j]'s edges start.
        place = concat_ranges((torch.cumsum(counts, 0) - counts)[order], metas[:, 0])
        neighbors, neighbor_deg = torch.empty_like(place), torch.empty_like(place)
        neighbors[place], neighbor_deg[place] = edges[:, 0], edges[:, 1]
        return counts, neighbors, neighbor_deg, deg

    def features(self, nodes, layer: int):
        order, asked = self.by_owner(nodes)
        requests = self.comm.all_to_all_v(asked, "feature_request", layer)
        rows = self.comm.all_to_all_v([self.part.x[r - self.lo] for r in requests], "feature_fetch", layer)
        x = torch.empty((nodes.numel(), self.part.x.shape[1]), dtype=self.part.x.dtype, device=nodes.device)
        x[order] = torch.cat(rows)
        return x


def sample_blocks(store, seeds: torch.Tensor, fanouts: list[int], generator):
    """The blocks of one mini-batch in model order (layer 0 first), the input nodes (layer 0's
    sources) and the number of sampled edges."""
    blocks, nodes, edges = [], seeds, 0
    for hop, fanout in enumerate(fanouts):
        layer = len(fanouts) - 1 - hop
        counts, neighbors, neighbor_deg, deg = store.hop(nodes, fanout, generator, layer)
        columns, sources = relabel(nodes, neighbors)
        source_deg = torch.empty_like(sources)
        source_deg[:nodes.numel()] = deg
        source_deg[columns] = neighbor_deg
        indptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        scale = (deg / counts.clamp(min=1)).to(torch.float32)
        blocks.append(LocalAdjacency(indptr, columns, deg, source_deg,
                                     edge_scale=torch.repeat_interleave(scale, counts)))
        edges += columns.numel()
        nodes = sources
    return blocks[::-1], nodes, edges


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
        self.store = replicated_store(ctx) if m["store"] == "replicated" else PartitionedStore(ctx)
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
