"""`psgd_pa`: parallel SGD with periodic averaging (LLCG's Algorithm 1, Ramezani et al., ICLR 2022).

Each rank trains on its own part with the edges to other parts dropped (the part's subgraph,
normalised on its own degrees) and averages parameters with the others every `avg_every` steps
(one step = one full-partition step = one epoch). The only training traffic is the averaging.
Reconstruction choices (docs/digest.md): full-partition steps instead of LLCG's neighbour-sampled
mini-batches; averaging weighted by training nodes (LLCG's code) unless `avg_weighting: uniform`.
"""
from benchmarks.families.partition_parallel import PartitionParallelMethod
from benchmarks.families.replicas import PeriodicAveragingOptions


class Method(PartitionParallelMethod):
    Options = PeriodicAveragingOptions
