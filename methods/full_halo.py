"""`full_halo`: exact propagation-based domain parallelism ("vanilla" domain parallel).

Each layer fetches every halo row in one all-to-all through the partition's exchange plan, then
aggregates locally; backward sends the halo gradients back with the reverse all-to-all. Gradients
are all-reduced every step. Equal to `single` up to float summation order.

`layer0` (`families.partition_parallel.LAYER0`): `exchanged` (the default) exchanges layer 0 like every
other layer; `cached` and `precomputed` compute it exactly from the halo's input features fetched
once, as the boundary methods do, which is a different model at dropout > 0 (who draws the halo's
masks). `full_halo method.layer0=<mode>` is the exact control of a method that treats layer 0 so."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from benchmarks.core.aggregation import HaloAggregator
from benchmarks.base.errors import UserError
from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.families.partition_parallel import LAYER0, LayerZeroExact, layer0_aggregator, layer0_option


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        claim = 'description: the exact distributed baseline (vanilla domain parallelism)'

    # the exact halo exchange's attention keys its dropout by edge (aggregation.HaloAggregator)
    applies = FullGraphMethod.applies | {"model.attention_dropout"}

    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        layer0: Literal[LAYER0] = layer0_option("exchanged")

        def check(self, run) -> None:
            super().check(run)
            if self.layer0 != "exchanged" and run is not None and run.model and run.model.attention_dropout:
                raise UserError(f"model.attention_dropout is applied by the halo exchange's attention, which "
                                f"method.layer0={self.layer0} replaces at layer 0; use method.layer0=exchanged")

    def make_aggregator(self):
        ctx = self.ctx
        every_layer = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute)
        if ctx.options.layer0 == "exchanged":
            return every_layer
        return LayerZeroExact(layer0_aggregator(ctx, ctx.options.layer0), every_layer, ctx.comm)

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """Every halo row of every exchanged layer, forward and back, and the gradient all-reduce."""
            from benchmarks.base.traffic import full_halo
            return full_halo(model, rank, cls.layer0_mode(options))

