import pytest
import torch

from benchmarks.graph import from_edge_index, permute

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
