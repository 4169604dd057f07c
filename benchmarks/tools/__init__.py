"""Tools beside the runtime: measurements the cost model and the checks need, each run on its own
(`python -m benchmarks.tools.<name>`), none imported by the runtime (`benchmarks/*.py`, `methods/`):

- `hardware`: hardware profiles (`conf/hardware/<name>.yaml`): their schema and loader;
- `calibrate`: measures this machine and writes its profile (docs/measurement.md, "Calibration");
- `partition_stats`: partition statistics at any P, measured or extrapolated (`data/partition_stats/`);
- `gpu_check`: the CUDA paths CI cannot run (`make gpu-check`);
- `sampler_bench`: the neighbour sampler alone, on one core (the sampling study's throughput);
- `stages`: time and memory of every stage up to ranks ready to train;
- `run_cost`: where a whole run's wall time goes, phase by phase, at several worker counts.
"""
