"""What a method moves and computes per training epoch, as its plugin states it for the cost model
(`analysis.costmodel`, docs/projection.md): the `Rank` a plugin's hooks are given (with the graph's
`Degrees`), the `Transfer`s its `traffic` hook returns, the `Shape` of one step its `shape` hook
returns where a step is not the whole part (the mini-batch, subgraph, local-round and one-device
families), and the small counts they are stated from: a model's layer widths, its parameters, the
halo rows of an exchanged layer, and the expected size of a sampled batch from the degree histogram
(`sampled_hops`, `walk_batch`, `cluster_batch`, `cache_hit_rate`).

Runtime-side and torch-free: it imports nothing from `analysis/` or `methods/`, and reads a built
model (`benchmarks.core.models.GNN`) only through its `layers`, `exchanges()` and `parameters()`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

FLOAT = 4  # bytes per fp32 element: the projection covers fp32 runs (`analysis.projection.skip_reason`)
INDEX = 8  # bytes per int64 id


@dataclass(frozen=True)
class Degrees:
    """What the sampled families' shapes are drawn from: the graph's in-degree histogram (`histogram`:
    (degree, nodes) pairs, self-loop included: `benchmarks.core.graph.degree_histogram`) and its METIS
    edge-cut shares by part count (`cuts`: (parts, share of edges cut) pairs, from the partition
    statistics)."""
    histogram: tuple[tuple[float, float], ...]
    cuts: tuple[tuple[int, float], ...] = ()

    @property
    def nodes(self) -> float:
        return sum(n for _, n in self.histogram)

    @property
    def edges(self) -> float:
        return sum(d * n for d, n in self.histogram)

    def cut(self, parts: float) -> float:
        """The share of edges a METIS cut into `parts` parts cuts: 0 for one part, the measured shares
        interpolated on log2(parts), held beyond the largest part count measured."""
        table = sorted({**dict(self.cuts), 1: 0.0}.items())
        if parts <= 1 or len(table) == 1:
            return 0.0
        for (p0, c0), (p1, c1) in zip(table, table[1:]):
            if parts <= p1:
                return c0 + (c1 - c0) * math.log2(parts / p0) / math.log2(p1 / p0)
        return table[-1][1]

    def part(self, parts: int) -> "Degrees":
        """One part's own subgraph of a METIS cut into `parts` (edges to other parts dropped): 1/parts of
        the nodes, each degree less the cut share (the self-loop kept)."""
        if parts <= 1:
            return self
        keep = 1 - self.cut(parts)
        return Degrees(tuple((1 + (d - 1) * keep, n / parts) for d, n in self.histogram),
                       tuple((p / parts, c) for p, c in self.cuts if p > parts))


@dataclass(frozen=True)
class Shape:
    """One rank's training step where it is not one pass over the whole part (full-graph methods
    state none: their step is the part, every layer on its rows and edges). Per model layer, layer 0
    first: the rows it reads (`rows`: its sources, which its dense transform runs on), the edges it
    aggregates over and the rows it writes (`out`). `steps` such steps per epoch; per step,
    `sampled_edges` drawn by the sampler, `subgraph_edges` in-edges an induced subgraph's construction
    scans (`sampling.induced_subgraph`: every in-edge of the batch's nodes), and `host_rows` input rows
    copied from host memory to the device (where the graph and features stay in host memory:
    `on_host`, as DistDGL and GAS keep them); `gathered`: the step gathers its input rows into a new
    tensor (a batch's inputs).
    `host_bytes`: what else the rank keeps in host memory (a feature cache, GAS's histories).
    `largest`: where an epoch's steps differ (LLCG's server steps beside the local ones), its largest
    step, which memory is taken at (time is priced at this shape: steps of the mean)."""
    steps: float
    rows: tuple[float, ...]
    edges: tuple[float, ...]
    out: tuple[float, ...]
    sampled_edges: float = 0.0
    subgraph_edges: float = 0.0
    host_rows: float = 0.0
    on_host: bool = True
    gathered: bool = True
    host_bytes: float = 0.0
    largest: "Shape | None" = None


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
    train: float = 0  # its training nodes (the mini-batch families' steps)
    graph: Degrees | None = None  # the whole graph's degrees and cuts (the sampled families' shapes)


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
    host: bool = False  # between host memory and the rank's device (GAS's histories), not between ranks


def world(rank: Rank) -> int:
    """The ranks of the run: `rank.workers`, or the rank and its peers where that is not stated."""
    return rank.workers or rank.peers + 1


def degrees_of(rank: Rank) -> Degrees:
    """The graph's degrees the rank was given, or, where none were (a hand-made rank), a graph of its
    ranks' nodes all at the rank's average degree."""
    if rank.graph is not None:
        return rank.graph
    return Degrees(((rank.edges / max(rank.nodes, 1), rank.nodes * world(rank)),))


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


# ---------------------------------------------------------------- expected batch shapes
# Mean-field expectations over the degree histogram: a node is drawn as a neighbour with probability
# proportional to its degree (the suite's graphs are symmetric), independently per draw, except for
# what the sampler's own structure makes certain (`sampled_hops`). A graph whose neighbourhoods overlap
# more than chance (triangles, small components) has fewer unique rows than these say; docs/projection.md
# gives the measured ratios (`python -m benchmarks.tools.sampler_bench --frontier`).

def _bins(degrees: Degrees) -> list[tuple[float, float]]:
    return [(float(d), float(n)) for d, n in degrees.histogram if n > 0]


def _expand(degrees: Degrees, seeds: float, fanouts: list[float], walkers: float = 0.0) -> list[tuple]:
    """Per hop from `seeds` uniform seeds: (expected frontier rows, edges drawn, distinct edges drawn
    other than self-loops, each degree bin's chance of being in the frontier). The frontier keeps its
    rows. Neighbour sampling (`walkers` 0): every frontier row draws min(fanout, d) of its in-edges
    (every one for -1) without replacement. Random walks: `walkers` walks share the rows the last hop
    added (the seeds first), each drawing one edge, with replacement. Of a row's draws only those that
    can reach a row not yet in the frontier are placed by chance, by degree: not its self-loop, not
    the edge back to the row it was reached from, and not an edge it drew at an earlier hop (a row's
    share of undrawn edges falls by the share it draws). Each row is tracked by the hop that added it
    (`cohorts`: chance of being in the frontier, share of its edges undrawn)."""
    bins, edges = _bins(degrees), degrees.edges
    nodes = sum(n for _, n in bins)
    cohorts = [[(min(1.0, seeds / nodes), 1.0)] for _ in bins]  # the seeds: every edge undrawn
    out = []
    for f in fanouts:
        # walks: the walkers share the rows the last hop added
        walks_per_row = walkers / max(sum(n * rows[-1][0] for (_, n), rows in zip(bins, cohorts)), 1e-12) \
            if walkers else 0.0

        def draws(d: float) -> float:  # distinct edges a drawing row of in-degree d draws
            if walkers:
                return d * (1 - (1 - 1 / d) ** walks_per_row)
            return d if f < 0 else min(f, d)

        drawn = distinct = placed = 0.0
        for (d, n), rows in zip(bins, cohorts):
            drawing = rows[-1:] if walkers else rows
            drawn += n * (walks_per_row if walkers else draws(d)) * sum(q for q, _ in drawing)
            distinct += n * draws(d) * (d - 1) / d * sum(q for q, _ in drawing)
            placed += n * draws(d) * (d - 1) / d * sum(q * undrawn for q, undrawn in drawing)
        for (d, _), rows in zip(bins, cohorts):
            added = (1 - sum(q for q, _ in rows)) * (1 - math.exp(-placed * d / edges))
            first_drawing = len(rows) - 1 if walkers else 0  # the rows that drew lose the share they drew
            rows[:] = [(q, undrawn * (1 - draws(d) / d) if i >= first_drawing else undrawn)
                       for i, (q, undrawn) in enumerate(rows)] + [(added, (d - 2) / (d - 1) if d > 1 else 0.0)]
        chances = [sum(q for q, _ in rows) for rows in cohorts]
        out.append((sum(n * c for (_, n), c in zip(bins, chances)), drawn, distinct, chances))
    return out


def sampled_hops(degrees: Degrees, seeds: float, fanouts: list[int]) -> list[tuple[float, float]]:
    """Expected (frontier rows, sampled edges) after each hop of neighbour sampling from `seeds`
    uniform seeds, seeds' hop first: hop h draws min(fanout, degree) in-edges (every one for -1) of
    every row of the frontier before it (seeds included), and the frontier keeps its rows (`_expand`)."""
    return [(rows, drawn) for rows, drawn, _, _ in _expand(degrees, seeds, fanouts)]


def sampled_shape(degrees: Degrees, seeds: float, fanouts: list[int], layers: int,
                  steps: float) -> tuple[Shape, list[float]]:
    """`steps` steps of neighbour sampling from `seeds` seeds each: the model's last layer runs on hop
    1's block, its first on the last hop's. And the rows each hop adds (seeds first), which
    `remote_rows` reads."""
    fanouts = (list(fanouts) * layers)[:layers] if len(fanouts) == 1 else list(fanouts)
    hops = sampled_hops(degrees, seeds, fanouts)
    frontier = [seeds] + [rows for rows, _ in hops]
    rows = tuple(frontier[layers - layer] for layer in range(layers))
    out = tuple(frontier[layers - layer - 1] for layer in range(layers))
    edges = tuple(hops[layers - layer - 1][1] for layer in range(layers))
    added = [seeds] + [b - a for a, b in zip(frontier, frontier[1:])]
    return Shape(steps, rows, edges, out, sampled_edges=sum(edges), host_rows=frontier[-1]), added


def remote_rows(added: list[float], cut: float) -> float:
    """Of a sampled batch's input rows (`added`: the rows each hop adds, seeds first), those another
    rank owns: the seeds are the rank's own, a row first reached at hop h lies off the part with the
    chance of an h-step walk leaving it, 1 - (1 - cut)^h."""
    return sum(a * (1 - (1 - cut) ** h) for h, a in enumerate(added))


def cache_hit_rate(degrees: Degrees, cached_share: float, remote_share: float) -> float:
    """Share of remote sampled rows a cache of the highest-degree remote nodes holds (PaGraph's
    policy), `cached_share` of the graph's nodes among `remote_share` of them remote: a row is drawn
    with chance proportional to its degree, so the cache holds the top-degree share of the draws."""
    if cached_share <= 0 or remote_share <= 0:
        return 0.0
    left, held, total = min(1.0, cached_share / remote_share), 0.0, 0.0
    for d, n in sorted(_bins(degrees), reverse=True):
        share = n / degrees.nodes
        take = min(share, left)
        held, left, total = held + take * d, left - take, total + share * d
    return held / total if total else 0.0


def walk_batch(degrees: Degrees, roots: float, length: int, pool: float) -> tuple[float, float, float]:
    """GraphSAINT's random-walk subgraph: expected (nodes, induced edges, in-edges of its nodes) of
    `roots` roots drawn with replacement from `pool` training nodes, each walking `length` steps
    (`_expand`'s walks). Its edges: a self-loop per node, each distinct walked edge both ways, or,
    where more, the pairs of sampled nodes the graph joins (mean-field)."""
    distinct = pool * (1 - math.exp(-roots / pool)) if pool else roots
    hops = _expand(degrees, distinct, [1] * length, walkers=roots)
    bins, edges = _bins(degrees), degrees.edges
    if not hops:
        return distinct, distinct, distinct * edges / sum(n for _, n in bins)
    sampled, chances = hops[-1][0], hops[-1][3]
    scanned = sum(n * d * q for (d, n), q in zip(bins, chances))
    induced = sum(n * q * (d - 1) for (d, n), q in zip(bins, chances)) * scanned / edges  # x chance an edge end is in
    return sampled, sampled + max(2 * sum(h[2] for h in hops), induced), scanned


def cluster_batch(part_nodes: float, part_edges: float, cut: float, clusters: int, chosen: int) -> tuple[float, float]:
    """A batch of `chosen` of `clusters` METIS clusters of a part (`part_nodes`, `part_edges` its own
    in-edges, `cut`: the share of them a cut into `clusters` cuts): expected (nodes, edges): each
    cluster's own edges, and a cut edge kept when its other cluster is among the chosen."""
    share = min(chosen, clusters) / clusters
    others = (chosen - 1) / (clusters - 1) if clusters > 1 else 1.0
    return part_nodes * share, part_edges * share * ((1 - cut) + cut * others)
