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
