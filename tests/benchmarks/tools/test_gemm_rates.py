"""`python -m benchmarks.tools.kernels --gemm` (docs/projection.md, "The GEMM's rate"): a layer's three
products, each timed on its own shapes. A benchmark's plumbing, not its numbers."""
import pytest

from benchmarks.tools.kernels import GEMM_SHAPES, gemm_rates

pytestmark = pytest.mark.fast


def test_a_layers_three_products_each_get_a_rate():
    # shapes of 80 MFLOP: a dozen calls a product (tiny ones repeat thousands of times to 1 GFLOP, and each
    # waits on a busy core's OpenMP barrier: 38 s beside a sweep)
    rates = gemm_rates(rows=2000, d_in=200, d_out=100, reps=1)
    assert list(rates) == ["forward", "input gradient", "weight gradient"] and all(r > 0 for r in rates.values())
    assert (3327, 3703, 64) in GEMM_SHAPES  # CiteSeer's layer 0, which the width rule was read from
