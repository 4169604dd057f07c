"""Every experiment preset composes, and its sweep expands to runs whose configurations compose;
methods a preset names that this checkout lacks are reported, not fatal."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from benchmarks.cli import CONF, group_options, registered_methods
from benchmarks.sweep import expand


@pytest.mark.parametrize("preset", group_options("experiment"))
def test_preset_sweep_expands_to_composable_runs(preset):
    runs, missing = expand([f"experiment={preset}"])
    assert runs or missing
    assert set(missing).isdisjoint(registered_methods())
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for overrides in runs:
            cfg = compose("config", overrides=overrides)
            assert cfg.method.name in registered_methods()
            if preset.startswith(("sar_papers_", "llcg_table1_", "planetoid_baselines_")):
                assert cfg.reproduces  # paper presets say which reference table they reproduce


def test_quickstart_sweeps_every_registered_method_and_single_once():
    runs, missing = expand(["experiment=quickstart", "workers=1,2"])
    methods = [next(o.split("=", 1)[1] for o in r if o.startswith("method=")) for r in runs]
    assert sorted(set(methods)) == registered_methods() and not missing
    assert methods.count("single") == 1  # it ignores workers
