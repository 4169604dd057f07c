"""`single`: the whole graph in one process, the oracle every exact method is held against.

It shares the full-graph step and the aggregation kernel with `full_halo`; with one process the
halo is empty, so nothing is exchanged. It ignores `workers` (the record says workers=1)."""
from benchmarks.families.full_graph import FullGraphMethod


class Method(FullGraphMethod):
    class About(FullGraphMethod.About):
        claim = 'description: the oracle, exact full-batch training in one process, when the graph fits'

    single_process = True
    # One process: no halo, nothing crosses ranks.
    applies = (FullGraphMethod.applies - {"comm", "memory"}
               | {"memory.checkpoint", "memory.offload", "model.attention_dropout"})

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            """One process: nothing crosses ranks."""
            return []

