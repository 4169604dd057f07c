"""The `kernel` option (native | spmm | messages) and the `metis_edges` partitioner on their own, in
process: the per-edge message kernel (PyG's default path) and the native kernels give torch's CSR
kernel's results and gradients (tests/benchmarks/test_native.py holds the native kernels closer); a bad
value is one line before anything runs; balancing edges too
lowers the edge imbalance of a METIS partition of a skewed graph."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core.aggregation import KERNELS, LocalAdjacency
from benchmarks.core.datasets import synthetic
from benchmarks.base.errors import UserError
from benchmarks.core.partition import assign, build_parts, imbalance, order_by_part
from benchmarks.core.graph import permute
from benchmarks.run.runner import plan

pytestmark = pytest.mark.fast


def random_adjacency(kernel: str, rows=30, cols=45, edges=200, seed=0) -> LocalAdjacency:
    g = torch.Generator().manual_seed(seed)
    dst = torch.sort(torch.randint(0, rows, (edges,), generator=g)).values
    src = torch.randint(0, cols, (edges,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(dst, minlength=rows), 0)])
    deg = torch.randint(1, 9, (cols,), generator=g).float()
    return LocalAdjacency(indptr, src, deg[:rows], deg, kernel=kernel)


@pytest.mark.parametrize("norm", ["gcn", "mean"])
@pytest.mark.parametrize("kernel", ["messages", "native"])
def test_propagate_equals_spmm_with_gradients(norm, kernel):
    got, want = random_adjacency(kernel), random_adjacency("spmm")
    x = torch.randn(45, 7, dtype=torch.float32, requires_grad=True)
    up = torch.randn(30, 7, dtype=torch.float32)
    out = {}
    for name, adj in ((kernel, got), ("spmm", want)):
        y = adj.spmm(norm, x)
        (gx,) = torch.autograd.grad((y * up).sum(), x)
        out[name] = (y.detach(), gx, adj.spmm_t(norm, up))
    for a, b in zip(out[kernel], out["spmm"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["spmm"][1], out["spmm"][2])  # spmm_t is spmm's gradient


def test_attention_equals_spmm_with_gradients():
    heads, ch = 3, 5
    results = {}
    for kernel in KERNELS:
        adj = random_adjacency(kernel)
        torch.manual_seed(1)
        z_src = torch.randn(45, heads, ch, dtype=torch.float32, requires_grad=True)
        att_src = torch.randn(1, heads, ch, dtype=torch.float32, requires_grad=True)
        att_dst = torch.randn(1, heads, ch, dtype=torch.float32, requires_grad=True)
        up = torch.randn(30, heads, ch, dtype=torch.float32)
        y = adj.attention(z_src, z_src[:30], att_src, att_dst, 0.2)
        results[kernel] = (y.detach(), *torch.autograd.grad((y * up).sum(), (z_src, att_src, att_dst)))
    for kernel, tolerance in (("messages", 1e-6), ("native", 1e-5)):  # native sums the softmax in its own order
        for a, b in zip(results[kernel], results["spmm"]):
            torch.testing.assert_close(a, b, rtol=10 * tolerance, atol=tolerance)


def test_messages_attention_keeps_its_per_edge_messages_for_backward():
    """What sets `messages` apart from `spmm`: autograd saves the E x H x C gathered messages."""
    saved = []
    adj = random_adjacency("messages")
    z = torch.randn(45, 2, 4, requires_grad=True)
    att = torch.randn(1, 2, 4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        adj.attention(z, z[:30], att, att, 0.2)
    assert torch.Size([adj.nnz, 2, 4]) in saved
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        random_adjacency("spmm").attention(z, z[:30], att, att, 0.2)
    assert all(s[0] != adj.nnz or len(s) < 3 for s in saved)


def test_the_kernel_is_an_argument_of_the_adjacency_and_bad_names():
    assert random_adjacency("messages").kernel == "messages"
    indptr, src = torch.tensor([0, 1, 2]), torch.tensor([0, 1])
    assert LocalAdjacency(indptr, src, torch.ones(2), torch.ones(2)).kernel == "spmm"  # no process-wide default
    with pytest.raises(UserError, match=r"^unknown kernel 'csr'; choose one of: messages, native, spmm$"):
        random_adjacency("csr")


@pytest.mark.parametrize("overrides, message", [
    (["kernel=csr"], "unknown kernel 'csr'; choose one of: messages, native, spmm"),
    (["partitioner=metis_edge"], "unknown partitioner 'metis_edge'; choose one of: contiguous, metis, metis_edges,"),
])
def test_bad_values_are_one_line(make_cfg, overrides, message):
    with pytest.raises(UserError) as e:
        plan(make_cfg(*overrides))
    assert str(e.value).startswith(message) and len(str(e.value).splitlines()) == 1, str(e.value)


def test_kernel_messages_and_metis_edges_plan_as_given(make_cfg):
    """Both keys pass the schema and reach the run's typed configuration unchanged (nothing resolves
    `messages` to another kernel, nor `metis_edges` to another partitioner)."""
    p = plan(make_cfg("kernel=messages", "partitioner=metis_edges", "workers=2"))
    assert (p.cfg.kernel, p.cfg.partitioner, p.world) == ("messages", "metis_edges", 2)


def test_metis_edges_lowers_the_edge_imbalance_of_a_skewed_graph():
    graph = synthetic(nodes=4000, avg_degree=10, classes=4, features=4, homophily=0.8, feature_noise=1.0,
                      degree_skew=2.0, train_frac=0.2, val_frac=0.2, test_frac=0.5, seed=5)
    ratios = {}
    for partitioner in ("metis", "metis_edges"):
        perm, offsets = order_by_part(assign(graph, partitioner, 4, 0), 4)
        parts = build_parts(permute(graph, perm), offsets)
        ratios[partitioner] = imbalance(p.indices.numel() for p in parts)
        assert imbalance(p.num_local for p in parts) < 1.1, partitioner  # nodes stay balanced
    # METIS cannot meet all three constraints on this small graph (a third of its nodes have only a
    # self-loop), but the edge constraint still cuts the heaviest part's edges (1.73 -> 1.57 max/mean).
    assert ratios["metis_edges"] < ratios["metis"] - 0.1, ratios


def test_the_kernel_is_named_in_the_variant_and_left_out_of_the_setting(make_cfg):
    from benchmarks.run.method import method_defaults
    from benchmarks.run.record import config_hash, run_variant, setting_config
    cfg = make_cfg()
    vanilla = make_cfg("kernel=messages")
    # Another run (its own name), compared in the same setting as the default kernel's runs, its
    # variant naming the kernel: `sar` and `full_halo kernel=messages` land in one table.
    assert config_hash(vanilla) != config_hash(cfg) and setting_config(vanilla) == setting_config(cfg)
    defaults = method_defaults("full_halo")
    assert run_variant(vanilla, defaults) == "full_halo kernel=messages" and run_variant(cfg, defaults) == "full_halo"
