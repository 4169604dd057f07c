"""The communication counters on their own: what each collective counts (payload bytes this rank
sends, by category and layer), what training totals leave out, and that one rank counts nothing.
The collectives are replaced by in-process stand-ins; the real exchanges are held to the analytic
volumes by the multi-process method tests."""
from __future__ import annotations

import pytest
import torch

from benchmarks.core import comm as comm_module
from benchmarks.core.comm import Comm
from benchmarks.base.errors import UserError

pytestmark = pytest.mark.fast


@pytest.fixture
def mirror(monkeypatch):
    """torch.distributed stand-ins for a symmetric exchange: every peer sends me what I send it."""
    dist = comm_module.dist
    monkeypatch.setattr(dist, "all_to_all_single", lambda out, send, *counts: out.copy_(send))
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, op=None: tensor)
    monkeypatch.setattr(dist, "broadcast", lambda tensor, src: tensor)
    monkeypatch.setattr(dist, "P2POp", lambda op, tensor, peer, tag=0: (op, tensor, peer))
    monkeypatch.setattr(dist, "batch_isend_irecv", mirrored_transfers)


class Done:
    def wait(self) -> None:
        pass


def mirrored_transfers(ops: list) -> list:
    """Point-to-point stand-in: what I receive from a peer is what I send it."""
    sent = {peer: tensor for op, tensor, peer in ops if op is comm_module.dist.isend}
    for op, tensor, peer in ops:
        if op is comm_module.dist.irecv:
            tensor.copy_(sent[peer])
    return [Done() for _ in ops]


def test_one_rank_counts_nothing():
    """With world=1 every operation is local: no bytes in any counter, whatever is asked."""
    c = Comm()
    c.count("halo_fwd", 0, 1000)
    t = torch.ones(8)
    assert c.all_reduce(t, "grad_allreduce") is t and torch.equal(t, torch.ones(8))
    assert c.broadcast(t, 0, "setup") is t
    assert c.all_to_all(torch.ones(3, 2), [3], [0], "halo_fwd", 1).shape == (0, 2)
    per_peer = [torch.ones(2, 2)]
    assert c.all_to_all_v(per_peer, "stale_push") == per_peer
    assert (c.training_bytes(), c.by_category(), c.by_layer()) == (0, {}, {})


def test_counters_group_by_category_and_layer_and_training_leaves_out_setup_eval_probe():
    """count() adds bytes under (category, layer); training_bytes excludes setup, eval and probe."""
    c = Comm(rank=0, world=2)
    c.count("halo_fwd", 0, 100)
    c.count("halo_fwd", 1, 50)
    c.count("halo_fwd", 0, 10)
    c.count("halo_bwd", 0, 0)  # empty transfers leave no entry
    c.count("grad_allreduce", None, 40)
    c.count("eval", 0, 7)
    c.count("setup", None, 3)
    c.count("probe", None, 5)
    assert c.by_category() == {"eval": 7, "grad_allreduce": 40, "halo_fwd": 160, "probe": 5, "setup": 3}
    assert list(c.by_category()) == sorted(c.by_category())
    assert c.by_layer() == {"eval/0": 7, "halo_fwd/0": 110, "halo_fwd/1": 50}  # layer-less bytes are not here
    assert c.training_bytes() == 160 + 40


def test_all_reduce_and_broadcast_count_the_tensor_bytes_on_the_sender(mirror):
    """all_reduce counts the tensor's bytes on every rank; broadcast only on its source rank."""
    t = torch.zeros(10, dtype=torch.float64)
    for rank in (0, 1):
        c = Comm(rank=rank, world=3)
        c.all_reduce(t, "grad_allreduce")
        c.broadcast(t, 1, "setup")
        assert c.by_category() == {"grad_allreduce": 80, **({"setup": 80} if rank == 1 else {})}


def test_all_to_all_counts_the_rows_sent_to_other_ranks_under_its_layer(mirror):
    """all_to_all counts every row sent to another rank and returns the rows received; rows for
    oneself are copied, not counted."""
    c = Comm(rank=0, world=3)
    send = torch.arange(20, dtype=torch.float32).view(5, 4)
    out = c.all_to_all(send, [0, 2, 3], [0, 2, 3], "halo_fwd", 1)
    assert torch.equal(out, send)
    assert c.by_layer() == {"halo_fwd/1": 5 * 4 * 4}
    c = Comm(rank=1, world=3)
    c.all_to_all(send, [1, 2, 2], [1, 2, 2], "halo_fwd", 1)
    assert c.by_layer() == {"halo_fwd/1": 3 * 4 * 4}


def recorded_tags(monkeypatch) -> list:
    """The tags of the point-to-point operations posted from now on, in channel mode (whatever
    GNNBENCH_P2P_TAG the suite runs under)."""
    monkeypatch.delenv("GNNBENCH_P2P_TAG", raising=False)
    tags = []
    monkeypatch.setattr(comm_module.dist, "P2POp",
                        lambda op, tensor, peer, tag=0: tags.append(tag) or (op, tensor, peer))
    return tags


def test_all_to_all_start_counts_at_the_post_and_returns_the_rows_at_the_wait(mirror, monkeypatch):
    """The non-blocking all_to_all (DIGEST's overlapped sync) counts what all_to_all counts, when it
    posts; wait() returns the received rows; the tag reaches every point-to-point operation."""
    tags = recorded_tags(monkeypatch)
    c = Comm(rank=0, world=3)
    send = torch.arange(20, dtype=torch.float32).view(5, 4)
    pending = c.all_to_all_start(send, [0, 2, 3], [0, 2, 3], "stale_sync", 1, tag=1001)
    assert c.by_layer() == {"stale_sync/1": 5 * 4 * 4}
    assert torch.equal(pending.wait(), send) and set(tags) == {1001}


def test_all_to_all_v_counts_its_size_message_and_the_rows_for_peers_only(mirror):
    """all_to_all_v counts one int64 row count per other rank plus the rows sent to them; my own
    entry stays local and is not counted."""
    c = Comm(rank=0, world=3)
    per_peer = [torch.full((2, 4), 0.0), torch.full((3, 4), 1.0), torch.full((1, 4), 2.0)]
    got = c.all_to_all_v(per_peer, "feature_fetch")
    assert got[0] is per_peer[0] and [t.shape[0] for t in got] == [2, 3, 1]
    assert c.by_category() == {"feature_fetch": (3 - 1) * 8 + (3 + 1) * 4 * 4}


def test_exchange_counts_only_non_empty_sends(mirror):
    """A point-to-point exchange counts what it sends; empty transfers are skipped and not counted."""
    c = Comm(rank=1, world=2)
    transfer = c.exchange(torch.ones(6), 0, torch.empty(6), 0, "halo_fwd", 2)
    assert len(transfer.works) == 2 and c.by_layer() == {"halo_fwd/2": 24}
    assert torch.equal(transfer.wait(), torch.ones(6))
    assert c.exchange(torch.ones(0), 0, torch.empty(0), 0, "halo_fwd", 2).works == []
    assert c.by_layer() == {"halo_fwd/2": 24}


def test_blocked_seconds_are_kept_by_category_and_leave_the_bytes_alone(mirror):
    """Seconds blocked in a collective or in a wait go under the category; a posted exchange is
    charged at its wait, once; nothing to wait for (one rank, an empty transfer) charges nothing."""
    c = Comm(rank=0, world=3)
    send = torch.ones(5, 4)
    c.all_to_all(send, [0, 2, 3], [0, 2, 3], "halo_fwd", 1)
    pending = c.all_to_all_start(send, [0, 2, 3], [0, 2, 3], "halo_bwd", 1, tag=7)
    assert "halo_bwd" not in c.blocked_by_category()  # posted, not yet waited for
    pending.wait()
    pending.wait()
    c.all_reduce(torch.ones(3), "grad_allreduce")
    c.exchange(torch.ones(0), 1, torch.empty(0), 2, "stale_push").wait()
    blocked = c.blocked_by_category()
    assert list(blocked) == ["grad_allreduce", "halo_bwd", "halo_fwd"] and all(s >= 0 for s in blocked.values())
    assert c.by_category() == {"grad_allreduce": 12, "halo_bwd": 80, "halo_fwd": 80}
    one = Comm()
    one.all_to_all(send, [5], [5], "halo_fwd", 1)
    one.all_reduce(torch.ones(3), "grad_allreduce")
    assert one.blocked_by_category() == {}


def test_channels_get_their_own_tag_ranges_and_carry_only_their_categories(mirror, monkeypatch):
    """Comm allocates each channel a range of tags from its name (the same on every rank, whatever
    order they are opened in), apart from the runtime's tag 0; a transfer goes on its slot's tag;
    the channel's categories are registered, and others are refused."""
    tags = recorded_tags(monkeypatch)
    c, other = Comm(rank=0, world=3), Comm(rank=1, world=3)
    a, b = c.channel("test.a", ["stale_sync"]), c.channel("test.b", ["halo_fwd", "halo_bwd"])
    assert (other.channel("test.b", ["halo_fwd", "halo_bwd"]).base, other.channel("test.a", ["stale_sync"]).base) \
        == (b.base, a.base)
    assert c.channel("test.a", ["stale_sync"]) is a and "stale_sync" in c.categories
    ranges = [range(ch.base, ch.base + ch.SLOTS) for ch in (a, b)]
    assert 0 not in ranges[0] and 0 not in ranges[1] and not set(ranges[0]) & set(ranges[1])
    send = torch.ones(5, 4)
    assert torch.equal(a.all_to_all_start(send, [0, 2, 3], [0, 2, 3], "stale_sync", 1, slot=3).wait(), send)
    b.exchange(torch.ones(2), 1, torch.empty(2), 1, "halo_bwd", 1, slot=1).wait()
    assert tags == [a.base + 3] * 4 + [b.base + 1] * 2
    assert c.by_layer() == {"stale_sync/1": 5 * 4 * 4, "halo_bwd/1": 8}  # counted as without a channel
    with pytest.raises(ValueError, match="carries stale_sync, not 'halo_fwd'"):
        a.all_to_all_start(send, [0, 2, 3], [0, 2, 3], "halo_fwd", 1)
    with pytest.raises(ValueError, match="slot 1024"):
        a.tag(1024)
    with pytest.raises(ValueError, match="opened with categories"):
        c.channel("test.a", ["halo_fwd"])
    with pytest.raises(ValueError, match="bad communication category"):
        c.register_category("halo/1")


def test_single_tag_mode_sends_every_transfer_on_tag_0(mirror, monkeypatch):
    """GNNBENCH_P2P_TAG=single: one tag for every point-to-point transfer (gloo then matches in
    posting order, as NCCL does); an unknown mode is a one-line error naming the valid ones."""
    tags = recorded_tags(monkeypatch)
    monkeypatch.setenv("GNNBENCH_P2P_TAG", "single")
    c = Comm(rank=0, world=3)
    assert c.single_tag
    channel = c.channel("test.a", ["stale_sync"])
    channel.all_to_all_start(torch.ones(5, 4), [0, 2, 3], [0, 2, 3], "stale_sync", 1, slot=7).wait()
    channel.exchange(torch.ones(2), 1, torch.empty(2), 1, "stale_sync", 1, slot=2).wait()
    assert set(tags) == {0} and len(tags) == 6
    monkeypatch.setenv("GNNBENCH_P2P_TAG", "channel")
    assert not Comm(rank=0, world=3).single_tag
    monkeypatch.setenv("GNNBENCH_P2P_TAG", "one")
    with pytest.raises(UserError, match="unknown GNNBENCH_P2P_TAG 'one'; choose one of: channel, single"):
        Comm(rank=0, world=3)


def test_drain_waits_once_for_every_transfer_not_yet_waited_for(monkeypatch):
    """Comm.drain (the runtime's, after training) waits for what was posted and never waited for,
    in posting order, and forgets what was waited for; empty transfers hold nothing to wait for."""
    waited = []

    class Work:
        def __init__(self, name):
            self.name = name

        def wait(self):
            waited.append(self.name)

    dist = comm_module.dist
    monkeypatch.setattr(dist, "P2POp", lambda op, tensor, peer, tag=0: (op, tensor, peer))
    posts = iter(range(100))
    monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops: [Work(next(posts))])
    c = Comm(rank=0, world=2)
    channel = c.channel("test.a", ["halo_fwd"])
    first = channel.exchange(torch.ones(2), 1, torch.empty(2), 1, "halo_fwd")
    second = channel.exchange(torch.ones(2), 1, torch.empty(2), 1, "halo_fwd")
    third = c.exchange(torch.ones(2), 1, torch.empty(2), 1, "halo_fwd")
    c.exchange(torch.ones(0), 1, torch.empty(0), 1, "halo_fwd")  # empty: nothing posted
    second.wait()
    assert list(c.in_flight) == [first, third]
    c.drain()
    assert waited == [1, 0, 2] and not c.in_flight  # first and third, in posting order
    c.drain()
    assert waited == [1, 0, 2]
