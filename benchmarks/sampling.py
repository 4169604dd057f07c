"""Graph sampling primitives shared by the mini-batch family, the graph stores and benchmarks:
the vectorised neighbour sampler, block relabelling, block construction and induced subgraphs."""
from __future__ import annotations

import torch

from benchmarks.aggregation import LocalAdjacency
from benchmarks.graph import concat_ranges


def _pyg_lib_neighbor_sample():
    """pyg-lib's compiled neighbour sampler, or None when pyg-lib is not installed."""
    try:
        from pyg_lib.sampler import neighbor_sample
        return neighbor_sample
    except ImportError:
        return None


#: Which implementation `sample_neighbors` uses by default: pyg-lib's when it is installed.
SAMPLER = "pyg-lib" if _pyg_lib_neighbor_sample() is not None else "torch"


def sample_neighbors(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor, fanout: int,
                     generator: torch.Generator, sampler: str = SAMPLER) -> tuple[torch.Tensor, torch.Tensor]:
    """For each node of `nodes`, min(fanout, degree) of its in-edges drawn uniformly without
    replacement (all of them when fanout < 0). Returns (counts per node, positions of the drawn
    edges in the CSR's `indices`, grouped by node in the order of `nodes`).

    `torch` is vectorised (no Python loop over nodes), in three regimes, each uniform over the
    size-k subsets of a node's edges:
      - degree <= k: every edge;
      - k < degree <= 2k: k smallest of `degree` random keys (top-k over a padded [n, 2k] matrix);
      - degree > 2k: k draws with replacement, duplicates redrawn until none is left. Redrawing
        treats every value alike, so the resulting set is uniform; with degree > 2k a redraw round
        rarely finds more than a few duplicates.
    `pyg-lib` calls pyg-lib's compiled sampler one hop at a time (same distribution; its random
    stream is its own, seeded from torch's global generator, not `generator`)."""
    if sampler == "pyg-lib" and fanout >= 0 and indptr.device.type == "cpu":  # pyg-lib samples on the CPU
        row, _, _, edge_id, *_ = _pyg_lib_neighbor_sample()(indptr, indices, nodes, [fanout], replace=False,
                                                             directed=True, return_edge_id=True)
        order = torch.argsort(row, stable=True)
        return torch.bincount(row, minlength=nodes.numel()), edge_id[order]
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
            keys = torch.rand((medium.numel(), 2 * k), generator=generator, device=indptr.device)
            keys.masked_fill_(torch.arange(2 * k, device=indptr.device) >= deg[medium, None], 2.0)
            offsets = keys.topk(k, dim=1, largest=False, sorted=False).indices
            positions[(out_ptr[medium, None] + cols).reshape(-1)] = (start[medium, None] + offsets).reshape(-1)
        large = (deg > 2 * k).nonzero().squeeze(1)
        if large.numel():
            offsets = _distinct_draws(deg[large], k, generator)
            positions[(out_ptr[large, None] + cols).reshape(-1)] = (start[large, None] + offsets).reshape(-1)
    return counts, positions


def _distinct_draws(deg: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """[n, k] distinct uniform integers in [0, deg_i) per row (deg_i > 2k)."""
    draws = (torch.rand((deg.numel(), k), generator=generator, device=deg.device) * deg[:, None]).long()
    rows = torch.arange(deg.numel(), device=deg.device)
    while rows.numel():
        sub, _ = draws[rows].sort(dim=1)
        dup = torch.zeros_like(sub, dtype=torch.bool)
        dup[:, 1:] = sub[:, 1:] == sub[:, :-1]
        has = dup.any(1)
        rows, sub, dup = rows[has], sub[has], dup[has]
        fresh = (torch.rand(sub.shape, generator=generator, device=deg.device) * deg[rows, None]).long()
        draws[rows] = torch.where(dup, fresh, sub)
    return draws


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


def sample_blocks(store, seeds: torch.Tensor, fanouts: list[int], generator, kernel: str = "spmm"):
    """The blocks of one mini-batch in model order (layer 0 first), the input nodes (layer 0's
    sources) and the number of sampled edges. The blocks aggregate with `kernel`."""
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
