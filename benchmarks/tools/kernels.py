"""`python -m benchmarks.tools.kernels [--nodes N] [--degree D] [--width F] [--heads H] [--threads T] [--gemm]`:
the aggregation, attention and dropout kernels side by side in one run, against this machine's
streaming bandwidth. A benchmark, not a test: it prints times and the ratios measured in the same run.

On the suite's synthetic graph (calibrate's: degree-corrected block model, skewed degrees, self-loops)
it prints
  - the streaming-copy bandwidth (dst.copy_(src) of 256 MB, read + write) and, from it, the no-reuse
    bound of A @ X: every edge's source row read once, the output written once, the CSR read once;
  - each kernel's time (`spmm`: torch's CSR, `native`: benchmarks/core/native.c) for the forward product
    A @ X, the transposed one A^T @ G, the attention products (all heads, C = width / heads: the
    weighted sum, its transpose, the SDDMM, and GAT's whole aggregation forward and backward), and
    dropout's forward at p = 0.5 (`draws.Draws.dropout`, masks keyed by node), with native's speed-up
    and its fraction of the bound;
  - with `--orders`, native's forward product after relabelling the nodes by degree and by reverse
    Cuthill-McKee (scipy), against the generator's order: whether ordering a part's nodes helps;
  - with `--gemm` instead (no graph): the fp32 GEMM rate of a layer's three products (forward, input
    gradient, weight gradient) for `GEMM_SHAPES`, which docs/projection.md ("The GEMM's rate") reads:
    the width a product sums over sets a narrow product's rate.
Each time is the best of `--reps` runs after a warm-up (the best, not the median: the other load on a
shared machine only ever adds time). Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import time

import torch

from benchmarks.core import native
from benchmarks.core.aggregation import LocalAdjacency, head_sddmm, head_spmm, head_spmm_t
from benchmarks.core.draws import Draws
from benchmarks.core.graph import permute
from benchmarks.tools.calibrate import adjacency, graph_of

KERNELS = ("spmm", "native")


def best(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def products(adj: LocalAdjacency, width: int, heads: int, reps: int) -> dict[str, float]:
    """Seconds of each product through `adj`'s kernel."""
    x, g = torch.randn(adj.num_cols, width), torch.randn(adj.num_rows, width)
    z = x.view(adj.num_cols, heads, width // heads)
    gz = g.view(adj.num_rows, heads, width // heads)
    alpha = torch.rand(adj.nnz, heads)
    zq = z.clone().requires_grad_()
    att = [torch.randn(1, heads, width // heads, requires_grad=True) for _ in range(2)]
    return {"A @ X": best(lambda: adj.spmm("gcn", x), reps),
            "A^T @ G": best(lambda: adj.spmm_t("gcn", g), reps),
            "attention sum": best(lambda: head_spmm(adj, alpha, z), reps),
            "attention sum^T": best(lambda: head_spmm_t(adj, alpha, gz), reps),
            "attention SDDMM": best(lambda: head_sddmm(adj, gz, z), reps),
            "GAT aggregation fwd+bwd": best(lambda: adj.attention(zq, zq, *att, 0.2).sum().backward(), reps)}


def dropout_seconds(kernel: str, n: int, width: int, reps: int) -> float:
    x, draws = torch.randn(n, width), Draws(0, kernel=kernel)
    return best(lambda: draws.dropout(x, 0.5, True, ("input", 0)), reps)


def copy_bandwidth(reps: int) -> float:
    """Bytes/s of a streaming copy of 256 MB (read and written), the best of `reps`."""
    big = torch.randn(64 * 2 ** 20)
    copy = torch.empty_like(big)
    return 2 * big.numel() * 4 / best(lambda: copy.copy_(big), reps)


#: (rows, input width, output width) of the GEMM table: the calibration's 200000 rows at the widths
#: the validation runs use (CiteSeer's 3703 features, the synthetic graph's 128, hidden 64 and 256),
#: and CiteSeer's 3327 rows, whose operands fit in the cache.
GEMM_SHAPES = ((200_000, 64, 64), (200_000, 128, 64), (200_000, 64, 256), (200_000, 3703, 64),
               (200_000, 256, 256), (3327, 3703, 64), (3327, 64, 64))


def gemm_rates(rows: int, d_in: int, d_out: int, reps: int) -> dict[str, float]:
    """FLOP/s of a linear layer's products, x (rows x in) and w (out x in): the forward x @ w^T sums
    over `d_in`, the input gradient dy @ w over `d_out`, the weight gradient dy^T @ x over `rows`. Each
    timing repeats the product to about 1 GFLOP."""
    x, w, dy = torch.randn(rows, d_in), torch.randn(d_out, d_in), torch.randn(rows, d_out)
    flops = 2 * rows * d_in * d_out
    calls = max(1, int(1e9 // flops))

    def rate(product) -> float:
        return flops * calls / best(lambda: [product() for _ in range(calls)], reps)
    return {"forward": rate(lambda: x @ w.t()), "input gradient": rate(lambda: dy @ w),
            "weight gradient": rate(lambda: dy.t() @ x)}


def gemm_table(reps: int) -> None:
    print(f"{'rows':>7} {'in -> out':>11}{'forward':>10}{'input grad':>12}{'weight grad':>13}  GFLOP/s")
    for rows, d_in, d_out in GEMM_SHAPES:
        r = gemm_rates(rows, d_in, d_out, reps)
        print(f"{rows:>7} {f'{d_in} -> {d_out}':>11}" + "".join(f"{v / 1e9:>{w}.0f}" for v, w in zip(r.values(),
                                                                                                    (10, 12, 13))))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tools.kernels", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--degree", type=int, default=20)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--orders", action="store_true", help="also time native's A @ X under degree and RCM orders")
    ap.add_argument("--gemm", action="store_true", help="only the GEMM rates of a layer's products (GEMM_SHAPES)")
    a = ap.parse_args(argv)
    if a.gemm:
        torch.set_num_threads(a.threads)
        gemm_table(a.reps)
        return
    if native.unavailable():
        raise SystemExit(f"error: the native kernels are unavailable here ({native.unavailable()})")
    if a.width % a.heads:
        raise SystemExit(f"error: --width {a.width} is not a multiple of --heads {a.heads}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    graph = graph_of(a.nodes, a.degree)
    n, edges, width = graph.num_nodes, graph.num_edges, a.width
    bandwidth = copy_bandwidth(a.reps)
    bound = (edges * width * 4 + n * width * 4 + edges * 8) / bandwidth
    print(f"graph: {n} nodes, {edges} edges with self-loops, width {width}, {a.heads} heads, {a.threads} threads")
    print(f"streaming copy: {bandwidth / 1e9:.1f} GB/s; no-reuse bound of A @ X: {bound * 1e3:.0f} ms")
    times = {k: products(adjacency(graph, k), width, a.heads, a.reps) for k in KERNELS}
    times["spmm"]["dropout p=0.5"] = dropout_seconds("spmm", n, width, a.reps)
    times["native"]["dropout p=0.5"] = dropout_seconds("native", n, width, a.reps)
    print(f"\n{'kernel':<26}{'spmm ms':>10}{'native ms':>11}{'speed-up':>10}{'native/bound':>14}")
    for name in times["spmm"]:
        s, t = times["spmm"][name], times["native"][name]
        of_bound = f"{bound / t:.2f}" if name in ("A @ X", "A^T @ G") else ""
        print(f"{name:<26}{s * 1e3:>10.0f}{t * 1e3:>11.0f}{s / t:>9.2f}x{of_bound:>14}")
    if a.orders:
        x = torch.randn(n, width)
        base = times["native"]["A @ X"]
        print(f"\nnative A @ X by node order (the generator's: {base * 1e3:.0f} ms)")
        for name, perm in orders(graph).items():
            adj = adjacency(permute(graph, perm), "native")
            t = best(lambda: adj.spmm("gcn", x), a.reps)
            print(f"{name:<26}{t * 1e3:>10.0f} ms  {base / t:.2f}x the generator's order")


def orders(graph) -> dict[str, torch.Tensor]:
    """Node orders to try: by in-degree (descending) and reverse Cuthill-McKee."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    n = graph.num_nodes
    matrix = sp.csr_matrix((torch.ones(graph.num_edges).numpy(), graph.indices.numpy(), graph.indptr.numpy()),
                           shape=(n, n))
    return {"degree": torch.argsort(graph.in_degree(), descending=True, stable=True),
            "reverse Cuthill-McKee": torch.from_numpy(reverse_cuthill_mckee(matrix, symmetric_mode=True).copy()).long()}


if __name__ == "__main__":
    main()
