"""`psgd_pa`: parallel SGD with periodic averaging (LLCG's Algorithm 1, Ramezani et al., ICLR 2022).

Each rank trains on its own part with the edges to other parts dropped (the part's subgraph,
normalised on its own degrees): an epoch is one round of K local steps (`local_steps`, optionally
growing over rounds by `local_steps_rho`), then parameters are averaged with the other ranks
(every `avg_every` rounds). A local step is, by default, a neighbour-sampled mini-batch of
`batch_size` training nodes with `fanouts` neighbours from the part's own subgraph (LLCG's regime:
nothing crosses ranks); `local: full` makes it a full-partition step (`local: full, local_steps: 1`
is the suite's former psgd_pa). The only training traffic is the averaging (`param_avg`).
Reconstruction choices (docs/digest.md): seeds are drawn from the part's training nodes (LLCG's
code draws them from all the part's nodes and masks the loss); averaging weighted by training
nodes (LLCG's code) unless `avg_weighting: uniform`.
"""
from benchmarks.families.local_rounds import LocalRounds


class Method(LocalRounds):
    class About(LocalRounds.About):
        approximates = 'local training on parts, cut edges dropped, parameters averaged'
        claim = ("description: the communication floor, no halo traffic at all (PSGD-PA is the baseline of "
                 "Ramezani et al., ICLR 2022, Algorithm 1, not a method that paper proposes)")
        exact_control = {"name": "full_halo"}

    pass
