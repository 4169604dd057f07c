"""What DIGEST, PSGD-PA and LLCG share (not a method itself: the leading underscore keeps it out of
the registry).

Each rank trains on its own part, one full-partition step per epoch. Neighbours in other parts are
either dropped (PSGD-PA, LLCG: the part's own subgraph, normalised on its own degrees) or read from
a table of stale rows (DIGEST: the full row panel, normalised on global degrees). No gradient
crosses ranks through the graph. Parameters stay in step either by a gradient all-reduce every step
(`avg_every: null`) or by local steps with parameter averaging every `avg_every` steps, weighted by
each part's training nodes (`avg_weighting: train_count`, as LLCG's code) or uniformly (1/P, as
LLCG's paper). Local Adam state persists across averaging rounds; only the weights are averaged.

Batch-norm statistics stay on each rank (a per-step all-reduce of them would be the synchronous
traffic these methods avoid); running statistics are averaged with the parameters.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from benchmarks.aggregation import Aggregator, LocalAdjacency
from benchmarks.comm import Comm
from benchmarks.errors import UserError, choose
from benchmarks.method import Method, RankContext, sync_gradients
from benchmarks.partition import Part


def own_edges(part) -> tuple[torch.Tensor, torch.Tensor]:
    """The part's own subgraph as a square in-edge CSR (indptr, indices) over its local nodes: edges
    from halo columns (other parts) dropped, self-loops kept, order within each row unchanged."""
    keep = part.indices < part.num_local
    rows = torch.repeat_interleave(torch.arange(part.num_local, device=keep.device), part.indptr[1:] - part.indptr[:-1])
    counts = torch.bincount(rows[keep], minlength=part.num_local)
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]), part.indices[keep]


def local_block(part: Part) -> LocalAdjacency:
    """The part's own subgraph: in-edges from other parts dropped, degrees counted within the part
    (every node keeps its self-loop, so no degree is zero)."""
    indptr, indices = own_edges(part)
    deg = indptr[1:] - indptr[:-1]
    return LocalAdjacency(indptr, indices, deg, deg)


class LocalAggregator(Aggregator):
    """Fresh local rows, plus (if `halo` is given) `halo(h, layer)`: rows for the halo columns,
    computed from the detached layer input (no gradient leaves the rank). Halo rows are layer
    *inputs*; layers that project first project them with the current weights, so a stale row is a
    stale representation, never a stale weight."""

    def __init__(self, adj: LocalAdjacency, comm: Comm, halo=None):
        self.adj, self.comm, self.halo = adj, comm, halo

    def sources(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return h if self.halo is None else torch.cat([h, self.halo(h.detach(), layer)])

    def propagate(self, h, norm: str, layer: int):
        return self.adj.spmm(norm, self.sources(h, layer))

    def projected_sources(self, h: torch.Tensor, weight: torch.Tensor, layer: int) -> torch.Tensor:
        """[h W^T | halo W^T], projecting the two blocks apart (no copy of the wider input rows)."""
        local = F.linear(h, weight)
        return local if self.halo is None else torch.cat([local, F.linear(self.halo(h.detach(), layer), weight)])

    def propagate_linear(self, h, weight, norm: str, layer: int):
        return self.adj.spmm(norm, self.projected_sources(h, weight, layer))

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        raise NotImplementedError("GAT layers call attention_linear")

    def attention_linear(self, h, weight, heads: int, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        z_src = self.projected_sources(h, weight, layer).view(-1, heads, weight.shape[0] // heads)
        return self.adj.attention(z_src, z_src[:h.shape[0]], att_src, att_dst, negative_slope)

    def node_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t  # batch-norm statistics of this rank's nodes only


def model_state(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters and floating-point buffers (batch-norm running statistics): what averaging averages."""
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def average_model(model: torch.nn.Module, comm: Comm, weight: float, category: str) -> None:
    """In place: every tensor of `model_state` becomes sum over ranks of weight_r * tensor_r."""
    tensors = [t.data for t in model_state(model)]
    flat = comm.all_reduce(torch.cat([t.reshape(-1) for t in tensors]) * weight, category)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def averaged_copy(model: torch.nn.Module, comm: Comm, weight: float) -> torch.nn.Module:
    """The ranks' weighted average of `model` as a new model (evaluation between averaging rounds:
    what a server holding the averaged model would evaluate; training state untouched)."""
    model = copy.deepcopy(model)
    average_model(model, comm, weight, "eval")
    return model


def check_positive_int(key: str, value, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"method.{key}={value!r} must be a positive integer ({what})")


class ReplicaAveraging(Method):
    """How replicas of the model stay in step: a gradient all-reduce every step (`avg_every: null`)
    or local steps with parameter (and batch-norm statistic) averaging every `avg_every` steps,
    weighted by training nodes (`avg_weighting: train_count`) or uniformly; evaluation of the
    average whenever the replicas differ. Shared by the partition-parallel and mini-batch methods."""

    #: False for methods that need periodic averaging (PSGD-PA, LLCG).
    allows_gradient_allreduce = True

    @classmethod
    def check_config(cls, method_cfg: dict) -> None:
        avg_every = method_cfg.get("avg_every")
        if avg_every is not None or not cls.allows_gradient_allreduce:
            check_positive_int("avg_every", avg_every, "local steps between parameter averaging"
                               + (", or null for a gradient all-reduce every step" if cls.allows_gradient_allreduce else ""))
        choose("method.avg_weighting", method_cfg.get("avg_weighting", "train_count"), ("train_count", "uniform"))

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        m = ctx.method_cfg
        self.avg_every = m.get("avg_every")
        self.local_train = int(ctx.part.train_mask.sum())
        self.avg_weight = (self.local_train / ctx.part.num_train_global
                           if m.get("avg_weighting", "train_count") == "train_count" else 1.0 / ctx.world)
        # With a gradient all-reduce the parameters never differ, but local batch-norm statistics do.
        self.stateless = not any(b.is_floating_point() for b in ctx.model.buffers())
        self.replicas_equal = True

    def average_if_due(self, steps_done: int) -> bool:
        """After an optimizer step: average the replicas if a round ends here; True if it did."""
        self.replicas_equal = self.avg_every is None and self.stateless
        if self.avg_every is None or steps_done % self.avg_every:
            return False
        average_model(self.ctx.model, self.ctx.comm, self.avg_weight, "param_avg")
        self.replicas_equal = True
        return True

    def evaluation_model(self) -> torch.nn.Module:
        """Between averaging rounds the replicas differ: evaluate their average (what a server
        holding the averaged model would evaluate), leaving each rank's training state alone."""
        if self.replicas_equal or self.ctx.world == 1:
            return self.ctx.model
        return averaged_copy(self.ctx.model, self.ctx.comm, self.avg_weight)


class PartitionParallelMethod(ReplicaAveraging):
    """One step per epoch on the rank's part. Subclasses choose the halo (`make_aggregator`), may
    act before each forward (`before_forward`) and after each averaging round (`after_average`)."""

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.aggregator = self.make_aggregator()

    def make_aggregator(self) -> Aggregator:
        return LocalAggregator(local_block(self.ctx.part), self.ctx.comm)

    def before_forward(self, step: int) -> None:
        pass

    def after_average(self) -> None:
        pass

    def forward_backward(self, step: int, loss_scale: float) -> torch.Tensor:
        """Forward on the part, backward of (sum of training-node losses) * loss_scale; returns the
        detached loss sum."""
        ctx = self.ctx
        ctx.model.train()
        ctx.optimizer.zero_grad(set_to_none=True)
        self.before_forward(step)
        logits = ctx.model(ctx.part.x, self.aggregator)
        mask = ctx.part.train_mask
        loss_sum = F.cross_entropy(logits[mask], ctx.part.y[mask], reduction="sum")
        (loss_sum * loss_scale).backward()
        return loss_sum.detach()

    def train_epoch(self, epoch: int) -> torch.Tensor:
        ctx = self.ctx
        self.straggle()
        if self.avg_every is None:
            loss_sum = self.forward_backward(epoch, 1.0 / ctx.part.num_train_global)
            sync_gradients(ctx)
        else:
            # Local SGD: each rank minimises its own mean loss; averaging combines the ranks.
            loss_sum = self.forward_backward(epoch, 1.0 / max(1, self.local_train))
        ctx.optimizer.step()
        if self.average_if_due(epoch + 1):
            self.after_average()
        return loss_sum / ctx.part.num_train_global
