"""Quantised messages (`comm.quantize`): the rows a rank sends, encoded into a byte payload that is
what actually travels and what is counted.

- `fp16`, `bf16`: each element cast (round to nearest; 2 bytes an element).
- `int8`, `int4`, `int2`: each row r gets an offset lo_r = min and a scale s_r = (max - min) / (2^b - 1)
  (two fp32 numbers, 8 bytes a row); each element becomes the b-bit code
  q = floor((x - lo_r) / s_r + u), u ~ U[0, 1) (stochastic rounding), so E[lo_r + s_r q] = x: the
  decoded rows are an unbiased estimate of the sent ones. Codes are packed 8 / b to a byte.

A payload is [per-row header | packed codes] as uint8; the receiver knows how many rows of what width
it gets (the exchange plan), so nothing else is sent. `payload_bytes(rows, width)` is the analytic size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.base.errors import UserError, choose
from benchmarks.base.options import Options, option

QUANTIZE = ("none", "fp16", "bf16", "int8", "int4", "int2")
FLOATS = {"fp16": torch.float16, "bf16": torch.bfloat16}
HEADER_BYTES = 8  # per row: fp32 offset and fp32 scale


@dataclass(frozen=True)
class CommOptions(Options):
    """The `comm` section: how rows travel (benchmarks.core.comm)."""

    quantize: Literal[QUANTIZE] = option(
        "none", "fp16, bf16 (casts) or int8, int4, int2 (per-row offset and scale, stochastic rounding: unbiased) "
                "for every row a method exchanges in training: halo rows and their gradients, DIGEST's syncs and "
                "pushes, sampled feature fetches; counted at the size sent; evaluation stays exact")
    quantize_grads: bool = option(False, "true: the gradient all-reduce sends quantised gradients too (an "
                                         "all-gather of codes: P - 1 payloads a rank)")

    def check(self, cfg: dict) -> None:
        if self.quantize_grads and self.quantize == "none":
            raise UserError("comm.quantize_grads=true needs a codec: set comm.quantize to fp16, bf16, int8, int4 "
                            "or int2")


class Codec:
    """Encode rows (any shape [n, ...]) into a uint8 payload and back (decoded as fp32)."""

    def __init__(self, name: str, generator: torch.Generator | None = None):
        self.name = choose("comm.quantize", name, QUANTIZE[1:])
        self.bits = 16 if name in FLOATS else int(name[3:])
        self.generator = generator

    def payload_bytes(self, rows: int, width: int) -> int:
        if self.name in FLOATS:
            return rows * width * 2
        return rows * (HEADER_BYTES + math.ceil(width * self.bits / 8))

    def encode(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """`noise`: the stochastic rounding's uniforms, one per element of the [n, width] rows (keyed by
        node and column: `Draws.uniform_elements`); None: drawn from the codec's own generator."""
        rows = x.reshape(x.shape[0], math.prod(x.shape[1:])).float()
        if self.name in FLOATS:
            return rows.to(FLOATS[self.name]).contiguous().view(torch.uint8).reshape(-1)
        levels = (1 << self.bits) - 1
        lo = rows.amin(1, keepdim=True) if rows.shape[1] else rows.new_zeros((rows.shape[0], 1))
        hi = rows.amax(1, keepdim=True) if rows.shape[1] else lo
        scale = (hi - lo) / levels
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant row: every code 0
        u = torch.rand(rows.shape, generator=self.generator, device=rows.device) if noise is None else noise
        codes = torch.floor((rows - lo) / scale + u).clamp_(0, levels).to(torch.uint8)
        header = torch.cat([lo, scale], 1).contiguous().view(torch.uint8)  # [n, 8]
        return torch.cat([header, self._pack(codes)], 1).reshape(-1)

    def decode(self, payload: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        n, width = shape[0], math.prod(shape[1:])
        if self.name in FLOATS:
            return payload.view(FLOATS[self.name]).float().reshape(shape)
        if n == 0:
            return torch.zeros(shape, device=payload.device)
        per_row = payload.reshape(n, self.payload_bytes(1, width))
        # Copied into a buffer of its own: one row's slice counts as contiguous whatever its stride,
        # and viewing bytes as fp32 needs the rows 4-byte aligned.
        header = per_row[:, :HEADER_BYTES].flatten().clone().view(torch.float32).view(n, 2)
        codes = self._unpack(per_row[:, HEADER_BYTES:], width)
        return (header[:, :1] + header[:, 1:] * codes.float()).reshape(shape)

    def _pack(self, codes: torch.Tensor) -> torch.Tensor:
        per_byte = 8 // self.bits
        if per_byte == 1:
            return codes
        n, width = codes.shape
        padded = torch.nn.functional.pad(codes, (0, (-width) % per_byte)).view(n, -(-width // per_byte), per_byte)
        out = torch.zeros(padded.shape[:2], dtype=torch.uint8, device=codes.device)
        for i in range(per_byte):
            out |= padded[:, :, i] << (i * self.bits)
        return out

    def _unpack(self, packed: torch.Tensor, width: int) -> torch.Tensor:
        per_byte = 8 // self.bits
        if per_byte == 1:
            return packed
        mask = (1 << self.bits) - 1
        parts = [(packed >> (i * self.bits)) & mask for i in range(per_byte)]
        return torch.stack(parts, 2).reshape(packed.shape[0], packed.shape[1] * per_byte)[:, :width]
