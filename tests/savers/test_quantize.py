"""The codecs of `comm.quantize` in process: the payload is the analytic size, decoding inverts the
float casts, and the integer codes are unbiased (the mean of many decoded copies is the input)."""
from __future__ import annotations

import pytest
import torch

from benchmarks.base.errors import UserError
from benchmarks.core.quantize import QUANTIZE, Codec

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("name", QUANTIZE[1:])
@pytest.mark.parametrize("shape", [(7, 13), (5, 2, 3), (0, 4), (3, 0)])
def test_payload_is_the_analytic_size_and_decodes_to_the_shape(name, shape):
    codec = Codec(name, torch.Generator().manual_seed(0))
    x = torch.randn(shape)
    payload = codec.encode(x)
    assert (payload.dtype == torch.uint8
            and payload.numel() == codec.payload_bytes(shape[0], x[0].numel() if shape[0] else 0))
    out = codec.decode(payload, shape)
    assert out.shape == x.shape and out.dtype == torch.float32


def test_float_codecs_are_the_casts():
    x = torch.randn(6, 9)
    assert torch.equal(Codec("bf16").decode(Codec("bf16").encode(x), x.shape), x.bfloat16().float())
    assert torch.equal(Codec("fp16").decode(Codec("fp16").encode(x), x.shape), x.half().float())


@pytest.mark.parametrize("name, bits", [("int8", 8), ("int4", 4), ("int2", 2)])
def test_integer_codes_are_unbiased_and_within_one_step(name, bits):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 33, generator=g) * torch.tensor([[0.1], [1.0], [10.0], [0.0]])  # a constant row too
    codec = Codec(name, g)
    copies = torch.stack([codec.decode(codec.encode(x), x.shape) for _ in range(1000)])
    step = (x.amax(1, keepdim=True) - x.amin(1, keepdim=True)) / ((1 << bits) - 1)
    assert ((copies - x).abs() <= step + 1e-6).all()  # each copy rounds to a neighbouring level
    # the mean of K copies is within a few standard errors (step / 2 / sqrt(K)) of the input
    assert ((copies.mean(0) - x).abs() <= 4 * step / 2 / 1000 ** 0.5 + 1e-6).all()
    assert torch.equal(copies[:, 3], x[3].expand(1000, -1))  # a constant row is exact


def test_an_unknown_level_is_refused():
    with pytest.raises(UserError, match="unknown comm.quantize 'int3'"):
        Codec("int3")


def test_stochastic_rounding_of_a_nodes_row_is_keyed_by_the_node_not_the_sender():
    """`Comm.rounding_noise`: the uniforms of node v's row depend on (category, layer, v, column), so
    two ranks sending v (another layout) round it alike; another layer draws other uniforms."""
    from benchmarks.core.comm import Comm
    from benchmarks.core.quantize import Codec

    codec, rows = Codec("int4"), torch.randn(6, 10)
    ids = torch.tensor([5, 17, 3, 99, 42, 8])
    a, b = Comm(rank=0, world=2, seed=3), Comm(rank=1, world=4, seed=3)
    u = a.rounding_noise(codec, rows, ids, "halo_fwd", 1)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.equal(b.rounding_noise(codec, rows[perm], ids[perm], "halo_fwd", 1), u[perm])
    assert not torch.equal(a.rounding_noise(codec, rows, ids, "halo_fwd", 2), u)
    assert float(u.min()) >= 0 and float(u.max()) < 1
    assert a.rounding_noise(codec, rows, None, "halo_fwd", 1) is None  # no ids: the codec's own stream
    assert torch.equal(codec.decode(codec.encode(rows, u), (6, 10)), codec.decode(codec.encode(rows, u), (6, 10)))
