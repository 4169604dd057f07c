"""The one communication layer: every collective in the suite goes through `Comm`, which counts the
logical payload bytes this rank sends, keyed by (category, layer).

Categories (measurement guide §6): `setup`, `halo_fwd`, `halo_bwd`, `grad_allreduce`, `eval`
(kept out of training totals) and `probe` (the runtime's own bookkeeping, also kept out), plus those
later methods add (`halo_refetch`, `param_avg`, `stale_push`, ...). With one rank every operation is
local and nothing is counted.
"""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

NOT_TRAINING = frozenset({"setup", "eval", "probe"})


class Comm:
    def __init__(self, rank: int = 0, world: int = 1):
        self.rank, self.world = rank, world
        self.sent = defaultdict(int)  # (category, layer or None) -> bytes this rank sent

    def count(self, category: str, layer, nbytes: int) -> None:
        """Also for transfers that do not go through torch.distributed (a shared-memory store)."""
        if self.world > 1 and nbytes:
            self.sent[(category, layer)] += int(nbytes)

    def all_to_all(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                   category: str, layer=None) -> torch.Tensor:
        """Send rows send[sum(send_counts[:q]):...] to rank q; receive recv_counts[q] rows from q,
        concatenated in rank order. Plans never include rows for oneself."""
        row_shape = send.shape[1:]
        out = send.new_empty((sum(recv_counts), *row_shape))
        if self.world == 1:
            return out
        dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts)
        self.count(category, layer, send.numel() * send.element_size())
        return out

    def all_to_all_v(self, per_peer: list[torch.Tensor], category: str, layer=None) -> list[torch.Tensor]:
        """Variable-size all-to-all: send per_peer[q] to rank q, return what each rank sent me (my own
        entry passed through locally, its rows not counted). Sizes are not known in advance, so one
        small all-to-all of P row counts (P x 8 bytes, counted) precedes the rows. Rows share their
        trailing shape."""
        if self.world == 1:
            return list(per_peer)
        mine = per_peer[self.rank]
        send_counts = [0 if q == self.rank else t.shape[0] for q, t in enumerate(per_peer)]
        sizes = self.all_to_all(torch.tensor(send_counts, device=mine.device), [1] * self.world, [1] * self.world,
                                category, layer).tolist()
        sizes[self.rank] = 0
        send = torch.cat([t for q, t in enumerate(per_peer) if q != self.rank])
        received = list(self.all_to_all(send, send_counts, sizes, category, layer).split(sizes))
        received[self.rank] = mine
        return received

    def exchange(self, send: torch.Tensor, to: int, recv: torch.Tensor, frm: int, category: str, layer=None) -> list:
        """Post a send of `send` to rank `to` and a receive into `recv` from rank `frm`; return the
        works to wait on. Both ends of every transfer know its size, so empty transfers are skipped
        on both sides and need no handshake."""
        ops = []
        if send.numel():
            ops.append(dist.P2POp(dist.isend, send, to))
            self.count(category, layer, send.numel() * send.element_size())
        if recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, frm))
        return dist.batch_isend_irecv(ops) if ops else []

    def all_reduce(self, tensor: torch.Tensor, category: str, op=dist.ReduceOp.SUM, layer=None) -> torch.Tensor:
        """In place; returns the tensor for chaining."""
        if self.world > 1:
            dist.all_reduce(tensor, op=op)
            self.count(category, layer, tensor.numel() * tensor.element_size())
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int, category: str) -> torch.Tensor:
        if self.world > 1:
            dist.broadcast(tensor, src)
            if self.rank == src:
                self.count(category, None, tensor.numel() * tensor.element_size())
        return tensor

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_gather_object(self, obj) -> list:
        """Small Python objects (probe results); not counted."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    # ------------------------------------------------------------------ reading the counters
    def training_bytes(self) -> int:
        return sum(b for (cat, _), b in self.sent.items() if cat not in NOT_TRAINING)

    def by_category(self) -> dict[str, int]:
        out = defaultdict(int)
        for (cat, _), b in self.sent.items():
            out[cat] += b
        return dict(sorted(out.items()))

    def by_layer(self) -> dict[str, int]:
        """'category/layer' -> bytes, for the per-layer breakdown in records."""
        return {f"{cat}/{layer}": b for (cat, layer), b in sorted(self.sent.items(), key=str) if layer is not None}
