"""`benchmarks.base`: what every other room stands on, with no torch: errors, outputs, declared
options, the registry of names (plugins, aliases, group YAMLs), progress lines, leftover processes,
and the cost model's counts of what a method moves (`traffic`). It imports no other room."""
