"""`full_halo`: exact propagation-based domain parallelism ("vanilla" domain parallel).

Each layer fetches every halo row in one all-to-all through the partition's exchange plan, then
aggregates locally; backward sends the halo gradients back with the reverse all-to-all. Gradients
are all-reduced every step. Equal to `single` up to float summation order."""
from benchmarks.families.full_graph import FullGraphMethod


class Method(FullGraphMethod):
    pass
