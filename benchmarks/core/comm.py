"""The one communication layer: every collective in the suite goes through `Comm`, which counts the
logical payload bytes this rank sends, keyed by (category, layer), and the seconds this rank was
blocked in communication, keyed by category (`blocked`): inside a blocking collective (`all_reduce`,
`broadcast`) or waiting for transfers to finish (`Pending.wait`, which the blocking `all_to_all` and
every posted exchange end in). Blocked time is what a transfer costs the rank's critical path: an
exchange posted early and waited for late is charged only the wait. Host time: under NCCL a wait
returns once the transfer is ordered on the device stream, so it measures little there.

Besides bytes, the latency terms (`calls`, `messages`, by category): `calls` counts the operations this
rank entered that moved something (one all-to-all, one ring round, one all-reduce: each waits on at
least one network latency), `messages` the point-to-point messages it sent (one per non-empty peer of
an all-to-all, one per exchange). A collective (all-reduce, broadcast, all-gather) is one call and no
messages: how many messages it takes is the backend's algorithm, which a cost model supplies.

Categories (docs/measurement.md, "Communication"): `setup`, `halo_fwd`, `halo_bwd`, `grad_allreduce`, `eval`
(kept out of training totals) and `probe` (the runtime's own bookkeeping, also kept out), plus those
later methods add (`halo_refetch`, `param_avg`, `stale_push`, ...; declared with their channel or
`Comm.register_category`). With one rank every operation is local and nothing is counted.

Quantised messages (`comm.quantize`, `benchmarks.core.quantize`): floating-point rows sent in training
(every category but `setup`, `eval` and `probe`) travel as the codec's payload, decoded by the
receiver into the buffer it asked for, and are counted at the payload's size (codes plus per-row
offset and scale). A rank's rows for itself are copied, never quantised. With
`comm.quantize_grads`, the gradient all-reduce becomes an all-gather of each rank's quantised
gradient, summed after decoding (`all_reduce(..., gradients=True)`).

Point-to-point tags (`Comm.channel`): the runtime's transfers (blocking all-to-alls, evaluation)
use tag 0; a method whose transfers stay in flight while others are posted (PipeGCN, DIGEST, AdaQP,
SAR) sends them on a `Channel`, a range of tags Comm allocates from the channel's name, so no plugin
picks numbers. Gloo matches point-to-point messages by (peer, tag); NCCL ignores tags and matches the
transfers between a pair in posting order. `GNNBENCH_P2P_TAG=single` makes every transfer use tag 0,
so gloo matches in posting order too: a method that passes its tests under it posts in the same order
on both ends and runs on NCCL. In-flight transfers are waited for by the runtime after training
(`Comm.drain`), not by each method.
"""
from __future__ import annotations

import math
import os
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable

import torch
import torch.distributed as dist

from benchmarks.core.draws import Draws
from benchmarks.base.errors import choose
from benchmarks.core.quantize import Codec
from benchmarks.core.recompute import Recompute

#: Categories outside training: counted in the record's totals, never in an epoch's bytes nor sent
#: quantised. `cache_fill` and `presample` are a mini-batch feature cache's one-time setup (filling it,
#: and the pre-sampling that chooses what it holds: docs/sampling.md, "Feature cache").
NOT_TRAINING = frozenset({"setup", "eval", "probe", "cache_fill", "presample"})
#: The categories the runtime itself counts; methods register theirs (`Comm.register_category`,
#: `Comm.channel`).
RUNTIME_CATEGORIES = frozenset({*NOT_TRAINING, "halo_fwd", "halo_bwd", "grad_allreduce", "norm"})
#: `GNNBENCH_P2P_TAG`: `channel` (default), every channel on its own tags; `single`, one tag for all.
P2P_TAG_MODES = ("channel", "single")
#: Gradients are quantised in blocks of this many elements, each with its own offset and scale.
GRADIENT_BLOCK = 256


class Comm:
    def __init__(self, rank: int = 0, world: int = 1, quantize: str = "none", quantize_grads: bool = False,
                 seed: int = 0, device: torch.device | str = "cpu", recompute: Recompute | None = None,
                 draws: Draws | None = None):
        self.rank, self.world = rank, world
        # The rank's random draws (benchmarks/core/draws.py), here so that every aggregator reaches them.
        self.draws = draws or Draws(seed, rank=rank)
        # Stochastic rounding draws from its own generator: quantising does not shift the dropout
        # masks or sampling of the run, so `comm.quantize` changes nothing but the messages.
        self.codec = None if quantize == "none" else Codec(
            quantize, torch.Generator(device).manual_seed(1_000_003 * (seed + 1) + rank))
        self.quantize_grads = quantize_grads and self.codec is not None
        self.sent = defaultdict(int)  # (category, layer or None) -> bytes this rank sent
        self.blocked = defaultdict(float)  # category -> seconds this rank was blocked communicating
        self.calls = defaultdict(int)  # category -> operations entered that moved something
        self.messages = defaultdict(int)  # category -> point-to-point messages sent
        # Activation checkpointing's state (benchmarks/core/recompute.py), the rank's one object: while
        # backward re-runs a checkpointed block, traffic is counted apart (`<category>_recompute`).
        self.recompute = recompute or Recompute()
        # One tag for every point-to-point transfer (GNNBENCH_P2P_TAG=single): gloo then matches in
        # posting order, as NCCL does. A test may also set it on a rank's Comm before training.
        self.single_tag = p2p_tag_mode() == "single"
        self.channels: dict[str, Channel] = {}
        self.categories = set(RUNTIME_CATEGORIES)
        self.in_flight: dict[Pending, None] = {}  # posted transfers not yet waited for, in posting order

    # ------------------------------------------------------------------ channels and categories
    def register_category(self, *names: str) -> None:
        """Declare categories a method counts bytes under (beside the runtime's): a name is one word,
        without '/' (records key bytes by '<category>/<layer>') and without the `_recompute` suffix
        the counters add themselves."""
        for name in names:
            if not name or "/" in name or name.endswith("_recompute"):
                raise ValueError(f"bad communication category {name!r}: a non-empty name without '/' or '_recompute'")
            self.categories.add(name)

    def channel(self, name: str, categories: Iterable[str]) -> "Channel":
        """The point-to-point channel `name` (one per method and kind of traffic, e.g.
        "pipegcn.halo_fwd"), carrying bytes counted under `categories` (registered here). Its tags
        are a range derived from the name, so every rank gets the same range whatever order it opens
        channels in; asking again for a name returns the same channel."""
        categories = tuple(categories)
        self.register_category(*categories)
        if name in self.channels:
            known = self.channels[name]
            if set(known.categories) != set(categories):
                raise ValueError(f"channel {name!r} was opened with categories {known.categories}, not {categories}")
            return known
        base = Channel.SLOTS * (1 + zlib.crc32(name.encode()) % (1 << 20))
        clash = next((c.name for c in self.channels.values() if c.base == base), None)
        if clash is not None:
            raise ValueError(f"channels {clash!r} and {name!r} hash to the same tags; rename one")
        self.channels[name] = Channel(self, name, base, categories)
        return self.channels[name]

    def drain(self) -> None:
        """Wait for every transfer this rank posted and has not waited for (the runtime calls it after
        the last epoch: a pipelined method's last posts, which nothing uses, must still arrive before
        the process group goes away). Blocked time is charged as any wait is."""
        for pending in list(self.in_flight):
            pending.wait()

    def count(self, category: str, layer, nbytes: int, messages: int = 0, calls: int = 1,
              in_process: bool = False) -> None:
        """Bytes sent (and the operation's point-to-point `messages`, its `calls`); also for transfers
        that do not go through torch.distributed (a shared-memory store: one call, no messages).
        `in_process=True`: copies within the process between host and device memory (GAS's history
        tables), counted with one rank too; otherwise one rank counts nothing (nothing leaves it)."""
        if self.world == 1 and not in_process:
            return
        category = f"{category}_recompute" if self.recompute.active else category
        if nbytes:
            self.sent[(category, layer)] += int(nbytes)
        if calls:
            self.messages[category] += messages
            self.calls[category] += calls

    def all_to_all(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                   category: str, layer=None, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Send rows send[sum(send_counts[:q]):...] to rank q; receive recv_counts[q] rows from q,
        concatenated in rank order (rows for oneself are copied, not counted: only what goes to other
        ranks is).

        Both ends of every pair know its size (my send_counts[q] is q's recv_counts[me]), so the rows
        go as one point-to-point transfer per non-empty pair rather than one collective: a pair with
        nothing to send is skipped by both ends without asking each other, and a plan that is empty
        on every rank (a halo sampled down to nothing) issues no operation at all, where a collective
        would need the ranks to agree before skipping it (one more collective per step)."""
        return self.all_to_all_start(send, send_counts, recv_counts, category, layer, ids=ids).wait()

    def all_to_all_start(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                         category: str, layer=None, tag: int = 0, codec: Codec | None = None,
                         ids: torch.Tensor | None = None) -> "Pending":
        """`all_to_all` without waiting: post the transfers and return a `Pending` whose `wait()`
        returns the received rows (counted now, at the post). `tag` is a channel's (`Comm.channel`:
        methods never pick one); 0 is the runtime's, and every transfer's under GNNBENCH_P2P_TAG=single.
        `codec` overrides the run's `comm.quantize` for these rows (AdaQP's per-row bit widths).
        `ids`: the dataset ids of `send`'s rows, where they are nodes' rows: a lossy codec's rounding
        is then keyed by node and column (`Draws.uniform_elements`), the same in every layout; else
        it draws from the rank's own stream."""
        row_shape = send.shape[1:]
        out = send.new_empty((sum(recv_counts), *row_shape))
        if self.world == 1:
            return Pending(out, [])
        send = send.contiguous()
        codec = self.codec_for(send, category, codec)
        ops, sent, messages, buffers, decodes = [], 0, 0, [], []
        noise = self.rounding_noise(codec, send, ids, category, layer)
        for q, (rows, into) in enumerate(zip(send.split(send_counts), out.split(recv_counts))):
            if q == self.rank:
                into.copy_(rows)
                continue
            if codec is not None:
                u = None if noise is None else noise[sum(send_counts[:q]):sum(send_counts[:q + 1])]
                rows, into = self._encoded(codec, rows, into, decodes, u)
                buffers.append(rows)
            ops += p2p_ops(rows, q, into, q, self.p2p_tag(tag))
            sent += rows.numel() * rows.element_size()
            messages += rows.numel() > 0
        self.count(category, layer, sent, messages, calls=int(bool(ops)))
        return self.posted(Pending(out, dist.batch_isend_irecv(ops) if ops else [], buffers or send, self, category,
                                   decodes))

    def all_to_all_v(self, per_peer: list[torch.Tensor], category: str, layer=None) -> list[torch.Tensor]:
        """Variable-size all-to-all: send per_peer[q] to rank q, return what each rank sent me (my own
        entry passed through locally, not counted). Sizes are not known in advance, so one small
        all-to-all of row counts precedes the rows (8 bytes to each other rank, (P-1) x 8 counted). Rows
        share their trailing shape."""
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

    def exchange(self, send: torch.Tensor, to: int, recv: torch.Tensor, frm: int, category: str,
                 layer=None, tag: int = 0) -> "Pending":
        """Post a send of `send` to rank `to` and a receive into `recv` from rank `frm`; return the
        `Pending` whose `wait()` returns `recv` (no work to wait on for empty transfers, see `p2p_ops`).
        `tag` as in `all_to_all_start`."""
        codec, decodes = self.codec_for(send, category), []
        payload, into = self._encoded(codec, send, recv, decodes) if codec is not None else (send, recv)
        ops = p2p_ops(payload, to, into, frm, self.p2p_tag(tag))
        self.count(category, layer, payload.numel() * payload.element_size(), int(payload.numel() > 0),
                   calls=int(bool(ops)))
        return self.posted(Pending(recv, dist.batch_isend_irecv(ops) if ops else [], payload, self, category, decodes))

    def p2p_tag(self, tag: int) -> int:
        return 0 if self.single_tag else tag

    def posted(self, pending: "Pending") -> "Pending":
        """Remember a transfer with work in flight until it is waited for (`drain`)."""
        if pending.works:
            self.in_flight[pending] = None
        return pending

    # ------------------------------------------------------------------ quantised messages
    def codec_for(self, rows: torch.Tensor, category: str, codec: Codec | None = None) -> Codec | None:
        """The codec rows of this category travel with: none for integer rows (ids, counts, flags) and
        for the categories kept out of training (evaluation is exact)."""
        if not rows.is_floating_point() or category in NOT_TRAINING:
            return None
        return codec or self.codec

    def rounding_noise(self, codec: Codec | None, send: torch.Tensor, ids: torch.Tensor | None, category: str,
                       layer) -> torch.Tensor | None:
        """A lossy integer codec's stochastic-rounding uniforms for `send`'s rows of nodes `ids`, keyed
        by (category, layer, node, column); None where there are no ids or no rounding."""
        if codec is None or ids is None or codec.bits >= 16 or send.shape[0] == 0:
            return None
        return self.draws.uniform_elements(ids, math.prod(send.shape[1:]), "quantize", category, layer)

    @staticmethod
    def _encoded(codec: Codec, rows: torch.Tensor, into: torch.Tensor, decodes: list,
                 noise: torch.Tensor | None = None) -> tuple:
        """(payload to send, payload buffer to receive into); appends the decode of that buffer into
        `into` to `decodes`, run once the transfer has arrived."""
        width = math.prod(into.shape[1:])
        buffer = torch.empty(codec.payload_bytes(into.shape[0], width), dtype=torch.uint8, device=into.device)
        decodes.append(lambda: into.copy_(codec.decode(buffer, tuple(into.shape))))
        return codec.encode(rows, noise), buffer

    def quantized(self, rows: torch.Tensor, category: str, layer=None) -> torch.Tensor:
        """Rows written to a shared store rather than sent (DIGEST-A's push): what the reader gets
        is the decoded payload, counted at the payload's size."""
        codec = self.codec_for(rows, category)
        if codec is None:
            self.count(category, layer, rows.numel() * rows.element_size())
            return rows
        payload = codec.encode(rows)
        self.count(category, layer, payload.numel())
        return codec.decode(payload, tuple(rows.shape)).to(rows.dtype)

    def all_reduce(self, tensor: torch.Tensor, category: str, op=dist.ReduceOp.SUM, layer=None,
                   gradients: bool = False) -> torch.Tensor:
        """In place; returns the tensor for chaining. `gradients`: the parameter gradients' sum, which
        `comm.quantize_grads` sends quantised."""
        if self.world > 1 and gradients and self.quantize_grads:
            return self._quantized_sum(tensor, category, layer)
        if self.world > 1:
            start = time.perf_counter()
            dist.all_reduce(tensor, op=op)
            self.blocked[category] += time.perf_counter() - start
            self.count(category, layer, tensor.numel() * tensor.element_size())
        return tensor

    def _quantized_sum(self, tensor: torch.Tensor, category: str, layer) -> torch.Tensor:
        """Sum over ranks of a flat float tensor sent quantised: codes cannot be added without
        decoding, so each rank's payload goes to every other rank (an all-gather: (P - 1) payloads
        counted, against one tensor for the plain all-reduce) and each rank decodes and sums."""
        n = tensor.numel()
        blocks = torch.nn.functional.pad(tensor.reshape(-1).float(), (0, (-n) % GRADIENT_BLOCK))
        blocks = blocks.view(-1, GRADIENT_BLOCK)
        payload = self.codec.encode(blocks)
        gathered = payload.new_empty(self.world * payload.numel())
        start = time.perf_counter()
        dist.all_gather_single(gathered, payload)
        gathered = gathered.view(self.world, -1)
        self.blocked[category] += time.perf_counter() - start
        self.count(category, layer, (self.world - 1) * payload.numel())
        total = sum(self.codec.decode(gathered[q], tuple(blocks.shape)) for q in range(self.world))
        return tensor.copy_(total.reshape(-1)[:n].view_as(tensor))

    def broadcast(self, tensor: torch.Tensor, src: int, category: str) -> torch.Tensor:
        if self.world > 1:
            start = time.perf_counter()
            dist.broadcast(tensor, src)
            self.blocked[category] += time.perf_counter() - start
            self.count(category, None, tensor.numel() * tensor.element_size() if self.rank == src else 0)
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

    def calls_by_category(self) -> dict[str, int]:
        return dict(sorted(self.calls.items()))

    def messages_by_category(self) -> dict[str, int]:
        return dict(sorted(self.messages.items()))

    def blocked_by_category(self) -> dict[str, float]:
        """category -> seconds this rank was blocked in communication (the record's
        `summary.per_rank[].comm_blocked_s_by_category`)."""
        return dict(sorted(self.blocked.items()))

    def by_layer(self) -> dict[str, int]:
        """'category/layer' -> bytes, for the per-layer breakdown in records."""
        return {f"{cat}/{layer}": b for (cat, layer), b in sorted(self.sent.items(), key=str) if layer is not None}


class Pending:
    """Transfers in flight (`Comm.all_to_all_start`, `Comm.exchange`): `wait()` waits for them once,
    keeps the seconds it was blocked in `waited_s`, charges them to `comm.blocked[category]` and
    returns the received tensor; the send buffer is kept alive until then."""

    def __init__(self, out: torch.Tensor, works: list, send=None, comm: Comm | None = None, category: str = "",
                 decodes: list | None = None):
        self.out, self.works, self.send, self.comm, self.category = out, works, send, comm, category
        self.decodes = decodes or []
        self.waited_s = 0.0

    def wait(self) -> torch.Tensor:
        if self.works:
            start = time.perf_counter()
            for work in self.works:
                work.wait()
            self.waited_s = time.perf_counter() - start
            if self.comm is not None:
                self.comm.blocked[self.category] += self.waited_s
                self.comm.in_flight.pop(self, None)
        # Decoding quantised payloads into `out` (in place: callers may hold it) and freeing the send
        # buffers are not waiting: after the clock.
        for decode in self.decodes:
            decode()
        self.works, self.send, self.decodes = [], None, []
        return self.out


class Channel:
    """A method's point-to-point traffic (`Comm.channel`): `SLOTS` tags Comm allocated for its name,
    and the categories its bytes are counted under (a transfer under another is a bug, refused).
    Transfers in flight at once between the same pair go on different slots (PipeGCN's layers,
    AdaQP's bit widths), which keeps them apart under gloo's matching by tag. Under NCCL, or with
    GNNBENCH_P2P_TAG=single, they match in posting order instead: both ends must post them in the
    same order, which a method gets by every rank running the same sequence of steps."""

    SLOTS = 1024

    def __init__(self, comm: Comm, name: str, base: int, categories: tuple[str, ...]):
        self.comm, self.name, self.base, self.categories = comm, name, base, categories

    def tag(self, slot: int) -> int:
        if not 0 <= slot < self.SLOTS:
            raise ValueError(f"channel {self.name!r}: slot {slot} outside 0..{self.SLOTS - 1}")
        return self.base + slot

    def check(self, category: str) -> None:
        if category not in self.categories:
            raise ValueError(f"channel {self.name!r} carries {', '.join(self.categories)}, not {category!r}")

    def all_to_all_start(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int], category: str,
                         layer=None, slot: int = 0, codec: Codec | None = None,
                         ids: torch.Tensor | None = None) -> "Pending":
        """`Comm.all_to_all_start` on this channel's tag `slot`."""
        self.check(category)
        args = (send, send_counts, recv_counts, category, layer, self.tag(slot))
        # `codec` and `ids` only when given: code that watches `Comm.all_to_all_start` (tests) sees the usual call
        extra = {k: v for k, v in (("codec", codec), ("ids", ids)) if v is not None}
        return self.comm.all_to_all_start(*args, **extra)

    def exchange(self, send: torch.Tensor, to: int, recv: torch.Tensor, frm: int, category: str, layer=None,
                 slot: int = 0) -> "Pending":
        """`Comm.exchange` on this channel's tag `slot`."""
        self.check(category)
        return self.comm.exchange(send, to, recv, frm, category, layer, tag=self.tag(slot))


def p2p_tag_mode() -> str:
    """`GNNBENCH_P2P_TAG` (`P2P_TAG_MODES`); read by each rank's Comm. Spawned ranks inherit the
    environment the launcher's fork server started with, so set it before the first run."""
    return choose("GNNBENCH_P2P_TAG", os.environ.get("GNNBENCH_P2P_TAG") or "channel", P2P_TAG_MODES)


def p2p_ops(send: torch.Tensor, to: int, recv: torch.Tensor, frm: int, tag: int = 0) -> list:
    """The operations sending `send` to rank `to` and receiving into `recv` from rank `frm`. Both
    ends of every transfer know its size, so empty transfers are skipped on both sides and need no
    handshake."""
    ops = []
    if send.numel():
        ops.append(dist.P2POp(dist.isend, send, to, tag=tag))
    if recv.numel():
        ops.append(dist.P2POp(dist.irecv, recv, frm, tag=tag))
    return ops


# --------------------------------------------------------------------------- flat buffers
def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements, one after another, in one 1-D tensor: one message instead of one per
    tensor (gradient all-reduce, parameter averaging, the parameter server)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """The inverse of `flatten`: copy consecutive slices of `flat` into `tensors`, in place."""
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
