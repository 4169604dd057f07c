"""Every experiment preset composes, and its sweep expands to runs whose configurations compose and
pass the run config's schema (`config.check`, what `runner.plan` holds a run to); methods a preset
names that this checkout lacks are reported, not fatal."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.registry import CONF, group_options, method_names
from benchmarks.config import check
from benchmarks.sweep import _merge, bisect, expand, meets, strategy


@pytest.mark.parametrize("preset", group_options("experiment"))
def test_preset_sweep_expands_to_composable_runs(preset):
    runs, missing = expand([f"experiment={preset}"])
    assert runs or missing
    methods = method_names()  # once: it reads every plugin's name and every alias YAML
    assert set(missing).isdisjoint(methods)
    spec = strategy([f"experiment={preset}"])
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for overrides in runs:
            if spec is not None:  # a bisection's runs start at its first probe
                overrides = _merge(overrides, [f"{spec['key']}={spec['start']}"])
            cfg = compose("config", overrides=overrides)
            assert cfg.method.name in methods
            if preset.startswith(("sar_papers_", "llcg_table1_", "planetoid_baselines_")):
                assert cfg.reproduces  # paper presets say which reference table they reproduce
            check(OmegaConf.to_container(cfg, resolve=True))  # the schema takes every run of every preset


def test_quickstart_sweeps_every_registered_method_and_single_once():
    runs, missing = expand(["experiment=quickstart", "workers=1,2"])
    methods = [next(o.split("=", 1)[1] for o in r if o.startswith("method=")) for r in runs]
    assert sorted(set(methods)) == method_names() and not missing
    assert methods.count("single") == 1  # it ignores workers


def _value(run: list[str], key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in run if o.split("=", 1)[0] == key), None)


def test_variants_are_a_union_and_skip_drops_matching_runs():
    runs, _ = expand(["experiment=digest_accuracy", "dataset=cora", "model=gcn"])
    variants = {(_value(r, "partitioner"), _value(r, "method"), _value(r, "method.sync_every"),
                 _value(r, "method.asynchronous")) for r in runs}
    assert len(runs) == len(variants) == 2 * 9 - 1  # two partitioners x nine variants, sar not on random
    assert ("metis", "sar", None, None) in variants and ("random", "sar", None, None) not in variants
    assert ("random", "digest", "50", None) in variants and ("random", "digest", None, "true") in variants


def test_where_adds_overrides_to_matching_runs_and_the_command_line_wins():
    runs, _ = expand(["experiment=sampling_baselines", "model=sage", "workers=2", "dataset=cora,synthetic"])
    by = {(_value(r, "dataset"), _value(r, "method"), _value(r, "method.store")): r for r in runs}
    assert _value(by[("cora", "full_halo", None)], "dataset.nodes") is None
    synthetic = by[("synthetic", "full_halo", None)]
    assert _value(synthetic, "dataset.nodes") == "200000" and _value(synthetic, "epochs") == "100"
    sampled = by[("synthetic", "neighbor_sampling", "replicated")]
    assert _value(sampled, "dataset.nodes") == "200000" and _value(sampled, "epochs") == "20"  # later rule wins
    runs, _ = expand(["experiment=sampling_baselines", "model=sage", "workers=2", "dataset=synthetic", "epochs=3"])
    assert {_value(r, "epochs") for r in runs} == {"3"}
    assert all(len({o.split("=", 1)[0] for o in r}) == len(r) for r in runs)  # each key once


def test_a_command_line_value_keeps_only_the_variants_that_agree_with_it():
    runs, _ = expand(["experiment=sampling_baselines", "model=sage", "workers=2", "dataset=cora",
                      "method=neighbor_sampling,sar"])
    assert sorted((_value(r, "method"), _value(r, "method.store")) for r in runs) == [
        ("neighbor_sampling", "partitioned"), ("neighbor_sampling", "replicated"), ("sar", None)]


def test_bisect_finds_the_largest_value_that_fits_within_the_tolerance():
    for threshold in (1, 37, 1000, 123_456):
        probes = []

        def fits(n):
            probes.append(n)
            return n <= threshold

        lo, hi = bisect(fits, start=500, factor=1.5, tolerance=0.05)
        assert lo <= threshold < hi and hi - lo <= max(1, 0.05 * lo), (threshold, lo, hi)
        assert len(probes) == len(set(probes))  # no value probed twice
    assert bisect(lambda n: False, start=10) == (None, 1)


def test_a_bisection_probe_meets_the_bound_only_when_ok():
    spec = {"field": "summary.train_mem_delta_bytes_max", "at_most": 100}
    assert meets({"status": "ok", "summary": {"train_mem_delta_bytes_max": 100}}, spec)
    assert not meets({"status": "ok", "summary": {"train_mem_delta_bytes_max": 101}}, spec)
    assert not meets({"status": "failed", "error": "out of memory"}, spec) and not meets(None, spec)
    assert meets({"status": "ok", "summary": {"x": 5}}, {"field": "summary.x", "at_least": 5})


def test_the_bisection_preset_declares_its_strategy():
    spec = strategy(["experiment=sar_fit"])
    assert spec["key"] == "dataset.nodes" and spec["at_most"] == 2 * 2 ** 30
    assert strategy(["experiment=quickstart"]) is None
