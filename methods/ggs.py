"""`ggs`: LLCG's Global Graph Sampling baseline (Ramezani et al., ICLR 2022; its code's `DistDGL`
class): neighbour sampling whose seeds come from the worker's own part and whose neighbours come from
the whole graph (the partitioned store: other parts' neighbours sampled by their owners, remote input
features fetched, all counted), with parameter averaging every `avg_every` steps instead of a
gradient all-reduce. It is `neighbor_sampling` with GGS's defaults (conf/method/ggs.yaml), named for
LLCG's tables (docs/sampling.md)."""
from methods.neighbor_sampling import Method  # noqa: F401
