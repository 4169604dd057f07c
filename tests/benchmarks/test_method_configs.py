"""Method configs without YAMLs: every plugin is a Hydra node of its declared defaults, an alias is a
YAML over its plugin's node, resolution completes and validates `cfg["method"]` once, and an
out-of-tree plugin's typed options are chosen on the command line."""
from __future__ import annotations

import json
import os

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.base.registry import CONF, method_names
from benchmarks.core.datasets import PROJECT_ROOT
from benchmarks.base.errors import UserError
from benchmarks.run.config import check
from benchmarks.run.method import method_class, method_defaults
from tests import commands
from tests.conftest import SMALL_SYNTHETIC


def composed(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


def test_every_plugin_composes_with_its_declared_defaults_and_no_yaml():
    assert not (CONF / "method" / "sar.yaml").exists()
    assert composed("method=sar", "method.prefetch=2")["method"] == {"name": "sar", "mode": "sar", "prefetch": 2}
    assert composed("method=full_halo")["method"] == {"name": "full_halo", "layer0": "exchanged"}
    for name in method_names():
        cfg = composed(f"method={name}")
        assert cfg["method"]["name"] == name, f"method {name}: composes as {cfg['method']['name']}"
        assert {k: v for k, v in cfg["method"].items() if k not in ("name", "plugin")} == method_defaults(name), (
            f"method {name}: `method={name}` composes other values than its Options' defaults (and its alias "
            "YAML's); declare each option once, with option(default, ...)")


def test_an_alias_is_its_plugin_with_its_own_values_and_keeps_its_name():
    assert "ggs" in method_names() and method_class("ggs") is method_class("neighbor_sampling")
    assert method_defaults("ggs") == {**method_defaults("neighbor_sampling"), "fanouts": [10], "batch_size": 256,
                                      "local_steps": 8, "avg_every": 1}
    cfg = composed("method=ggs", "method.avg_weighting=uniform", "method.batch_size=64")
    assert cfg["method"] == {"name": "ggs", "plugin": "neighbor_sampling", "fanouts": [10], "batch_size": 64,
                             "store": "partitioned", "avg_every": 1, "avg_weighting": "uniform", "local_steps": 8,
                             "local_steps_rho": 1.0, "local_steps_schedule": "increase", "feature_cache": 0.0,
                             "cache_policy": "degree", "cache_presample_epochs": 2}
    run = check(cfg)
    assert run.method.avg_weighting == "uniform" and run.method.fanouts == [10] and run.method_name == "ggs"


def test_check_completes_the_method_config_and_changes_nothing_composed():
    for overrides in [[f"method={name}"] for name in method_names()] + [["method=digest", "method.sync_every=3"]]:
        cfg = composed(*overrides)
        before = json.dumps(cfg, sort_keys=True)
        run = check(cfg)
        # checking reads the composed config, never edits it
        assert json.dumps(cfg, sort_keys=True) == before, (
            f"{' '.join(overrides)}: checking edited the composed config; its Options.check must only raise")
    assert run.method_cls is method_class("digest") and run.method.sync_every == 3 and run.method.avg_every is None
    # A hand-built config gets every option: the record's config.method holds them all.
    cfg["method"] = {"name": "cluster_gcn", "num_parts": 8}
    assert check(cfg).as_dict()["method"] == {"name": "cluster_gcn", **method_defaults("cluster_gcn"), "num_parts": 8}
    cfg["method"] = {"name": "sar", "modes": "sa"}
    with pytest.raises(UserError,
                       match=r"unknown option method\.modes for method=sar; its options are: mode, prefetch"):
        check(cfg)


PLUGIN = """
from dataclasses import dataclass
from typing import Literal

from benchmarks.families.full_graph import FullGraphMethod
from benchmarks.base.options import option


class Method(FullGraphMethod):
    @dataclass(frozen=True)
    class Options(FullGraphMethod.Options):
        scale: float = option(1.0, "loss multiplier", gt=0)
        flavour: Literal["plain", "fancy"] = option("plain")

    def train_epoch(self, epoch):
        return super().train_epoch(epoch) * self.ctx.options.scale

    def probes(self):
        return {"seen": [self.ctx.options.scale, self.ctx.options.flavour]}
"""


def test_an_out_of_tree_plugin_without_yaml_takes_its_options_on_the_command_line(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "scaled.py").write_text(PLUGIN)
    (folder / "unchosen.py").write_text("raise RuntimeError('an unchosen plugin was imported')\n")
    env = {**os.environ, "GNNBENCH_METHODS_PATH": str(folder)}

    def cli(*args):
        return commands.run("benchmarks", *args, "workers=1", "epochs=2", "log_every=0", *SMALL_SYNTHETIC,
                            f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}", env=env)

    out = cli("method=scaled", "method.scale=2.5", "method.flavour=fancy")
    assert out.returncode == 0, out.stderr
    assert "unchosen" not in out.stderr  # only the chosen plugin's file is imported
    record = json.loads((PROJECT_ROOT / out.stdout.strip().splitlines()[-2].split(" ", 1)[1]).read_text())
    assert record["method"] == "scaled"
    assert record["config"]["method"] == {"name": "scaled", "scale": 2.5, "flavour": "fancy"}
    assert record["summary"]["per_rank"][0]["seen"] == [2.5, "fancy"]

    for args, message in [(["method=scaled", "method.scale=0"], "error: method.scale=0 must be a positive number"),
                          (["method=scaled", "method.flavour=odd"], "error: unknown method.flavour 'odd'"),
                          (["method=sra"], "error: unknown method 'sra'; choose one of: "
                                           + ", ".join(sorted({*method_names(), "scaled", "unchosen"})))]:
        out = cli(*args)
        assert out.returncode == 2 and out.stderr.strip().startswith(message), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_the_method_list_users_read_is_the_registrys():
    """docs/methods.md is `python -m benchmarks --methods`: a new plugin or option changes it, and
    this test says to regenerate it, so the list cannot drift from the code."""
    from benchmarks.run.methods_table import describe

    assert (PROJECT_ROOT / "docs" / "methods.md").read_text() == describe(), \
        "regenerate: python -m benchmarks --methods > docs/methods.md"
