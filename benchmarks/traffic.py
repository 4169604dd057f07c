"""What a method moves per training epoch, as its plugin states it for the cost model
(`analysis.costmodel`, docs/projection.md): the `Rank` a plugin's `Method.traffic` hook is given, the
`Transfer`s it returns, and the small counts it states them from (a model's layer widths, its
parameters, the halo rows of an exchanged layer).

Runtime-side and torch-free: it imports nothing from `analysis/` or `methods/`, and reads a built
model (`benchmarks.models.GNN`) only through its `layers`, `exchanges()` and `parameters()`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

FLOAT = 4  # bytes per fp32 element: the projection covers fp32 runs (`analysis.projection.skip_reason`)


@dataclass(frozen=True)
class Rank:
    """One rank's share of the partition: local rows, their in-edges (halo sources included), halo
    rows, the peers it receives rows from, and the ranks of the run (`workers`: 0 where the caller
    does not say; `world` then takes every peer for a rank). Methods whose traffic is not the halo's
    (a broadcast of whole blocks, a switch of layouts) need the ranks, not the peers."""
    nodes: int
    edges: int
    halo: int
    peers: int
    workers: int = 0


@dataclass(frozen=True)
class Transfer:
    """One kind of traffic of one rank in one epoch (steady state: periodic traffic is averaged).
    `category` is the runtime's (`comm_bytes_by_category`), so the analytic traffic can be held to
    what runs count (tests/analysis/test_traffic_counts.py)."""
    category: str
    layer: int | None
    bytes: float
    calls: float
    messages: float
    hidden: bool = False  # the method overlaps it with compute (PipeGCN, DIGEST's posted syncs, SAR's prefetch)
    collective: bool = False  # an all-reduce of `bytes` (ring), not point-to-point rows


def world(rank: Rank) -> int:
    """The ranks of the run: `rank.workers`, or the rank and its peers where that is not stated."""
    return rank.workers or rank.peers + 1


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def in_width(model, layer: int) -> int:
    """The width of `layer`'s input rows (the features for layer 0)."""
    m = model.layers[layer]
    weight = getattr(m, "weight", None)
    if weight is None:
        weight = (getattr(m, "lin_l", None) or m.lin).weight
    return weight.shape[1]


def out_width(model, layer: int) -> int:
    """The width of `layer`'s output rows (heads concatenated or averaged for GAT)."""
    m = model.layers[layer]
    if hasattr(m, "heads"):
        return m.heads * m.out_per_head if m.concat else m.out_per_head
    weight = getattr(m, "weight", None)
    if weight is None:
        weight = (getattr(m, "lin_l", None) or m.lin).weight
    return weight.shape[0]


def attention(model) -> bool:
    """Whether the model has GAT layers (whose softmax is not linear)."""
    return any(hasattr(m, "heads") for m in model.layers)


def grad_allreduce(model) -> Transfer:
    """The gradient all-reduce of every step: one collective call, no point-to-point messages (its
    algorithm is the time model's)."""
    return Transfer("grad_allreduce", None, parameters(model) * FLOAT, 1, 0, collective=True)


def exchanged_layers(model, rank: Rank, layer0: str = "exchanged") -> Iterator[tuple[int, int, bool]]:
    """(layer, exchange width, whether gradients flow back) of each layer whose halo rows cross ranks
    every step: none without peers or in a layer that exchanges nothing (MLP); layer 0 only under
    `layer0: exchanged` (otherwise its inputs, which never change, are fetched once: `halo_inputs`,
    a setup cost, and transformed locally each step)."""
    if rank.peers == 0:
        return
    for layer, (width, grad) in enumerate(model.exchanges()):
        if not width or (layer == 0 and layer0 != "exchanged"):
            continue
        yield layer, width, grad


def halo_pair(layer: int, rank: Rank, row_bytes: float, grad: bool, share: float = 1.0, calls: float = 1,
              messages: float | None = None, hidden: bool = False) -> list[Transfer]:
    """A layer's halo rows (`halo_fwd`: `share` of the rank's halo, `row_bytes` each, in `calls`
    operations of `messages` messages, one per peer by default) and, where gradients flow back, as
    many gradient rows (`halo_bwd`). Rows are counted where they arrive, so summed over ranks they
    equal the bytes the runtime counts where they are sent."""
    messages = rank.peers if messages is None else messages
    nbytes = share * rank.halo * row_bytes
    out = [Transfer("halo_fwd", layer, nbytes, calls, messages, hidden)]
    if grad:
        out.append(Transfer("halo_bwd", layer, nbytes, calls, messages, hidden))
    return out


def full_halo(model, rank: Rank, layer0: str = "exchanged") -> list[Transfer]:
    """`full_halo`'s traffic, the exact baseline others change: the gradient all-reduce and, in every
    exchanged layer, every halo row at the layer's exchange width, forward and (where gradients flow)
    backward, in one operation of one message per peer."""
    out = [grad_allreduce(model)]
    for layer, width, grad in exchanged_layers(model, rank, layer0):
        out += halo_pair(layer, rank, width * FLOAT, grad)
    return out


def stale_tables(model, rank: Rank, copies: int = 1) -> float:
    """Bytes of tables that keep last epoch's halo rows of every layer >= 1 at the layer's input
    width (`copies`: 2 where the gradients are kept too)."""
    return sum(rank.halo * FLOAT * in_width(model, layer) * copies for layer in range(1, len(model.layers)))
