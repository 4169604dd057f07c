"""`benchmarks.core`: the numerical core: graphs and datasets, partitions, communication and its
quantisation, the native kernels, aggregation, models, sampling, stores, keyed draws, recompute and
the memory probes. It imports only `base`."""
