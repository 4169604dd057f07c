"""`digest`: DIGEST, periodic stale representation synchronisation (Chai, Bai, Zhao, Cheng,
arXiv 2206.00057), and DIGEST-A (`asynchronous: true`).

Each rank trains on its own part (one full-partition step per epoch) with the full row panel of
the adjacency (global degrees). In-edges inside the part use fresh rows; in-edges from other parts
read a table of halo rows, detached (no gradient reaches other ranks, no backward halo traffic):
  - layer 0: the halo input features, exact (they never change), fetched once at the first step
    (category `halo_inputs`: a one-time cost, like loading the partition);
  - deeper layers: halo rows of the layer input, refreshed every `sync_every` steps by one exact
    exchange of the rows this step's forward computed (category `stale_sync`), which that step
    uses; the first step is always a refresh, so the table starts filled (DIGEST's cold start).
Halo rows are layer inputs, projected with the current weights (a stale representation, never a
stale weight). Parameters: gradient all-reduce every step (`avg_every: null`) or periodic averaging.

DIGEST-A: workers push their boundary rows to and pull their halo rows from a shared representation
store at their own sync steps, and pull parameters from / push gradients to a parameter server every
step, never waiting for each other (benchmarks/stores.py; shared memory on one machine). An
epoch is P updates of the shared model, from whichever workers are ready; fast workers contribute
more. The only barriers are the first step (the exact cold-start fill) and evaluations. Staleness
actually seen is recorded per rank (`summary.per_rank[].staleness`, in parameter-server versions).

Which of these choices are the paper's and which are reconstructions: docs/digest.md.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from benchmarks.aggregation import exchange_rows
from benchmarks.errors import UserError
from benchmarks.families.partition_parallel import LocalAggregator, PartitionParallelMethod
from benchmarks.options import option
from benchmarks.stores import ParameterServer, RepresentationStore


class StaleHalo:
    """Halo rows per layer, called by the aggregator with the detached layer input."""

    def __init__(self, ctx):
        self.ctx, self.tables, self.refresh = ctx, {}, True

    def __call__(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if layer == 0:
            if 0 not in self.tables:
                self.tables[0] = exchange_rows(self.ctx.part.x, self.ctx.plan, self.ctx.comm, "halo_inputs", 0)
        elif self.refresh or layer not in self.tables:
            self.tables[layer] = self.fetch(h, layer)
        return self.tables[layer]

    def exchange(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return exchange_rows(h, self.ctx.plan, self.ctx.comm, "stale_sync", layer)

    fetch = exchange


class StoreHalo(StaleHalo):
    """DIGEST-A: after the cold-start exchange, refreshes go through the representation store."""

    def __init__(self, ctx, store: RepresentationStore, server: ParameterServer):
        super().__init__(ctx)
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
    @dataclass
    class Options(PartitionParallelMethod.Options):
        # steps (= epochs) between halo refreshes; 1 = fresh halo rows every step
        sync_every: int = option(10, "steps between halo refreshes", ge=1)
        # true = DIGEST-A (shared representation store + parameter server, no waiting)
        asynchronous: bool = option(False)

        def check(self, cfg: dict) -> None:
            if self.asynchronous and self.avg_every is not None:
                raise UserError("method.asynchronous=true updates the parameters through a parameter server every "
                                "step; set method.avg_every=null")

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
            self.halo = StaleHalo(ctx)
        return LocalAggregator(ctx.adj, ctx.comm, self.halo)  # the full row panel, global degrees

    def open_shared_state(self) -> tuple[ParameterServer, RepresentationStore]:
        ctx = self.ctx
        params = list(ctx.model.parameters())
        widths = {layer: ctx.cfg["hidden"] for layer in range(1, ctx.cfg["layers"])}
        shm = ctx.shared_memory({**RepresentationStore.specs(int(ctx.part.offsets[-1]), widths),
                                 **ParameterServer.specs(sum(p.numel() for p in params))}, "method.asynchronous=true")
        store = RepresentationStore(shm, ctx.comm)
        server = ParameterServer(shm, ctx.comm, ctx.cfg["lr"], ctx.cfg["weight_decay"])
        if ctx.rank == 0:
            store.init_stamps()
            server.initialise(params)
        ctx.comm.barrier()
        return server, store

    def before_forward(self, step: int) -> None:
        self.halo.refresh = step % self.sync_every == 0

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
        loss_sum = self.forward_backward(self.steps, 1.0 / max(1, self.local_train))
        self.halo.cold = False
        version = self.server.push([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])
        self.model_staleness.append(version - 1 - pulled)  # updates by others between my pull and push
        self.steps += 1
        return loss_sum / ctx.part.num_train_global

    def evaluation_model(self) -> torch.nn.Module:
        if self.asynchronous:
            self.ctx.comm.barrier()  # no update is in flight: every rank evaluates the same version
            self.server.pull(list(self.ctx.model.parameters()))
            self.replicas_equal = self.stateless
        return super().evaluation_model()

    def probes(self) -> dict:
        out = {"steps": self.steps}
        if self.asynchronous:
            rows = {str(layer): {"mean": statistics.fmean(m for m, _ in s), "max": max(x for _, x in s)}
                    for layer, s in sorted(self.halo.staleness.items())}
            out["staleness"] = {
                "unit": "parameter-server versions (P versions = one epoch)",
                "halo_rows_by_layer": rows,
                "model_mean": statistics.fmean(self.model_staleness) if self.model_staleness else 0.0,
                "model_max": max(self.model_staleness, default=0),
            }
        return out
