"""How replicas of the model stay in step: a gradient all-reduce every step, or local steps with
parameter (and batch-norm statistic) averaging every `avg_every` steps. Shared by the
partition-parallel and mini-batch families."""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from benchmarks.core.comm import Comm, flatten, unflatten_into
from benchmarks.run.method import Method, RankContext
from benchmarks.base.options import Options, option


def model_state(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters and floating-point buffers (batch-norm running statistics): what averaging averages."""
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def average_model(model: torch.nn.Module, comm: Comm, weight: float, category: str) -> None:
    """In place: every tensor of `model_state` becomes sum over ranks of weight_r * tensor_r."""
    tensors = [t.data for t in model_state(model)]
    unflatten_into(comm.all_reduce(flatten(tensors) * weight, category), tensors)


def averaged_copy(model: torch.nn.Module, comm: Comm, weight: float) -> torch.nn.Module:
    """The ranks' weighted average of `model` as a new model (evaluation between averaging rounds:
    what a server holding the averaged model would evaluate; training state untouched)."""
    model = copy.deepcopy(model)
    average_model(model, comm, weight, "eval")
    return model


@dataclass(frozen=True)
class AveragingOptions(Options):
    """How replicas stay in step; shared by the partition-parallel and mini-batch methods."""

    # null: gradient all-reduce every step (DistDGL); k: local steps, parameters averaged every k (GGS, PSGD-PA)
    avg_every: Optional[int] = option(None, "local steps between parameter averaging", ge=1)
    # train_count: weighted by the ranks' training nodes (LLCG's code); uniform: 1/P (LLCG's paper)
    avg_weighting: Literal["train_count", "uniform"] = option("train_count")


@dataclass(frozen=True)
class PeriodicAveragingOptions(AveragingOptions):
    """For methods whose point is periodic averaging (PSGD-PA, LLCG): `avg_every` cannot be null."""

    avg_every: int = option(1, "local steps between parameter averaging", ge=1)


def local_steps_schedule(k: int, rho: float, rounds: int, schedule: str) -> list[int]:
    """Local steps of each of `rounds` rounds (LLCG's code, MortezaRamezani/llcg
    dgnn/train/dist/distgnn_correction.py: K_r = ceil(K / rho^r), reversed with `inc_k`):
    `increase` grows from ceil(K / rho^(rounds-1)) in the first round to K in the last;
    `decrease` shrinks from K. rho = 1: K every round. K * rho^-r, not K / rho^r: a large rho or many
    rounds make rho^-r underflow to 0 (one step), where rho^r would overflow a float."""
    steps = [max(1, math.ceil(k * rho ** -r - 1e-9)) for r in range(rounds)]
    return steps[::-1] if schedule == "increase" else steps


@dataclass(frozen=True)
class LocalStepOptions(Options):
    """How many local steps a round (an epoch) takes; PSGD-PA, LLCG and GGS."""

    # K_r = K every round (rho 1), or growing to K (`increase`) / shrinking from K (`decrease`) by rho a round
    local_steps_rho: float = option(1.0, "growth factor of the local steps per round; 1: constant", ge=1)
    local_steps_schedule: Literal["increase", "decrease"] = option("increase")

    def steps_of_round(self, rounds: int) -> list[int]:
        return local_steps_schedule(self.local_steps, self.local_steps_rho, rounds, self.local_steps_schedule)


class ReplicaAveraging(Method):
    """How replicas of the model stay in step: a gradient all-reduce every step (`avg_every: null`)
    or local steps with parameter (and batch-norm statistic) averaging every `avg_every` steps,
    weighted by training nodes (`avg_weighting: train_count`) or uniformly; evaluation of the
    average whenever the replicas differ. Shared by the partition-parallel and mini-batch methods.
    Methods that need periodic averaging (PSGD-PA, LLCG) take `PeriodicAveragingOptions`."""

    Options = AveragingOptions

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        options = ctx.options
        self.avg_every = options.avg_every
        self.local_train = int(ctx.part.train_mask.sum())
        self.avg_weight = (self.local_train / ctx.part.num_train_global
                           if options.avg_weighting == "train_count" else 1.0 / ctx.world)
        # With a gradient all-reduce the parameters never differ, but local batch-norm statistics do.
        self.stateless = not any(b.is_floating_point() for b in ctx.model.buffers())
        self.replicas_equal = True

    def average_if_due(self, steps_done: int) -> bool:
        """After an optimizer step: average the replicas if a round ends here; True if it did."""
        self.replicas_equal = self.avg_every is None and self.stateless
        if self.avg_every is None or steps_done % self.avg_every:
            return False
        average_model(self.ctx.model, self.ctx.comm, self.avg_weight, "param_avg")
        self.replicas_equal = True
        return True

    def evaluation_model(self) -> torch.nn.Module:
        """Between averaging rounds the replicas differ: evaluate their average (what a server
        holding the averaged model would evaluate), leaving each rank's training state alone."""
        if self.replicas_equal or self.ctx.world == 1:
            return self.ctx.model
        return averaged_copy(self.ctx.model, self.ctx.comm, self.avg_weight)
