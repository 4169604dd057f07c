"""The canonical in-memory graph every dataset loads into, and the graph policy shared by all models.

Policy (applied once, before partitioning, identically for every method): the graph is made
undirected, existing self-loops are dropped and exactly one self-loop per node is added. Edges are
stored as an in-edge CSR (`indptr` over destinations, `indices` = sources), sorted by source within
each destination. Degrees therefore come from the whole graph and include the self-loop, so GCN's
symmetric normalisation and SAGE's mean are the same numbers whichever rank computes them.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Graph:
    name: str
    indptr: torch.Tensor  # int64 [N+1]: in-edges of node v are indices[indptr[v]:indptr[v+1]]
    indices: torch.Tensor  # int64 [E]: source node of each in-edge
    x: torch.Tensor  # float32 [N, F]
    y: torch.Tensor  # int64 [N]; -1 where a node has no label
    train_mask: torch.Tensor  # bool [N]
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        """Directed in-edges, self-loops included (an undirected edge counts twice)."""
        return self.indices.numel()

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    def in_degree(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def dst_index(self) -> torch.Tensor:
        """Destination of each in-edge, aligned with `indices`."""
        return torch.repeat_interleave(torch.arange(self.num_nodes), self.in_degree())

    def edge_index(self) -> torch.Tensor:
        """[2, E] (source, destination), PyG's convention, for baselines that take an edge list."""
        return torch.stack([self.indices, self.dst_index()])

    def summary(self) -> dict:
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "edges": self.num_edges,
            "features": self.num_features,
            "classes": self.num_classes,
            "train_nodes": int(self.train_mask.sum()),
            "val_nodes": int(self.val_mask.sum()),
            "test_nodes": int(self.test_mask.sum()),
            "degree_histogram": degree_histogram(self.in_degree()),
        }

    def fingerprint(self) -> str:
        """Content hash: any change to structure, features, labels or splits changes it."""
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.num_nodes},{self.num_edges},{self.num_features},{self.num_classes}".encode())
        for t in (self.indptr, self.indices, self.x, self.y, self.train_mask, self.val_mask, self.test_mask):
            h.update(memoryview(np.ascontiguousarray(t.numpy())).cast("B"))
        return h.hexdigest()


def from_edge_index(name: str, edge_index: torch.Tensor, num_nodes: int, x, y, train_mask, val_mask,
                    test_mask, num_classes: int) -> Graph:
    """Apply the graph policy to an arbitrary (possibly directed, duplicated) edge list.

    Every in-edge becomes one int64 key, dst * N + src: both directions of each edge that is not a
    self-loop, then one self-loop a node. One in-place sort of the keys both deduplicates (equal keys
    are neighbours) and yields CSR order: row v's sources are the keys in [v N, (v + 1) N), mod N.
    Beyond the input, the keys live once or twice at a time (before and after dropping repeats), with
    one edge list's worth of temporaries while they are made (docs/measurement.md, "An
    ogbn-products-sized graph on one machine")."""
    n = int(num_nodes)
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    kept = int(keep.sum())
    key = torch.empty(2 * kept + n, dtype=torch.int64)
    for half, (row, col) in enumerate(((dst, src), (src, dst))):
        out = key[half * kept:(half + 1) * kept]
        torch.mul(row[keep].long(), n, out=out)
        out.add_(col[keep])
    torch.mul(torch.arange(n), n + 1, out=key[2 * kept:])  # the self-loops, v * N + v
    del keep
    key.numpy().sort()  # in place: no index tensor, no sorted copy
    if key.numel() > 1:
        first = torch.ones(key.numel(), dtype=torch.bool)  # the first of every run of equal keys
        torch.ne(key[1:], key[:-1], out=first[1:])
        if not bool(first.all()):
            key = key[first]
        del first
    indptr = torch.searchsorted(key, torch.arange(n + 1) * n)  # row v starts at the first key >= v N
    y = y.long().clone()
    return Graph(name, indptr, key.remainder_(n), x.float().contiguous(), y, train_mask.bool(), val_mask.bool(),
                 test_mask.bool(), int(num_classes))


def permute(graph: Graph, perm: torch.Tensor) -> Graph:
    """Relabel nodes: new node i is old node perm[i]. Used to make each part a contiguous range.

    Each new row gathers its old row's in-edges and relabels their sources; one in-place sort of the
    key row * N + source then orders the sources within each row (a row's sources are distinct, so
    this is the one CSR order). At most three edge lists' worth of temporaries at a time."""
    n = graph.num_nodes
    new_of_old = torch.empty(n, dtype=torch.int64)
    new_of_old[perm] = torch.arange(n)
    deg = graph.in_degree()[perm]
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(deg, 0)
    key = new_of_old[graph.indices[concat_ranges(graph.indptr[perm], deg)]]
    key.add_(edge_rows(indptr).mul_(n))
    key.numpy().sort()  # in place
    return Graph(graph.name, indptr, key.remainder_(n), graph.x[perm], graph.y[perm], graph.train_mask[perm],
                 graph.val_mask[perm], graph.test_mask[perm], graph.num_classes)


def edge_rows(indptr: torch.Tensor) -> torch.Tensor:
    """The row (destination) of every entry of a CSR, in CSR order."""
    n = indptr.numel() - 1
    return torch.repeat_interleave(torch.arange(n, device=indptr.device), indptr[1:] - indptr[:-1],
                                   output_size=int(indptr[-1]) if n else 0)


def concat_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """cat([arange(s, s + l) for s, l in zip(starts, lengths)]), without a Python loop."""
    total = int(lengths.sum())
    shift = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths, output_size=total)
    return shift.add_(torch.arange(total, device=starts.device))


def degree_histogram(degrees: torch.Tensor) -> list[list[float]]:
    """In-degrees (self-loop included) in bins of about a factor sqrt(2) (each degree alone up to 8):
    [mean degree of the bin, nodes in it] per non-empty bin, lowest first. The cost model's
    sampled families draw their expected batch shapes from it (`benchmarks.base.traffic.Degrees`)."""
    d = degrees.double()
    if d.numel() == 0:
        return []
    bins = torch.where(d <= 8, d, torch.floor(2 * torch.log2(d.clamp(min=1))) + 3)
    out = []
    for b in torch.unique(bins).tolist():
        members = d[bins == b]
        out.append([round(float(members.mean()), 3), int(members.numel())])
    return out
