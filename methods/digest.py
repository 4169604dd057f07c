"""`digest`: DIGEST, periodic stale representation synchronisation (Chai, Bai, Zhao, Cheng,
arXiv 2206.00057), and DIGEST-A (`asynchronous: true`).

Each rank trains on its own part (one full-partition step per epoch) with the full row panel of
the adjacency (global degrees). In-edges inside the part use fresh rows; in-edges from other parts
read a table of halo rows, detached (no gradient reaches other ranks, no backward halo traffic):
  - layer 0: exact, as `method.layer0` says (`families.partition_parallel.LAYER0`); by default
    `cached`: the halo input features (they never change), fetched once at the first step (category
    `halo_inputs`: a one-time cost, like loading the partition), then dropped out every step like the
    local rows (consistent dropout: docs/digest.md; `cached_undropped` is the earlier ablation);
  - deeper layers: halo rows of the layer input, refreshed every `sync_every` steps (I) with the
    rows a sync step's forward computed (category `stale_sync`). `sync: overlapped` (the design):
    the sync step posts them without waiting and keeps aggregating the rows it has; they are waited
    for (measured, `summary.per_rank[].sync`) when the next step needs them, so halo rows are 1..I
    steps old. `sync: blocking` (the ablation): the sync step exchanges and uses them at once
    (0..I-1 steps old; a sync step's forward is full_halo's). The first step is the cold start in
    both: one blocking exchange fills the tables. Ages: `summary.per_rank[].halo_age`.
Halo rows are layer inputs, projected with the current weights (a stale representation, never a
stale weight). Parameters: gradient all-reduce every step (`avg_every: null`) or periodic averaging.

DIGEST-A: workers push their boundary rows to and pull their halo rows from a shared representation
store at their own sync steps, and pull parameters from / push gradients to a parameter server every
step, never waiting for each other (benchmarks/core/stores.py; shared memory on one machine). An
epoch is P updates of the shared model, from whichever workers are ready; fast workers contribute
more. The only barriers are the first step (the exact cold-start fill) and evaluations. Staleness
actually seen is recorded per rank (`summary.per_rank[].staleness`, in parameter-server versions).

Which of these choices are the paper's and which are reconstructions: docs/digest.md.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.core.aggregation import exchange_rows, start_exchange_rows
from benchmarks.base.errors import UserError
from benchmarks.families.partition_parallel import (LAYER0, LayerZeroExact, LocalAggregator, PartitionParallelMethod,
                                                     layer0_aggregator, layer0_option)
from benchmarks.core.models import check_on_device
from benchmarks.base.options import option
from benchmarks.core.stores import ParameterServer, RepresentationStore


class StaleHalo:
    """Halo rows per layer, called by the aggregator with the detached layer input.

    `sync` says when the rows a sync step computes reach the tables:
      - `overlapped` (DIGEST as designed): at a sync step s the forward *posts* the exchange of its
        fresh rows (non-blocking) and aggregates the rows already in the table (pushed at s - I);
        the posted rows are waited for when a layer next needs its table (the next step), so they
        serve steps s+1 ... s+I: halo-row age 1 ... I. No exchange is started and waited inside a
        forward, except the cold start.
      - `blocking` (the ablation; the suite's earlier DIGEST): the sync step exchanges its fresh
        rows with a blocking all-to-all and uses them at once (a sync step's forward is
        `full_halo`'s): age 0 ... I-1.
    Step 0 is the cold start in both: one blocking exchange fills the tables (age 0 at step 0).
    Both modes therefore send the same rows at the same steps (bytes per sync identical).
    Ages (steps between the step that computed a table's rows and the step that uses them) and the
    seconds spent on the critical path (waits on posted exchanges, blocking exchanges) are kept for
    the probes."""

    def __init__(self, ctx, sync: str = "blocking"):
        self.ctx, self.tables, self.refresh = ctx, {}, True
        self.on_host = ctx.options.offload_stale
        self.sync = sync
        # Posted exchanges of every layer are in flight together: one slot (tag) per layer, apart from
        # the blocking exchanges (cold start, layer 0, evaluation).
        self.channel = ctx.comm.channel("digest.stale_sync", ["stale_sync"])
        self.step = 0
        self.computed = {}  # layer -> the step whose forward computed the table's rows
        self.pending = {}  # layer -> (Pending, step that posted it): overlapped exchanges in flight
        self.ages = {}  # layer -> [age at each step that used the table]
        self.wait_s = []  # seconds waited on posted exchanges (critical path), one entry per wait
        self.blocking_s = []  # (step, seconds) of blocking exchanges of hidden rows (cold start included)

    def __call__(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if layer in self.pending:  # overlapped: rows posted at an earlier step
            pending, posted = self.pending.pop(layer)
            start = time.perf_counter()
            self.tables[layer] = self.kept(pending.wait())
            self.wait_s.append(time.perf_counter() - start)
            self.computed[layer] = posted
        if layer not in self.tables or (self.refresh and self.sync == "blocking"):
            start = time.perf_counter()
            self.tables[layer] = self.kept(self.fetch(h, layer))
            self.blocking_s.append((self.step, time.perf_counter() - start))
            self.computed[layer] = self.step
        elif self.refresh:  # overlapped: post this step's rows, use them from the next step on
            self.pending[layer] = (self.post(h, layer), self.step)
        self.ages.setdefault(layer, []).append(self.step - self.computed[layer])
        return self.tables[layer].to(self.ctx.device, non_blocking=True)

    def kept(self, rows: torch.Tensor) -> torch.Tensor:
        """A table as it is kept between steps: in pinned host memory with `method.offload_stale`
        (copied to the device at each use), else where it arrived."""
        return rows.to("cpu").pin_memory() if self.on_host else rows

    def exchange(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return exchange_rows(h, self.ctx.plan, self.ctx.comm, "stale_sync", layer)

    def post(self, h: torch.Tensor, layer: int):
        return start_exchange_rows(h, self.ctx.plan, self.channel, "stale_sync", layer, slot=layer)

    fetch = exchange

    def probes(self) -> dict:
        by_layer = {str(layer): {"min": min(a[1:], default=0), "max": max(a[1:], default=0),
                                 "mean": statistics.fmean(a[1:]) if len(a) > 1 else 0.0}
                    for layer, a in sorted(self.ages.items())}
        cold = sum(s for step, s in self.blocking_s if step == 0)
        blocking = sum(s for step, s in self.blocking_s if step > 0)
        return {
            "halo_age": {
                "unit": "steps between the step that computed a halo row and the step that used it; "
                        "step 0 (the cold start, age 0) left out of min/max/mean",
                "by_layer": by_layer,
                "by_step": self.ages[min(self.ages)] if self.ages else [],  # every hidden layer ages alike
            },
            "sync": {
                "mode": self.sync,
                "critical_path_s": sum(self.wait_s) + blocking,  # after the cold start
                "wait_s": sum(self.wait_s), "waits": len(self.wait_s), "max_wait_s": max(self.wait_s, default=0.0),
                "blocking_s": blocking, "blocking_exchanges": sum(1 for step, _ in self.blocking_s if step > 0),
                "cold_start_s": cold,
            },
        }


class StoreHalo(StaleHalo):
    """DIGEST-A: after the cold-start exchange, refreshes go through the representation store."""

    def __init__(self, ctx, store: RepresentationStore, server: ParameterServer):
        super().__init__(ctx, "blocking")  # pulls from the store never wait for a peer
        self.store, self.server, self.cold = store, server, True
        part = ctx.part
        self.boundary = torch.unique(ctx.plan.send_idx)  # my rows some peer needs
        self.boundary_ids = (self.boundary.cpu() + int(part.offsets[ctx.rank]))
        self.halo_ids = part.halo_ids.cpu()
        self.staleness = {}  # layer -> list of (mean, max) over the rows of each pull

    def fetch(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        version = self.server.version()
        self.store.push(layer, self.boundary_ids, h.index_select(0, self.boundary), version)
        if self.cold:
            return self.exchange(h, layer)
        rows, stamps = self.store.pull(layer, self.halo_ids)
        if stamps.numel():
            age = (version - stamps).double()
            self.staleness.setdefault(layer, []).append((age.mean().item(), age.max().item()))
        return rows.to(h.device)


class Method(PartitionParallelMethod):
    class About(PartitionParallelMethod.About):
        approximates = 'halo rows stale between syncs every `sync_every` epochs'
        claim = '(Chai et al., arXiv 2206.00057) slow networks: syncs every few epochs instead of every layer'
        exact_control = {"name": "full_halo"}  # with the same layer0

    #: No fp16: DIGEST-A's workers push their gradients to the parameter server, which steps them
    #: (no local optimizer step to unscale or skip), and the flag is the class's, both modes'.
    applies = PartitionParallelMethod.applies - {"precision=fp16"}

    @dataclass(frozen=True)
    class Options(PartitionParallelMethod.Options):
        # steps (= epochs) between halo refreshes; 1 = fresh halo rows every step
        sync_every: int = option(10, "steps between halo refreshes", ge=1)
        # overlapped: a sync step posts its rows without waiting, they serve the next I steps (age 1..I);
        # blocking: a sync step exchanges its rows and uses them at once (age 0..I-1; the ablation)
        sync: Literal["overlapped", "blocking"] = option("overlapped")
        # cached: the halo's input features fetched once, then dropped out like the local rows (a fresh
        # mask each step); cached_undropped: they enter undropped (the suite's earlier DIGEST)
        layer0: Literal[LAYER0] = layer0_option("cached")
        # true = DIGEST-A (shared representation store + parameter server, no waiting)
        asynchronous: bool = option(False)
        # the survey's offloading saver applied to DIGEST's own state (device=cuda)
        offload_stale: bool = option(False, "the stale halo tables in host memory (CUDA)")

        def check(self, run) -> None:
            if self.offload_stale and run is not None:
                check_on_device("method.offload_stale=true", run)
            if self.asynchronous and self.avg_every is not None:
                raise UserError("method.asynchronous=true updates the parameters through a parameter server every "
                                "step; set method.avg_every=null")
            if self.asynchronous and self.layer0 == "exchanged":
                raise UserError("method.layer0=exchanged exchanges layer 0 with every peer every step, which "
                                "method.asynchronous=true never waits for; set method.layer0=cached or precomputed")
            if self.asynchronous and run is not None and run.weight_decay_layers != "all":
                raise UserError(f"method.asynchronous=true steps through a parameter server that decays every "
                                f"parameter; drop weight_decay_layers={run.weight_decay_layers}")
            if self.asynchronous and self.sync == "blocking":
                raise UserError("method.sync=blocking does not apply to method.asynchronous=true (DIGEST-A's store "
                                "never waits for a peer); set method.sync=overlapped")

    def __init__(self, ctx):
        self.sync_every = ctx.options.sync_every
        self.asynchronous = ctx.options.asynchronous
        self.synchronous = not self.asynchronous
        self.steps, self.last_loss, self.model_staleness = 0, torch.zeros(()), []
        super().__init__(ctx)

    def make_aggregator(self):
        ctx = self.ctx
        if self.asynchronous:
            self.server, store = self.open_shared_state()
            self.halo = StoreHalo(ctx, store, self.server)
        else:
            self.halo = StaleHalo(ctx, ctx.options.sync)
        stale = LocalAggregator(ctx.adj, ctx.comm, self.halo, recompute=ctx.recompute)  # the full row panel
        return LayerZeroExact(layer0_aggregator(ctx, ctx.options.layer0), stale, ctx.comm)

    def open_shared_state(self) -> tuple[ParameterServer, RepresentationStore]:
        ctx = self.ctx
        params = list(ctx.model.parameters())
        widths = {layer: ctx.cfg.hidden for layer in range(1, ctx.cfg.layers)}
        shm = ctx.shared_memory({**RepresentationStore.specs(int(ctx.part.offsets[-1]), widths),
                                 **ParameterServer.specs(sum(p.numel() for p in params))}, "method.asynchronous=true")
        store = RepresentationStore(shm, ctx.comm)
        server = ParameterServer(shm, ctx.comm, ctx.cfg.lr, ctx.cfg.weight_decay)
        if ctx.rank == 0:
            store.init_stamps()
            server.initialise(params)
        ctx.comm.barrier()
        return server, store

    def before_forward(self, step: int) -> None:
        self.halo.refresh = step % self.sync_every == 0
        self.halo.step = step

    def train_epoch(self, epoch: int) -> torch.Tensor:
        if self.synchronous:
            self.steps += 1
            return super().train_epoch(epoch)
        # An epoch = P updates of the shared model, whoever makes them.
        losses = []
        while self.server.version() < (epoch + 1) * self.ctx.world:
            losses.append(self.async_step())
        if losses:
            self.last_loss = torch.stack(losses).mean()
        self.replicas_equal = False
        return self.last_loss

    def async_step(self) -> torch.Tensor:
        ctx = self.ctx
        self.straggle()
        params = list(ctx.model.parameters())
        pulled = self.server.pull(params)
        loss_sum = self.part_loss(self.steps)
        ctx.optimizer.zero_grad(set_to_none=True)
        (loss_sum * (1.0 / max(1, self.local_train))).backward()  # the server steps, not `self.optimize`
        self.halo.cold = False
        version = self.server.push([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])
        self.model_staleness.append(version - 1 - pulled)  # updates by others between my pull and push
        self.steps += 1
        return loss_sum.detach() / ctx.part.num_train_global

    def evaluation_model(self) -> torch.nn.Module:
        if self.asynchronous:
            self.ctx.comm.barrier()  # no update is in flight: every rank evaluates the same version
            self.server.pull(list(self.ctx.model.parameters()))
            self.replicas_equal = self.stateless
        return super().evaluation_model()

    def probes(self) -> dict:
        out = {"steps": self.steps}
        if self.synchronous:
            out.update(self.halo.probes())
        else:
            rows = {str(layer): {"mean": statistics.fmean(m for m, _ in s), "max": max(x for _, x in s)}
                    for layer, s in sorted(self.halo.staleness.items())}
            out["staleness"] = {
                "unit": "parameter-server versions (P versions = one epoch)",
                "halo_rows_by_layer": rows,
                "model_mean": statistics.fmean(self.model_staleness) if self.model_staleness else 0.0,
                "model_max": max(self.model_staleness, default=0),
            }
        return out

    # ------------------------------------------------------------------ the cost model's hooks
    #: A record from before `method.layer0` cached layer 0's inputs.

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(PartitionParallelMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """Every `sync_every` steps the stale tables (the layer's input rows, not its exchange width)
            are refreshed, forward only (no gradient crosses ranks), posted without waiting under
            `sync: overlapped`; averaged per epoch."""
            from benchmarks.base.traffic import FLOAT, Transfer, exchanged_layers, grad_allreduce, in_width
            every, hidden = options.sync_every, options.sync == "overlapped"
            out = [grad_allreduce(model)]
            for layer, _, _ in exchanged_layers(model, rank, cls.layer0_mode(options)):
                out.append(Transfer("stale_sync", layer, rank.halo * in_width(model, layer) * FLOAT / every, 1 / every,
                                    rank.peers / every, hidden))
            return out

        @classmethod
        def stale_table_bytes(cls, options, model, rank):
            """The tables of stale halo rows, every layer >= 1."""
            from benchmarks.base.traffic import stale_tables
            return stale_tables(model, rank)


