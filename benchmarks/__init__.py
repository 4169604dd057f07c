"""gnnbench runtime: datasets, partitioning, launcher, communication layer, models, probes, records."""
