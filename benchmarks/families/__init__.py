"""Method families: the training loops and aggregators that several plugins share.

- `full_graph`: one exact full-graph step per epoch (`single`, `full_halo`, `sar`);
- `replicas`: how replicas of the model stay in step (gradient all-reduce or parameter averaging);
- `partition_parallel`: each rank trains on its own part, other parts' rows dropped or stale
  (`psgd_pa`, `llcg`, `digest`);
- `local_rounds`: partition-parallel rounds of local steps, sampled or full-partition, then
  parameter averaging (`psgd_pa`, `llcg`);
- `minibatch`: data-parallel mini-batch training on sampled blocks or subgraphs (`neighbor_sampling`,
  `cluster_gcn`, `graphsaint`, `ggs`);
- `aggregators`: `LocalAggregator` (own rows, plus halo rows without gradient), which the
  partition-parallel and mini-batch families share.
Every loop computes its loss with `benchmarks.run.method.loss_share` and steps with `Method.optimize`.
A plugin subclasses one of these and overrides the few hooks that make it different.
"""


def names() -> list[str]:
    """Every family name `benchmarks.run.methods_table.family` can give a plugin: the runtime classes of this
    package a plugin may stand on, and `Method` (a sweep's `lr_by_family` is checked against them)."""
    import importlib
    import pkgutil

    from benchmarks.run.method import Method

    out = ["Method"]
    for module in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{module.name}")
        out += [v.__name__ for v in vars(mod).values() if isinstance(v, type) and issubclass(v, Method)
                and v.__module__ == mod.__name__]
    return sorted(set(out))
