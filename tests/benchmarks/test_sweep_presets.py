"""Every experiment preset composes, and its sweep expands to runs whose configurations compose and
pass the run config's schema (`config.check`, what `runner.plan` holds a run to); methods a preset
names that this checkout lacks are reported, not fatal."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf._utils import get_yaml_loader

from benchmarks.base.registry import CONF, group_options, method_names
from benchmarks.run.config import check
from benchmarks.base.errors import UserError
from benchmarks.commands.sweep import Bisect, _merge, bisect, bisect_spec, expand, meets, strategy
from benchmarks.commands.sweep import main as sweep_main


@pytest.fixture(autouse=True, scope="module")
def yaml_parsed_once():
    """Every compose reads each config file again and YAML parsing is most of its cost: here a file's
    text is parsed once (a pure function of the text) and each load still builds a fresh config
    from it, as `OmegaConf.load` does."""
    parsed: dict[str, object] = {}
    load = OmegaConf.load

    def cached(file_):
        if isinstance(file_, (str, Path)):
            text = Path(file_).read_text(encoding="utf-8")
        elif getattr(file_, "read", None):
            text = file_.read()
        else:
            return load(file_)
        if text not in parsed:
            parsed[text] = yaml.load(text, Loader=get_yaml_loader())
        obj = copy.deepcopy(parsed[text])
        if obj is not None and not isinstance(obj, (list, dict, str)):
            raise IOError(f"Invalid loaded object type: {type(obj).__name__}")
        return OmegaConf.create() if obj is None else OmegaConf.create(obj)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OmegaConf, "load", staticmethod(cached))
        yield


class Composer:
    """Hydra's compose, with the defaults list composed once per choice of config groups: a run's
    configuration is that composition with the run's value overrides applied by Hydra's own code
    (`ConfigLoaderImpl._apply_overrides_to_config`, what `compose` does after composing the defaults
    list, in struct mode), so it is the configuration `compose` returns. A preset's 100+ runs differ
    mostly in values (seeds, options), so this composes a few dozen defaults lists, not a hundred."""

    GROUPS = frozenset(p.name for p in CONF.iterdir() if p.is_dir())

    def __init__(self):
        self._bases: dict[tuple[str, ...], DictConfig] = {}

    def __call__(self, overrides: list[str]) -> DictConfig:
        groups = tuple(o for o in overrides if _key(o).lstrip("+~") in self.GROUPS)
        values = [o for o in overrides if o not in groups]
        if groups not in self._bases:
            self._bases[groups] = compose("config", overrides=list(groups))
        cfg = copy.deepcopy(self._bases[groups])
        ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), cfg)
        return cfg


def _key(override: str) -> str:
    return override.split("=", 1)[0]


@pytest.mark.parametrize("preset", group_options("experiment"))
def test_preset_sweep_expands_to_composable_runs(preset):
    runs, missing = expand([f"experiment={preset}"])
    assert runs or missing
    methods = method_names()  # once: it reads every plugin's name and every alias YAML
    assert set(missing).isdisjoint(methods)
    spec = strategy([f"experiment={preset}"])
    composer = Composer()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for i, overrides in enumerate(runs):
            if spec is not None:  # a bisection's runs start at its first probe
                overrides = _merge(overrides, [f"{spec.key}={spec.start}"])
            cfg = composer(overrides)
            if i in (0, len(runs) - 1):  # the shortcut is Hydra's compose: checked on a sample of each preset
                assert OmegaConf.to_container(cfg) == OmegaConf.to_container(compose("config", overrides=overrides))
            assert cfg.method.name in methods
            if preset.startswith(("sar_papers_", "llcg_table1_", "planetoid_baselines_")):
                assert cfg.reproduces  # paper presets say which reference table they reproduce
            check(OmegaConf.to_container(cfg, resolve=True))  # the schema takes every run of every preset


def test_quickstart_sweeps_every_registered_method_and_single_once():
    runs, missing = expand(["experiment=quickstart", "workers=1,2"])
    methods = [next(o.split("=", 1)[1] for o in r if o.startswith("method=")) for r in runs]
    left = sorted(set(method_names()) - set(methods))
    assert not left and not missing, (
        f"methods {left} are not in the quickstart (conf/experiment/quickstart.yaml sweeps `${{all_methods:}}`): "
        f"{missing}")
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
    spec = Bisect(key="dataset.nodes", start=10, field="summary.train_mem_delta_bytes_max", at_most=100)
    assert meets({"status": "ok", "summary": {"train_mem_delta_bytes_max": 100}}, spec)
    assert not meets({"status": "ok", "summary": {"train_mem_delta_bytes_max": 101}}, spec)
    assert not meets({"status": "failed", "error": "out of memory"}, spec) and not meets(None, spec)
    at_least = Bisect(key="dataset.nodes", start=10, field="summary.best_val_acc", at_least=0.5)
    assert meets({"status": "ok", "summary": {"best_val_acc": 0.5}}, at_least)
    assert not meets({"status": "ok", "summary": {"best_val_acc": None}}, at_least)  # never evaluated


@pytest.mark.parametrize("bisect, message", [
    # D17: an incomplete spec, or a field no record has, is refused before any probe runs
    ({"key": "dataset.nodes"}, "missing keys sweep.bisect.start, sweep.bisect.field"),
    ({"key": "dataset.nodes", "start": 8000, "field": "summary.nope", "at_most": 1},
     "sweep.bisect.field=summary.nope is not a number of a record's summary; choose one of: "
     "summary.epoch_time_s_median"),
    ({"key": "dataset.nodes", "start": 8000, "field": "summary.best_val_acc"}, "sweep.bisect needs one bound"),
    # D16: a factor of 1 (or below) would probe the same value forever
    ({"key": "dataset.nodes", "start": 8000, "field": "summary.best_val_acc", "at_least": 0.5, "factor": 1},
     "sweep.bisect.factor=1 must be a number > 1"),
    ({"key": "dataset.nodes", "start": 0, "field": "summary.best_val_acc", "at_least": 0.5},
     "sweep.bisect.start=0 must be a positive integer"),
    ({"key": "dataset.nodes", "start": 10, "field": "summary.best_val_acc", "at_least": 0.5, "tolerance": 0},
     "sweep.bisect.tolerance=0 must be a positive number"),
    ("dataset.nodes", "sweep.bisect must be a mapping"),
])
def test_a_bad_bisection_spec_is_refused_in_one_line(bisect, message):
    with pytest.raises(UserError) as e:
        bisect_spec({"bisect": bisect})
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_a_bad_bisection_spec_stops_the_sweep_before_any_probe(tmp_path, capsys):
    """D16 and D17 on the command line: status 2 and one line, no record written."""
    for extra in (["+sweep.bisect.key=dataset.nodes"],
                  ["sweep.bisect.factor=1"], ["sweep.bisect.field=summary.nope"]):
        base = ["experiment=sar_fit", f"results_dir={tmp_path}/r", f"cache_dir={tmp_path}/c"]
        if extra[0].startswith("+"):
            base = ["experiment=quickstart", "method=full_halo", f"results_dir={tmp_path}/r", f"cache_dir={tmp_path}/c"]
        with pytest.raises(SystemExit) as e:
            sweep_main([*base, *extra])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and len(err.splitlines()) == 1 and "sweep.bisect" in err, err
    assert not (tmp_path / "r").exists()


def test_the_bisection_preset_declares_its_strategy():
    spec = strategy(["experiment=sar_fit"])
    assert spec.key == "dataset.nodes" and spec.at_most == 2 * 2 ** 30
    assert strategy(["experiment=quickstart"]) is None
