"""`benchmarks.commands`: the command line: composing with Hydra (and its source of plugin configs),
a run's report and exit status, the sweep, the generated option tables. Nothing below imports it."""
