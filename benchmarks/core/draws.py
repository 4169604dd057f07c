"""A run's randomness as a function of what it draws for, never of who draws it.

Every random draw during training is keyed by (seed, epoch, step, what it is for, layer) and, where
it is per node, by the node's dataset id (`Part.node_ids`) and the column. No draw reads a rank's
number or the worker count, so `single`, two ranks and sixteen ranks drop the same elements out of
the same rows, and an exact layout trains exactly as the oracle does, seed for seed; a receiver that
drops out a halo row draws the very mask its owner would. A hash, not a random stream: ranks would
otherwise have to draw for every node of the graph to agree.

The element hash is native.c's `dropout_hash` (two rounds of MurmurHash3's finaliser), written here
again in torch's int64 arithmetic for tensors the native kernels do not take (CUDA, fp64, a build
that failed), and held equal to it in tests: the mask does not depend on the kernel either.

`Draws` is the rank's one object (`RankContext.draws`, carried by its `Comm` so that aggregators
reach it): the training loop sets its position (`at(epoch, step)`) and every draw names what it is for.
"""
from __future__ import annotations

import hashlib

import torch

from benchmarks.core import native

MASK32 = 0xFFFFFFFF
#: `draws`: where the randomness of a run comes from (recorded in the variant). `layout` (default):
#: the keyed draws above; `per_rank`: the rank's number enters every key, so each rank draws its own
#: sample, as most reference codes do (a generator seeded per process): another sample per layout.
DRAWS = ("layout", "per_rank")


def key_of(*parts) -> int:
    """A 64-bit key for a tuple of plain values (seed, epoch, step, what, layer, ...)."""
    return int.from_bytes(hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest(), "little")


def _mul32(a: torch.Tensor, m: int) -> torch.Tensor:
    """(a * m) mod 2^32 for int64 `a` in [0, 2^32) and a 32-bit constant, without int64 overflow."""
    return (((a & 0xFFFF) * m) + ((((a >> 16) * m) & 0xFFFF) << 16)) & MASK32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def element_hash(i: torch.Tensor, key: int) -> torch.Tensor:
    """native.c's dropout_hash(i, key): a uniform 32-bit value (int64 tensor) per element index i >= 0;
    computed there where it can be (CPU, int64, kernels built: the samplers' draws), else in torch."""
    if native.hashes_usable(i):
        return native.element_hash(i, key)
    return torch_element_hash(i, key)


def torch_element_hash(i: torch.Tensor, key: int) -> torch.Tensor:
    """`element_hash` in torch's int64 arithmetic (CUDA, a build that failed; held equal to native.c's)."""
    k1, k2 = key & MASK32, (key >> 32) & MASK32
    inner = _fmix32((i & MASK32) ^ k1)
    return _fmix32(inner ^ ((k2 + _mul32(i >> 32, 0x9E3779B9)) & MASK32))


def _threshold(p: float) -> int:
    return min(int(p * 2 ** 32), 2 ** 32 - 1)


def element_hashes(ids: torch.Tensor, width: int, key: int) -> torch.Tensor:
    """[rows, width]: hash(key, ids[r] * width + c), the value of element (r, c) of node ids[r]'s row."""
    return element_hash(ids.to(torch.int64)[:, None] * width + torch.arange(width, device=ids.device), key)


def keep_mask(ids: torch.Tensor, width: int, p: float, key: int) -> torch.Tensor:
    """[rows, width] bool: element (r, c) kept when hash(key, ids[r] * width + c) >= p 2^32."""
    return element_hashes(ids, width, key) >= _threshold(p)


def _apply(x: torch.Tensor, p: float, key: int, ids: torch.Tensor, use_native: bool) -> torch.Tensor:
    if x.numel() == 0:  # no rows (a rank without a halo): nothing to drop
        return x.clone()
    flat = x.reshape(x.shape[0], -1)
    if use_native and native.usable(flat):
        out = native.dropout_rows(flat, p, key, ids)
    else:
        out = flat * keep_mask(ids, flat.shape[1], p, key).to(flat.dtype) * (1.0 / (1.0 - p))
    return out.view(x.shape)


class NodeDropout(torch.autograd.Function):
    """Inverted dropout keyed by node: backward re-derives the mask from (key, ids), nothing is kept."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, key: int, ids: torch.Tensor, use_native: bool):
        ctx.p, ctx.key, ctx.ids, ctx.use_native = p, key, ids, use_native
        return _apply(x, p, key, ids, use_native)

    @staticmethod
    def backward(ctx, grad):
        return _apply(grad, ctx.p, ctx.key, ctx.ids, ctx.use_native), None, None, None, None


class Draws:
    """The rank's random draws (module docstring). `local_ids`: the dataset ids of the rank's own rows
    (`Part.node_ids[:num_local]`), the rows a full-graph layer drops out; None: a row's index is its id
    (one process holding the whole graph in dataset order). `kernel`: the run's (`native` masks
    through native.c where the tensor allows it, `spmm` in torch: the same masks either way)."""

    def __init__(self, seed: int, local_ids: torch.Tensor | None = None, mode: str = "layout", rank: int = 0,
                 kernel: str = "native"):
        self.seed, self.local_ids, self.mode, self.rank = seed, local_ids, mode, rank
        self.use_native = kernel == "native"
        self.epoch = self.step = 0

    def at(self, epoch: int, step: int = 0) -> None:
        """Where training is: every draw from here on is keyed by this epoch and step."""
        self.epoch, self.step = epoch, step

    def key(self, *what) -> int:
        """The key of a draw for `what` (a name and, where it matters, the layer) at the current position."""
        return self.epoch_key(self.step, *what)

    def epoch_key(self, *what) -> int:
        """`key` without the step: a draw every step of the epoch shares (a node's sampled neighbours
        at a layer, whichever step's batch reaches it)."""
        who = (self.rank,) if self.mode == "per_rank" else ()
        return key_of(self.seed, *who, self.epoch, *what)

    def ids_of(self, rows: torch.Tensor) -> torch.Tensor:
        """The dataset ids of the rank's local rows `rows` (indices into its own rows)."""
        return rows if self.local_ids is None else self.local_ids.index_select(0, rows.to(self.local_ids.device))

    def ids_for(self, rows: int, ids: torch.Tensor | None, device) -> torch.Tensor:
        ids = self.local_ids if ids is None else ids
        if ids is None:
            return torch.arange(rows, device=device)
        if ids.numel() != rows:
            raise ValueError(f"a draw over {rows} rows was given {ids.numel()} node ids")
        return ids

    def dropout(self, h: torch.Tensor, p: float, training: bool, what: tuple,
                ids: torch.Tensor | None = None) -> torch.Tensor:
        """Inverted dropout of h's rows, the mask of row r a function of (key(*what), ids[r], column);
        `ids` default: the rank's own rows. Under `per_rank` the rank's number enters the key."""
        if not training or p == 0:
            return h
        return NodeDropout.apply(h, p, self.key(*what), self.ids_for(h.shape[0], ids, h.device), self.use_native)

    def edge_keep(self, edge_ids: tuple[torch.Tensor, torch.Tensor], width: int, p: float, what: tuple) -> torch.Tensor:
        """[E, width] float32 inverted-dropout factors of per-edge values (0 where dropped, 1 / (1 - p)
        where kept), element (e, c) a function of (key(*what), edge e's destination and source dataset
        ids, c): the same edge loses the same values in every layout."""
        key = self.key(*what)
        dst, src = (t.to(torch.int64) for t in edge_ids)
        pair = element_hash((dst << 32) | element_hash(src, key), key)  # one 32-bit value per edge
        return keep_mask(pair, width, p, key).to(torch.float32) * (1.0 / (1.0 - p))

    def edge_dropout(self, alpha: torch.Tensor, p: float, what: tuple,
                     edge_ids: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Inverted dropout of per-edge values `alpha` ([E, H]) by `edge_keep`'s factors."""
        if p == 0 or alpha.numel() == 0:
            return alpha
        return alpha * self.edge_keep(edge_ids, alpha.shape[1], p, what).to(alpha.dtype)

    def attention_keep(self, adj, heads: int, p: float, layer: int) -> torch.Tensor | None:
        """GAT's attention dropout over the edges of `adj` (a `LocalAdjacency` whose ids name its rows and
        columns): `edge_keep`'s [E, heads] factors for layer `layer`, the one key every layout uses; None
        without dropout."""
        if not p:
            return None
        return self.edge_keep(adj.edge_ids(), heads, p, ("attention", layer))

    def uniform_elements(self, ids: torch.Tensor, width: int, *what) -> torch.Tensor:
        """[len(ids), width] float32 uniforms in [0, 1), element (r, c) a function of (what, ids[r], c)."""
        return (element_hashes(ids, width, self.key(*what)) >> 8).float() / 2 ** 24

    def generator(self, device, *what) -> torch.Generator:
        """A torch generator seeded by `what`'s key, for draws that are not per node (an order of clusters)."""
        return torch.Generator(device=device).manual_seed(self.key(*what) & ((1 << 63) - 1))
