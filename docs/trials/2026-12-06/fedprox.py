"""`fedprox`: FedProx's proximal local steps (Li et al., MLSys 2020) on local rounds: each local step
minimises the rank's own loss plus mu/2 ||w - w_avg||^2, w_avg the parameters of the last average,
so the parts' models drift less apart between averages. mu = 0 is plain local rounds (`psgd_pa`)."""
from dataclasses import dataclass

from benchmarks.base.options import option
from benchmarks.families.local_rounds import LocalRounds


class Method(LocalRounds):
    class About(LocalRounds.About):
        exact_control = {"name": "full_halo"}
        approximates = "local rounds on parts, cut edges dropped, each step pulled towards the last average"
        claim = "heterogeneous parts: the proximal term bounds the drift between averages"

    @dataclass(frozen=True)
    class Options(LocalRounds.Options):
        mu: float = option(0.01, "weight of the proximal term mu/2 ||w - w_avg||^2; 0: plain local rounds", ge=0)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.after_average()                         # the first round's anchor: the identical start

    def after_average(self):
        self.anchor = [p.detach().clone() for p in self.ctx.model.parameters()]

    def optimize(self, loss, scale=None, sync="grad_allreduce", **kwargs):
        mu = self.ctx.options.mu
        if mu:
            prox = sum(((p - a) ** 2).sum() for p, a in zip(self.ctx.model.parameters(), self.anchor))
            loss = loss + mu / 2 * prox / (scale or 1.0)   # backward multiplies the loss by `scale`
        super().optimize(loss, scale=scale, sync=sync, **kwargs)
