"""The public halo exchange and its transpose (`aggregation.halo_exchange`, `halo_transpose`)
against a single-process reference on the whole graph, values and gradients. The ranks are threads
of this process sharing an in-process all-to-all (`ThreadComm`), so the test needs no process group."""
from __future__ import annotations

import threading

import pytest
import torch

from benchmarks.core.aggregation import HaloPlan, halo_exchange, halo_transpose
from benchmarks.core.comm import Comm
from benchmarks.core.datasets import synthetic
from benchmarks.core.graph import permute
from benchmarks.core.partition import assign, build_parts, order_by_part

pytestmark = pytest.mark.fast

GRAPH = synthetic(nodes=300, avg_degree=6, classes=3, features=4, homophily=0.8, feature_noise=1.0,
                  degree_skew=1.0, train_frac=0.2, val_frac=0.2, test_frac=0.5, seed=5)
WORLD, WIDTH = 3, 3


class ThreadComm(Comm):
    """One rank of a group of threads: `all_to_all` through a board the ranks share, counted as
    Comm counts it (rows sent to other ranks)."""

    def __init__(self, rank: int, world: int, board: dict, barrier: threading.Barrier):
        super().__init__(rank, world)
        self.board, self.barrier = board, barrier

    def all_to_all(self, send, send_counts, recv_counts, category, layer=None, ids=None):
        self.board[self.rank] = send.split(send_counts)
        self.barrier.wait()
        got = [self.board[q][self.rank] for q in range(self.world)]
        assert [t.shape[0] for t in got] == recv_counts
        out = torch.cat(got).clone()
        self.barrier.wait()  # every rank has read the board before it is written again
        sent = sum(t.numel() * t.element_size() for q, t in enumerate(send.split(send_counts)) if q != self.rank)
        self.count(category, layer, sent)
        return out


def parts():
    perm, offsets = order_by_part(assign(GRAPH, "random", WORLD, 0), WORLD)
    return [(part, HaloPlan(part.send_idx, part.send_counts.tolist(), part.recv_counts.tolist()))
            for part in build_parts(permute(GRAPH, perm), offsets)]


def on_every_rank(body) -> list:
    """body(rank, comm) on WORLD threads at once; their results in rank order."""
    board, barrier = {}, threading.Barrier(WORLD, timeout=30)
    results, errors = [None] * WORLD, []

    def run(rank):
        try:
            results[rank] = body(rank, ThreadComm(rank, WORLD, board, barrier))
        except BaseException as e:  # noqa: BLE001 - reported below, and the others stop waiting
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def own(part) -> slice:
    return slice(int(part.offsets[part.rank]), int(part.offsets[part.rank + 1]))


def test_halo_exchange_gathers_the_owners_rows_and_its_backward_sums_their_gradients_at_the_owner():
    """Each rank's halo rows are the global rows of its halo ids; with loss = sum over ranks of
    <halo_p, W_p>, each rank's gradient is the whole graph's gradient restricted to its rows."""
    views = parts()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(GRAPH.num_nodes, WIDTH, dtype=torch.float64, generator=gen)
    weights = [torch.randn(part.num_halo, WIDTH, dtype=torch.float64, generator=gen) for part, _ in views]

    def rank(r, comm):
        part, plan = views[r]
        h = x[own(part)].clone().requires_grad_()
        halo = halo_exchange(h, plan, comm, layer=1)
        (halo * weights[r]).sum().backward()
        return halo.detach(), h.grad, comm

    reference = x.clone().requires_grad_()
    sum((reference[part.halo_ids] * w).sum() for (part, _), w in zip(views, weights)).backward()
    for (part, plan), (halo, grad, comm) in zip(views, on_every_rank(rank)):
        assert part.num_halo and torch.equal(halo, x[part.halo_ids])
        torch.testing.assert_close(grad, reference.grad[own(part)])
        sent = sum(n for q, n in enumerate(plan.send_counts) if q != part.rank)
        assert comm.by_layer() == {"halo_fwd/1": sent * WIDTH * 8, "halo_bwd/1": part.num_halo * WIDTH * 8}


def test_halo_transpose_sums_each_halo_rows_contributions_at_its_owner_and_its_backward_is_the_exchange():
    """Each rank sends one partial row per halo node back to its owner, which sums them: the whole
    graph's scatter-add of every rank's rows by global id; its gradient is the owners' gradient rows."""
    views = parts()
    gen = torch.Generator().manual_seed(1)
    partials = [torch.randn(part.num_halo, WIDTH, dtype=torch.float64, generator=gen) for part, _ in views]
    v = torch.randn(GRAPH.num_nodes, WIDTH, dtype=torch.float64, generator=gen)

    def rank(r, comm):
        part, plan = views[r]
        halo = partials[r].clone().requires_grad_()
        out = halo_transpose(halo, plan, comm, part.num_local, layer=2)
        (out * v[own(part)]).sum().backward()
        return out.detach(), halo.grad, comm

    reference = [p.clone().requires_grad_() for p in partials]
    total = torch.zeros(GRAPH.num_nodes, WIDTH, dtype=torch.float64)
    for (part, _), p in zip(views, reference):
        total = total.index_add(0, part.halo_ids, p)
    (total * v).sum().backward()
    for (part, plan), (out, grad, comm), ref in zip(views, on_every_rank(rank), reference):
        torch.testing.assert_close(out, total.detach()[own(part)])
        torch.testing.assert_close(grad, ref.grad)
        assert torch.equal(grad, v[part.halo_ids])
        sent = sum(n for q, n in enumerate(plan.send_counts) if q != part.rank)
        assert comm.by_layer() == {"halo_bwd/2": part.num_halo * WIDTH * 8, "halo_fwd/2": sent * WIDTH * 8}
