import pytest
import torch

from benchmarks.core.graph import from_edge_index, permute

pytestmark = pytest.mark.fast


def tiny_graph(edges, n):
    x = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    mask = torch.ones(n, dtype=torch.bool)
    return from_edge_index("tiny", torch.tensor(edges).t(), n, x, torch.zeros(n), mask, mask, mask, 1)


def edge_set(g):
    return set(map(tuple, g.edge_index().t().tolist()))


def test_policy_makes_the_graph_undirected_with_one_self_loop_per_node():
    # A directed edge, a duplicate, an existing self-loop and an isolated node (3).
    g = tiny_graph([[0, 1], [0, 1], [1, 2], [2, 2]], 4)
    assert edge_set(g) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 0), (1, 1), (2, 2), (3, 3)}
    assert g.num_edges == 8
    assert g.in_degree().tolist() == [2, 3, 2, 1]
    # In-edge CSR: sources of each destination are sorted.
    for v in range(g.num_nodes):
        srcs = g.indices[g.indptr[v]:g.indptr[v + 1]]
        assert torch.equal(srcs, srcs.sort().values)


def test_permute_relabels_structure_and_data_consistently():
    g = tiny_graph([[0, 1], [1, 2], [2, 3], [3, 4], [0, 4]], 5)
    perm = torch.tensor([3, 0, 4, 1, 2])
    h = permute(g, perm)
    old_of_new = perm.tolist()
    assert {(old_of_new[s], old_of_new[d]) for s, d in edge_set(h)} == edge_set(g)
    assert torch.equal(h.x, g.x[perm])
    assert g.fingerprint() != h.fingerprint()


# The policy and the relabelling as they were written before they sorted in place (commit 949f6ef):
# the partition cache's fingerprint and every synthetic number depend on their output, bit for bit.
def policy_before(edge_index, n):
    src, dst = edge_index[0].long(), edge_index[1].long()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    loops = torch.arange(n)
    src, dst = torch.cat([src, dst, loops]), torch.cat([dst, src, loops])
    key = torch.unique(dst * n + src)
    dst, src = key // n, key % n
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return indptr, src


def permute_before(graph, perm):
    n = graph.num_nodes
    new_of_old = torch.empty(n, dtype=torch.int64)
    new_of_old[perm] = torch.arange(n)
    deg = graph.in_degree()[perm]
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(deg, 0)
    offsets = torch.arange(graph.num_edges) - torch.repeat_interleave(indptr[:-1], deg)
    src = new_of_old[graph.indices[torch.repeat_interleave(graph.indptr[perm], deg) + offsets]]
    dst = torch.repeat_interleave(torch.arange(n), deg)
    return indptr, src[torch.argsort(dst * n + src)]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_policy_and_permute_give_the_same_bits_as_before(dtype):
    g = torch.Generator().manual_seed(0)
    n = 503  # the last 3 nodes isolated
    edges = torch.randint(0, n - 3, (2, 6000), generator=g)  # repeats, both directions of some edges
    edges[1, :40] = edges[0, :40]  # self-loops
    x = torch.randn(n, 3, generator=g)
    mask = torch.rand(n, generator=g) < 0.5
    graph = from_edge_index("t", edges.to(dtype), n, x, torch.arange(n) % 4, mask, ~mask, mask, 4)
    indptr, indices = policy_before(edges, n)
    assert graph.indptr.dtype == graph.indices.dtype == torch.int64
    assert torch.equal(graph.indptr, indptr) and torch.equal(graph.indices, indices)
    perm = torch.randperm(n, generator=g)
    relabelled = permute(graph, perm)
    indptr, indices = permute_before(graph, perm)
    assert torch.equal(relabelled.indptr, indptr) and torch.equal(relabelled.indices, indices)
    assert torch.equal(relabelled.x, graph.x[perm]) and torch.equal(relabelled.train_mask, graph.train_mask[perm])
    # No edge at all: only the self-loops.
    empty = from_edge_index("e", torch.zeros(2, 0, dtype=dtype), 3, x[:3], torch.zeros(3), mask[:3], mask[:3],
                            mask[:3], 1)
    assert empty.indptr.tolist() == [0, 1, 2, 3] and empty.indices.tolist() == [0, 1, 2]
