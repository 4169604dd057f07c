"""Graph sampling primitives shared by the mini-batch family, the graph stores and benchmarks:
the vectorised neighbour sampler, block relabelling, block construction and induced subgraphs.

A sampler's randomness is keyed (benchmarks/core/draws.py): `NodeDraws` gives each node its uniform values
from (key, the node's dataset id, slot), so what a node draws depends on the node and the key, never
on the rank that samples it, the batch around it or where it sits in a request. A node's in-edges are
drawn by position in its CSR row, so the stores keep every row in dataset-id order (`in_id_order`):
the j-th in-edge of a node is then the same edge whatever the partition."""
from __future__ import annotations

import torch

from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.draws import element_hash, element_hashes, key_of
from benchmarks.core.graph import concat_ranges, edge_rows

#: The sampler the record names (`summary.per_rank[].sampler`). pyg-lib's compiled sampler is not
#: offered: it draws from a stream of its own, which cannot be keyed by node.
SAMPLER = "torch"


class NodeDraws:
    """Uniform values in [0, 1) keyed by (key, node id, slot, round): `draws(ids, width, round)` is
    [len(ids), width] float64, row i a function of ids[i] alone. `layer(l)`: the draws of layer l."""

    def __init__(self, key: int):
        self.key = key

    def layer(self, layer: int) -> NodeDraws:
        return NodeDraws(key_of(self.key, "layer", layer))

    def __call__(self, ids: torch.Tensor, width: int, round: int = 0) -> torch.Tensor:
        return element_hashes(ids, width, key_of(self.key, "round", round)).double() / 2 ** 32


class StreamDraws:
    """`NodeDraws`' interface over a torch generator (draws by position in its stream, not by node):
    for tools and tests that sample outside training."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator

    def layer(self, layer: int) -> StreamDraws:
        return self

    def __call__(self, ids: torch.Tensor, width: int, round: int = 0) -> torch.Tensor:
        return torch.rand((ids.numel(), width), generator=self.generator, device=ids.device, dtype=torch.float64)


def node_draws(draws) -> NodeDraws | StreamDraws:
    """`draws` as a sampler takes it: a torch generator is read as a stream."""
    return StreamDraws(draws) if isinstance(draws, torch.Generator) else draws


def keyed_order(ids: torch.Tensor, key: int) -> torch.Tensor:
    """A random order of distinct dataset ids (< 2^31), as positions into `ids`: each node's place is a
    function of (key, node), so the order of any subset (a rank's training nodes) is the one global
    order restricted to it. Ties of the 32-bit hash go to the lower id."""
    ids = ids.to(torch.int64)
    return torch.argsort((element_hash(ids, key) << 31) | ids)


def in_id_order(indptr: torch.Tensor, indices: torch.Tensor, col_ids: torch.Tensor) -> torch.Tensor:
    """`indices` with every row's entries sorted by their column's dataset id (`col_ids[col]`): the one
    order of a node's in-edges whatever the layout. Returned as given when already in that order."""
    ids = col_ids.to(torch.int64).index_select(0, indices.long())
    key = edge_rows(indptr) * (int(col_ids.max()) + 1 if col_ids.numel() else 1) + ids
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        return indices
    return indices.index_select(0, torch.argsort(key))


def sample_neighbors(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor, fanout: int,
                     draws, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """For each node of `nodes`, min(fanout, degree) of its in-edges drawn uniformly without
    replacement (all of them when fanout < 0). Returns (counts per node, positions of the drawn
    edges in the CSR's `indices`, grouped by node in the order of `nodes`). `draws`: a `NodeDraws`
    (or a generator, read as a stream); `ids`: the nodes' dataset ids the draws are keyed by
    (default: `nodes`). With keyed draws, a node's sample is a function of (key, id, its CSR row).

    Vectorised (no Python loop over nodes), in three regimes, each uniform over the size-k subsets
    of a node's edges:
      - degree <= k: every edge;
      - k < degree <= 2k: k smallest of `degree` random keys (top-k over a padded [n, 2k] matrix);
      - degree > 2k: k draws with replacement, duplicates redrawn until none is left. Redrawing
        treats every value alike, so the resulting set is uniform; with degree > 2k a redraw round
        rarely finds more than a few duplicates."""
    draws = node_draws(draws)
    ids = nodes if ids is None else ids
    start = indptr[nodes]
    deg = indptr[nodes + 1] - start
    counts = deg if fanout < 0 else deg.clamp(max=fanout)
    out_ptr = torch.cumsum(counts, 0) - counts  # where each node's edges start in the output
    positions = torch.empty(int(counts.sum()), dtype=torch.int64, device=indptr.device)
    every = deg <= fanout if fanout >= 0 else torch.ones_like(deg, dtype=torch.bool)
    if every.any():
        idx = every.nonzero().squeeze(1)
        positions[concat_ranges(out_ptr[idx], counts[idx])] = concat_ranges(start[idx], counts[idx])
    if fanout >= 0:
        k = fanout
        cols = torch.arange(k, device=indptr.device)
        medium = ((deg > k) & (deg <= 2 * k)).nonzero().squeeze(1)
        if medium.numel():
            keys = draws(ids[medium], 2 * k)
            keys.masked_fill_(torch.arange(2 * k, device=indptr.device) >= deg[medium, None], 2.0)
            offsets = keys.topk(k, dim=1, largest=False, sorted=False).indices
            positions[(out_ptr[medium, None] + cols).reshape(-1)] = (start[medium, None] + offsets).reshape(-1)
        large = (deg > 2 * k).nonzero().squeeze(1)
        if large.numel():
            offsets = _distinct_draws(deg[large], k, draws, ids[large])
            positions[(out_ptr[large, None] + cols).reshape(-1)] = (start[large, None] + offsets).reshape(-1)
    return counts, positions


def _distinct_draws(deg: torch.Tensor, k: int, draws, ids: torch.Tensor) -> torch.Tensor:
    """[n, k] distinct uniform integers in [0, deg_i) per row (deg_i > 2k); round r of redraws is
    keyed by r, so a node's result depends on its own draws only."""
    picks = (draws(ids, k) * deg[:, None]).long()
    rows = torch.arange(deg.numel(), device=deg.device)
    round = 0
    while rows.numel():
        sub, _ = picks[rows].sort(dim=1)
        dup = torch.zeros_like(sub, dtype=torch.bool)
        dup[:, 1:] = sub[:, 1:] == sub[:, :-1]
        has = dup.any(1)
        rows, sub, dup = rows[has], sub[has], dup[has]
        round += 1
        fresh = (draws(ids[rows], k, round) * deg[rows, None]).long()
        picks[rows] = torch.where(dup, fresh, sub)
    return picks


def block_columns(dst: torch.Tensor, neighbors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Source nodes of a block, destinations first: (column of each neighbour, source node ids =
    `dst` followed by the neighbours not among them, in id order)."""
    both = torch.cat([dst, neighbors])
    unique, inverse = torch.unique(both, return_inverse=True)
    first = torch.full((unique.numel(),), both.numel(), dtype=torch.int64, device=dst.device)
    first.scatter_reduce_(0, inverse, torch.arange(both.numel(), device=dst.device), "amin")
    new = first >= dst.numel()
    column = torch.where(new, dst.numel() + torch.cumsum(new, 0) - 1, first)
    return column[inverse[dst.numel():]], torch.cat([dst, unique[new]])


def sample_blocks(store, seeds: torch.Tensor, fanouts: list[int], draws, kernel: str = "spmm"):
    """The blocks of one mini-batch in model order (layer 0 first), the input nodes (layer 0's
    sources, store ids) and the number of sampled edges. Layer l samples with `draws.layer(l)`
    (`NodeDraws`; a generator is read as a stream). The blocks aggregate with `kernel`. Every
    layer's sources are a prefix of the input nodes (destinations come first)."""
    draws = node_draws(draws)
    blocks, nodes, edges = [], seeds, 0
    for hop, fanout in enumerate(fanouts):
        layer = len(fanouts) - 1 - hop
        counts, neighbors, neighbor_deg, deg = store.hop(nodes, fanout, layer, draws.layer(layer))
        columns, sources = block_columns(nodes, neighbors)
        source_deg = torch.empty_like(sources)
        source_deg[:nodes.numel()] = deg
        source_deg[columns] = neighbor_deg
        indptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        scale = (deg / counts.clamp(min=1)).to(torch.float32)
        blocks.append(LocalAdjacency(indptr, columns, deg, source_deg,
                                     edge_scale=torch.repeat_interleave(scale, counts), attention_ignores_scale=True,
                                     kernel=kernel))
        edges += columns.numel()
        nodes = sources
    return blocks[::-1], nodes, edges


def induced_subgraph(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor,
                     num_cols: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The subgraph of an in-edge CSR induced by `nodes` (distinct ids; every column of `indices`
    below `num_cols`, by default the CSR's row count, i.e. a square CSR). Returns (indptr, indices,
    positions): row i is node nodes[i], columns are relabelled to positions in `nodes`, and
    positions[e] is where edge e sits in the original `indices`. Every in-edge of a chosen node
    whose source is also chosen is kept, in the original order within the row. Vectorised: the
    work is the in-degree sum of `nodes`, plus one O(num_cols) relabelling table."""
    device = indptr.device
    num_cols = indptr.numel() - 1 if num_cols is None else num_cols
    nodes = nodes.long()
    relabel = torch.full((num_cols,), -1, dtype=torch.int64, device=device)
    relabel[nodes] = torch.arange(nodes.numel(), device=device)
    start = indptr.index_select(0, nodes)
    deg = indptr.index_select(0, nodes + 1) - start
    positions = concat_ranges(start, deg)  # every in-edge of the chosen nodes, grouped by node
    cols = relabel.index_select(0, indices.index_select(0, positions))
    inside = cols >= 0
    # Kept edges before each node's first edge: the subgraph's row pointers, without a row per edge.
    kept_before = torch.cat([inside.new_zeros(1, dtype=torch.int64), torch.cumsum(inside, 0)])
    sub_indptr = kept_before.index_select(0, torch.cat([deg.new_zeros(1), torch.cumsum(deg, 0)]))
    keep = inside.nonzero().squeeze(1)
    return sub_indptr, cols.index_select(0, keep), positions.index_select(0, keep)
