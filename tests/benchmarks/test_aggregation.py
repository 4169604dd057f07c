"""The aggregation kernels on their own, against dense references on a tiny graph: the CSR sparse
matmul and its hand-written backward, the attention aggregation and its gradients."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import EdgeSpMM, LocalAdjacency, _SpMM

pytestmark = pytest.mark.fast

ROWS, COLS = 4, 6  # 4 local rows; columns are [4 local | 2 halo]
# In-edges (destination row, source column), grouped by destination; row 3 has none (as in a block).
EDGES = [(0, 0), (0, 1), (0, 4), (1, 0), (1, 1), (1, 5), (2, 1), (2, 2), (2, 4), (2, 5)]
ROW_DEG = torch.tensor([3.0, 4.0, 5.0, 1.0])  # global degrees, not the local in-edge counts
COL_DEG = torch.tensor([3.0, 4.0, 5.0, 1.0, 2.0, 6.0])


def adjacency(edge_scale: torch.Tensor | None = None) -> LocalAdjacency:
    dst = torch.tensor([d for d, _ in EDGES])
    src = torch.tensor([s for _, s in EDGES])
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(dst, minlength=ROWS), 0)])
    return LocalAdjacency(indptr, src, ROW_DEG, COL_DEG, edge_scale)


def dense(norm: str, edge_scale: torch.Tensor | None = None) -> torch.Tensor:
    """The normalised adjacency written out entry by entry."""
    out = torch.zeros(ROWS, COLS)
    for e, (v, u) in enumerate(EDGES):
        w = (ROW_DEG[v] * COL_DEG[u]).rsqrt() if norm == "gcn" else 1 / ROW_DEG[v]
        out[v, u] = w * (1.0 if edge_scale is None else edge_scale[e])
    return out


def dense_attention(z_src, z_dst, att_src, att_dst, negative_slope):
    """GAT written densely: masked logits, softmax per destination row, weighted sum per head."""
    el = (z_src * att_src).sum(-1)  # [COLS, H]
    er = (z_dst * att_dst).sum(-1)  # [ROWS, H]
    logits = F.leaky_relu(er[:, None, :] + el[None, :, :], negative_slope)  # [ROWS, COLS, H]
    mask = torch.zeros(ROWS, COLS, dtype=torch.bool)
    for v, u in EDGES:
        mask[v, u] = True
    alpha = torch.softmax(logits.masked_fill(~mask[:, :, None], float("-inf")), dim=1).nan_to_num(0.0)
    return torch.einsum("vuh,uhc->vhc", alpha, z_src)


@pytest.mark.parametrize("norm", ["gcn", "mean"])
def test_spmm_is_the_normalised_dense_product(norm):
    """spmm(norm, x) equals the dense normalised adjacency times x (empty rows give zeros)."""
    x = torch.randn(COLS, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(adjacency().spmm(norm, x), dense(norm) @ x)


@pytest.mark.parametrize("norm", ["gcn", "mean"])
def test_spmm_backward_is_the_transposed_product(norm):
    """The hand-written backward (precomputed A^T) gives the gradient autograd gives the dense product."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(COLS, 3, generator=g, requires_grad=True)
    upstream = torch.randn(ROWS, 3, generator=g)
    (adjacency().spmm(norm, x) * upstream).sum().backward()
    x_dense = x.detach().clone().requires_grad_()
    ((dense(norm) @ x_dense) * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_dense.grad)


def test_spmm_passes_gradcheck_in_float64():
    """_SpMM's analytic gradient matches finite differences (float64 weights and inputs)."""
    adj = adjacency()
    w = adj.edge_weights("gcn").double()
    A, At = adj.with_values(w), adj.with_values(w[adj.t_perm].contiguous(), transposed=True)
    x = torch.randn(COLS, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _SpMM.apply(A, At, t), (x,), fast_mode=True)


def test_edge_scale_multiplies_each_normalised_edge_weight():
    """A per-edge scale (a sampler's correction) multiplies the normalised weights, edge by edge."""
    scale = torch.linspace(0.5, 2.0, len(EDGES))
    x = torch.randn(COLS, 3, generator=torch.Generator().manual_seed(2))
    for norm in ("gcn", "mean"):
        torch.testing.assert_close(adjacency(scale).edge_weights(norm), adjacency().edge_weights(norm) * scale)
        torch.testing.assert_close(adjacency(scale).spmm(norm, x), dense(norm, scale) @ x)


def test_unknown_normalisation_names_the_valid_ones():
    """A misspelt normalisation is an error naming gcn and mean."""
    with pytest.raises(ValueError, match="unknown normalisation 'sym'; choose one of: gcn, mean"):
        adjacency().edge_weights("sym")


def _attention_inputs(dtype, heads=2, channels=3, seed=3):
    g = torch.Generator().manual_seed(seed)
    z_src = torch.randn(COLS, heads, channels, generator=g, dtype=dtype)
    att_src = torch.randn(1, heads, channels, generator=g, dtype=dtype)
    att_dst = torch.randn(1, heads, channels, generator=g, dtype=dtype)
    return z_src, att_src, att_dst


def test_attention_is_a_softmax_over_each_rows_in_edges():
    """attention() equals a dense masked softmax per destination and head, then the weighted sum."""
    z_src, att_src, att_dst = _attention_inputs(torch.float32)
    z_dst = z_src[:ROWS]
    got = adjacency().attention(z_src, z_dst, att_src, att_dst, 0.2)
    torch.testing.assert_close(got, dense_attention(z_src, z_dst, att_src, att_dst, 0.2))


def test_attention_gradients_match_the_dense_reference():
    """Gradients through attention (logits, softmax, EdgeSpMM) equal autograd of the dense version."""
    inputs = [t.requires_grad_() for t in _attention_inputs(torch.float32)]
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    upstream = torch.randn(ROWS, 2, 3, generator=torch.Generator().manual_seed(4))
    z, a_s, a_d = inputs
    (adjacency().attention(z, z[:ROWS], a_s, a_d, 0.2) * upstream).sum().backward()
    z, a_s, a_d = ref_inputs
    (dense_attention(z, z[:ROWS], a_s, a_d, 0.2) * upstream).sum().backward()
    for got, want in zip(inputs, ref_inputs):
        torch.testing.assert_close(got.grad, want.grad)


def test_attention_passes_gradcheck_in_float64():
    """The whole attention aggregation's gradients match finite differences in float64."""
    adj = adjacency()
    inputs = tuple(t.requires_grad_() for t in _attention_inputs(torch.float64))
    assert torch.autograd.gradcheck(lambda z, a_s, a_d: adj.attention(z, z[:ROWS], a_s, a_d, 0.2), inputs,
                                     fast_mode=True)


def test_edge_spmm_passes_gradcheck_in_float64():
    """EdgeSpMM's backward (transposed CSR for z, SDDMM for alpha) matches finite differences."""
    adj = adjacency()
    g = torch.Generator().manual_seed(5)
    alpha = torch.rand(len(EDGES), 2, generator=g, dtype=torch.float64, requires_grad=True)
    z = torch.randn(COLS, 2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, t: EdgeSpMM.apply(a, t, adj), (alpha, z), fast_mode=True)
