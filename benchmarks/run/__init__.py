"""`benchmarks.run`: one run: the configuration schema, the method contract and its description, the
rank loop, the launcher and its rank server, the stopping rules, the record. It imports `base` and
`core`; the loops several methods share are `benchmarks.families`, above it."""
