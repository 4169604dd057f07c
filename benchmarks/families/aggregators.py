"""`LocalAggregator`: aggregation over a rank's own rows plus, optionally, halo rows that carry no
gradient back. The partition-parallel family runs it over the part (cut edges dropped, or a stale
halo: DIGEST), the mini-batch family's subgraph samplers over a sampled subgraph; here, below both,
so that neither family imports the other."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import Aggregator, LocalAdjacency, Replay
from benchmarks.core.recompute import Recompute
from benchmarks.core.comm import Comm


class LocalAggregator(Aggregator):
    """Fresh local rows, plus (if `halo` is given) `halo(h, layer)`: rows for the halo columns,
    computed from the detached layer input (no gradient leaves the rank). Halo rows are layer
    *inputs*; layers that project first project them with the current weights, so a stale row is a
    stale representation, never a stale weight."""

    def __init__(self, adj: LocalAdjacency, comm: Comm, halo=None, *, recompute: Recompute):
        self.adj, self.comm, self.halo = adj, comm, halo
        self.recompute = recompute  # `ctx.recompute`, required (as `HaloAggregator`'s)
        # `halo` has side effects (a sync step's exchange): never run twice a step
        self.replay = Replay(self.recompute, always=True)

    def halo_rows(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return self.replay(self.comm, layer, lambda: self.halo(h.detach(), layer))

    def sources(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return h if self.halo is None else torch.cat([h, self.halo_rows(h, layer)])

    def propagate(self, h, norm: str, layer: int):
        return self.adj.spmm(norm, self.sources(h, layer))

    def projected_sources(self, h: torch.Tensor, weight: torch.Tensor, layer: int) -> torch.Tensor:
        """[h W^T | halo W^T], projecting the two blocks apart (no copy of the wider input rows)."""
        local = F.linear(h, weight)
        return local if self.halo is None else torch.cat([local, F.linear(self.halo_rows(h, layer), weight)])

    def propagate_linear(self, h, weight, norm: str, layer: int):
        return self.adj.spmm(norm, self.projected_sources(h, weight, layer))

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        raise NotImplementedError("GAT layers call attention_linear")

    def attention_linear(self, h, weight, heads: int, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        z_src = self.projected_sources(h, weight, layer).view(-1, heads, weight.shape[0] // heads)
        return self.adj.attention(z_src, z_src[:h.shape[0]], att_src, att_dst, negative_slope)

    def node_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t  # batch-norm statistics of this rank's nodes only
