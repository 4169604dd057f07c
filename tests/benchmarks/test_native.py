"""The native kernels (benchmarks/core/native.c) against torch's: CSR products and their transposes at
widths around the register tile, rows without edges, attention with gradients, independence of the
thread count; dropout's hashed mask (its rate, its reproducibility, backward re-deriving it and keeping
nothing); and a machine that cannot build them: one line, then torch's kernels."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from benchmarks import PROJECT_ROOT
from benchmarks.core import native
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.draws import Draws, element_hash, keep_mask, torch_element_hash

pytestmark = [pytest.mark.fast,
              pytest.mark.skipif(native.unavailable() is not None, reason=f"native kernels: {native.unavailable()}")]

ROOT = PROJECT_ROOT


def adjacency(kernel: str, rows=300, cols=420, edges=4000, seed=0) -> LocalAdjacency:
    g = torch.Generator().manual_seed(seed)
    dst = torch.sort(torch.randint(0, rows - rows // 15, (edges,), generator=g)).values  # the last rows: no edges
    src = torch.randint(0, cols, (edges,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(dst, minlength=rows), 0)])
    deg = torch.randint(1, 9, (cols,), generator=g).float()
    return LocalAdjacency(indptr, src, deg[:rows], deg, kernel=kernel)


@pytest.mark.parametrize("width", [1, 7, 64, 100, 256])
def test_products_and_gradients_equal_torch_csr(width):
    x = torch.randn(420, width, requires_grad=True)
    up = torch.randn(300, width)
    out = {}
    for kernel in ("native", "spmm"):
        adj = adjacency(kernel)
        y = adj.spmm("gcn", x)
        (gx,) = torch.autograd.grad((y * up).sum(), x)
        out[kernel] = (y.detach(), gx, adj.spmm_t("mean", up))
    for a, b in zip(out["native"], out["spmm"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert out["native"][0][-20:].abs().sum() == 0  # rows without edges are zero, not left uninitialised


def test_threads_do_not_change_results():
    adj, x = adjacency("native"), torch.randn(420, 96)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(adj.spmm("mean", x))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(results[0], r) for r in results[1:])


@pytest.mark.parametrize("heads, channels", [(1, 8), (4, 16), (3, 5)])
def test_attention_equals_torch_csr_with_gradients(heads, channels):
    results = {}
    for kernel in ("native", "spmm"):
        adj = adjacency(kernel)
        torch.manual_seed(1)
        z = torch.randn(420, heads, channels, requires_grad=True)
        att_src, att_dst = (torch.randn(1, heads, channels, requires_grad=True) for _ in range(2))
        up = torch.randn(300, heads, channels)
        y = adj.attention(z, z[:300], att_src, att_dst, 0.2)
        results[kernel] = (y.detach(), *torch.autograd.grad((y * up).sum(), (z, att_src, att_dst)))
    for a, b in zip(results["native"], results["spmm"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_only_fp32_cpu_tensors_take_the_native_path():
    adj = adjacency("native", rows=30, cols=45, edges=200)
    assert adj.native(torch.randn(45, 3)) and not adj.native(torch.randn(45, 3, dtype=torch.float64))
    assert not adjacency("spmm").native(torch.randn(45, 3))


def dropout_mask(rows: int, width: int, p: float, key: int, ids=None) -> torch.Tensor:
    """The native keep mask of `key` for a rows x width matrix: where dropout of ones is not zero."""
    ids = torch.arange(rows) if ids is None else ids
    return native.dropout_rows(torch.ones(rows, width), p, key, ids) != 0


def test_dropout_mask_rate_reproducibility_and_independence():
    rows, width, p = 10_000, 100, 0.3
    keep = dropout_mask(rows, width, p, key=12345).flatten()
    assert abs(keep.float().mean().item() - (1 - p)) < 0.002  # binomial sd is 0.0005
    assert torch.equal(keep, dropout_mask(rows, width, p, key=12345).flatten())
    other = dropout_mask(rows, width, p, key=12346).flatten()
    both = (keep & other).float().mean().item()
    assert abs(both - (1 - p) ** 2) < 0.002  # two keys: independent masks, not shifted copies
    shifted = (keep[1:] & keep[:-1]).float().mean().item()
    assert abs(shifted - (1 - p) ** 2) < 0.002  # neighbouring elements independent


@pytest.mark.parametrize("width", [1, 7, 64, 130])
def test_native_and_torch_masks_are_one_function_of_node_and_column(width):
    """native.c's hash and draws.py's torch arithmetic agree bit for bit (ids up to 2^31, keys of 64 bits),
    so the mask depends on neither the kernel nor the device."""
    g = torch.Generator().manual_seed(width)
    ids = torch.randint(0, 2 ** 31, (500,), generator=g)
    for key in (0, 12345, 2 ** 63 - 25, 0xDEADBEEF12345678):
        in_torch = torch_element_hash(ids[:, None] * width + torch.arange(width), key) >= int(0.4 * 2 ** 32)
        assert torch.equal(dropout_mask(500, width, 0.4, key, ids), in_torch)
        assert torch.equal(keep_mask(ids, width, 0.4, key), in_torch)  # the samplers' hash, through native.c


def test_the_samplers_hash_is_native_cs_and_torchs_alike():
    """`element_hash` (a sampler's keyed uniforms) computes in native.c where it can; torch's arithmetic
    gives the same values for every index, past 2^32 included, and every key."""
    g = torch.Generator().manual_seed(0)
    i = torch.cat([torch.randint(0, 2 ** 40, (20_000,), generator=g), torch.arange(70)])
    for key in (0, 1, 2 ** 64 - 1, 0xDEADBEEF12345678):
        assert native.hashes_usable(i)
        assert torch.equal(element_hash(i, key), torch_element_hash(i, key))


def test_a_rows_mask_follows_its_node_wherever_the_row_sits():
    """Rows permuted (another layout, another rank's slice): each node's row keeps its own mask."""
    ids = torch.randperm(1000)[:300]
    x = torch.randn(300, 48)
    perm = torch.randperm(300)
    for kernel in ("native", "spmm"):
        draws = Draws(7, kernel=kernel)
        whole = draws.dropout(x, 0.5, True, ("input", 1), ids)
        assert torch.equal(draws.dropout(x[perm], 0.5, True, ("input", 1), ids[perm]), whole[perm])
        assert torch.equal(draws.dropout(x[:100], 0.5, True, ("input", 1), ids[:100]), whole[:100])
        draws.at(1)
        assert not torch.equal(draws.dropout(x, 0.5, True, ("input", 1), ids), whole)  # another epoch, another mask


def test_dropout_scales_kept_elements_and_backward_reuses_the_mask():
    draws = Draws(3, kernel="native")
    x = torch.randn(500, 64, requires_grad=True)
    y = draws.dropout(x, 0.5, True, ("input", 0))
    kept = y != 0
    torch.testing.assert_close(y[kept], 2 * x.detach()[kept])
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(g != 0, kept) and torch.all(g[kept] == 2)
    assert torch.equal(draws.dropout(x, 0.5, True, ("input", 0)), y)  # a key gives the same mask
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        draws.dropout(x, 0.5, True, ("input", 0))
    assert not saved  # nothing is kept for backward: the mask is re-derived from its key
    assert draws.dropout(x, 0.5, False, ("input", 0)) is x


def test_a_machine_without_a_compiler_runs_torchs_kernels_and_says_so_once(tmp_path):
    """Once in a process tree: the process that says it marks its environment, which a sweep's runs
    and their ranks inherit."""
    env = {**{k: v for k, v in os.environ.items() if k != native.SAID}, "CC": str(tmp_path / "no-such-cc"),
           "GNNBENCH_NATIVE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    child = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
             "'from benchmarks.core import native; native.resolve(\"native\", \"cpu\")'], check=True)")
    code = ("from benchmarks.core import native; "
            "print(native.resolve('native', 'cpu'), native.resolve('native', 'cpu'), native.resolve('spmm', 'cpu')); "
            f"exec({child!r})")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["spmm", "spmm", "spmm"]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernel=native is unavailable (no C compiler found"), done.stderr


def test_cuda_runs_torchs_kernels(monkeypatch):
    monkeypatch.delenv(native.SAID, raising=False)
    said = []
    assert native.resolve("native", "cuda", log=said.append) == "spmm"
    assert said == ["kernel=native is unavailable (it is a CPU kernel and device=cuda); running kernel=spmm, "
                    "torch's CSR kernels (same results, slower)"]
