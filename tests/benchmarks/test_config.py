"""The run configuration's schema (benchmarks/run/config.py): every key of a composed config is checked by
`runner.plan` before anything is loaded, in one line naming the key; the declared defaults are the
YAMLs' own. In-process: `plan` composes nothing and loads nothing."""
from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from benchmarks.core import datasets
from benchmarks.base.registry import CONF, group_options
from benchmarks.run.config import SAVERS, SECTIONS, RunOptions, check
from benchmarks.base.errors import UserError
from benchmarks.core.models import ModelOptions
from benchmarks.base.options import defaults, validate
from benchmarks.run.runner import plan

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("overrides, message", [
    (["method=full_halo", "+method.plugin=sar"], "method.plugin=sar is not an option"),  # reserved for alias YAMLs
    (["model=gat", "model.heads=0"], "model.heads=0 must be a positive integer"),
    (["model=gat", "hidden=130"], "hidden=130 must be divisible by model.heads=4 for GAT"),
    (["lr=abc"], "lr='abc' must be a number >= 0 (learning rate)"),
    (["lr=-1"], "lr=-1 must be a number >= 0"),
    (["lr=inf"], "lr=inf must be a number >= 0"),
    (["weight_decay=-1"], "weight_decay=-1 must be a number >= 0"),
    (["dist_timeout_s=0"], "dist_timeout_s=0 must be a positive number"),
    (["eval_every=0"], "eval_every=0 must be a positive integer"),
    (["log_every=-1"], "log_every=-1 must be a non-negative integer"),
    (["warmup_epochs=-1"], "warmup_epochs=-1 must be a non-negative integer"),
    (["threads_per_rank=0"], "threads_per_rank=0 must be a positive integer, or null"),
    (["seed=-1"], "seed=-1 must be an integer in [0, 2^63)"),
    # D20: seeds reach pymetis (a C long long) and torch: bounded before anything runs
    (["seed=9223372036854775808"], "seed=9223372036854775808 must be an integer in [0, 2^63)"),
    (["dataset.seed=18446744073709551616"], "dataset.seed=18446744073709551616 must be an integer in [0, 2^63)"),
    # D2: a saver the method does not apply is refused, never named in a record that did not run it
    (["method=pyg_plain", "precision=bf16"], "method=pyg_plain does not apply precision=bf16"),
    (["method=pyg_plain", "memory.checkpoint=layer"], "method=pyg_plain does not apply memory.checkpoint=layer"),
    (["method=pyg_plain", "kernel=messages"], "method=pyg_plain does not apply kernel=messages"),
    (["method=pyg_plain", "comm.quantize=int8"], "method=pyg_plain does not apply comm.quantize=int8"),
    (["method=single", "comm.quantize=int8"], "method=single does not apply comm.quantize=int8"),
    (["method=psgd_pa", "comm.quantize=int8", "comm.quantize_grads=true"],
     "method=psgd_pa does not apply comm.quantize"),
    (["method=llcg", "comm.quantize=fp16"], "method=llcg does not apply comm.quantize=fp16"),
    (["method=cluster_gcn", "comm.quantize=int8"], "method=cluster_gcn does not apply comm.quantize=int8"),
    (["method=neighbor_sampling", "method.store=replicated", "comm.quantize=int8"],
     "method.store=replicated fetches no rows from other ranks"),
    (["method=neighbor_sampling", "memory.checkpoint=layer", "memory.checkpoint_halo=keep"],
     "method=neighbor_sampling does not apply memory.checkpoint_halo=keep"),
    (["method=digest", "precision=fp16"], "precision=fp16 needs loss scaling, which method=digest does not apply"),
    (["batch_norm=yes"], "batch_norm='yes' must be true or false"),
    (["device=tpu"], "unknown device 'tpu'; choose one of: cpu, cuda"),
    (["results_dir=null"], "results_dir=None must be a string"),
    (["dataset.features=0"], "dataset.features=0 must be a positive integer"),
    (["dataset.nodes=abc"], "dataset.nodes='abc' must be an integer >= 2"),
    (["dataset.avg_degree=0"], "dataset.avg_degree=0 must be a positive number"),
    (["dataset.homophily=2"], "dataset.homophily=2 must be a number in [0, 1]"),
    (["dataset.feature_noise=-1"], "dataset.feature_noise=-1 must be a number >= 0"),
    (["dataset.degree_skew=-1"], "dataset.degree_skew=-1 must be a number >= 0"),
    (["dataset.train_frac=0"], "dataset.train_frac=0 selects no node of 20000 (the train set would be empty)"),
    (["dataset.nodes=10", "dataset.classes=2", "dataset.test_frac=0.05"],
     "dataset.test_frac=0.05 selects no node of 10"),
    (["dataset.train_frac=0.9", "dataset.val_frac=0.9"],
     "dataset.train_frac=0.9 + val_frac=0.9 + test_frac=0.5 = 2.3 must be at most 1"),
    (["dataset.train_frac=1.5"], "dataset.train_frac=1.5 must be a number in [0, 1]"),
    (["dataset.nodes=5"], "synthetic graph needs nodes >= classes >= 2 (got nodes=5, classes=8)"),
    (["+foo=1"], "unknown key foo; valid keys are: allow_nonfinite, backend, batch_norm,"),
    (["+dataset.foo=1"], "unknown option dataset.foo for dataset=synthetic; its options are: avg_degree, classes,"),
    (["dataset=cora", "+dataset.foo=1"], "unknown option dataset.foo for dataset=cora; its options are: transform"),
    (["dataset=cora", "+dataset.nodes=100"],
     "dataset.nodes is an option of dataset=synthetic, not of dataset=cora (a preset's dataset.* keys"),
    (["+model.foo=1"], "unknown option model.foo for model=sage; its options are: attention_dropout, heads"),
    (["+method.foo=1"], "unknown option method.foo for method=full_halo; its options are: layer0"),
    # older messages, kept word for word
    (["workers=0"], "workers must be a positive integer (got 0)"),
    (["epochs=abc"], "epochs must be a positive integer (got 'abc')"),
    (["dropout=1"], "dropout must be in [0, 1) (got 1)"),
    (["straggler_delay_s=[-1]"], "straggler_delay_s must be a list of seconds >= 0, one per rank (got [-1])"),
    (["malloc_mmap_threshold=0"], "malloc_mmap_threshold must be null or a number of bytes in [1, 2^31) (got 0)"),
    (["backend=nccl"], "backend=nccl does not fit device=cpu: use gloo on cpu and nccl on cuda"),
])
def test_every_key_is_checked_before_anything_runs(make_cfg, overrides, message):
    with pytest.raises(UserError) as e:
        plan(make_cfg(*overrides))
    assert str(e.value).startswith(message) and len(str(e.value).splitlines()) == 1, str(e.value)


def test_what_the_schema_allows_plans(make_cfg):
    for overrides in (["straggler_delay_s=null"], ["straggler_delay_s=[0,0.5]"], ["threads_per_rank=2", "lr=0"],
                      ["malloc_mmap_threshold=null", "dist_timeout_s=0.5", "warmup_epochs=0", "log_every=0"],
                      ["model=gat", "model.heads=8"], ["model=sage", "+model.heads=3"],  # sage ignores heads
                      ["dataset.train_frac=0.7", "dataset.val_frac=0.2", "dataset.test_frac=0.1"],
                      ["dataset=cora"], ["+reproduces=llcg_table1", "+study=digest"],
                      # savers where the method applies them
                      ["method=cluster_gcn", "comm.quantize=int8", "comm.quantize_grads=true"],
                      ["method=single", "precision=fp16", "memory.checkpoint=all", "kernel=messages"],
                      ["method=full_halo", "precision=bf16", "memory.checkpoint=layer", "memory.checkpoint_halo=keep",
                       "comm.quantize=int4", "comm.quantize_grads=true", "kernel=messages"]):
        plan(make_cfg(*overrides))


def test_checking_leaves_the_dataset_and_model_sections_as_composed(make_cfg):
    cfg = make_cfg("model=sage")
    before = {k: v for k, v in cfg.items() if k != "method"}
    plan(cfg)
    assert {k: v for k, v in cfg.items() if k != "method"} == before  # the record's name hashes them as given


def _yaml(path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path))


def test_the_declared_defaults_are_the_yamls():
    top = {k: v for k, v in _yaml(CONF / "config.yaml").items() if k not in ("defaults", "hydra")}
    savers = {name: top.pop(name) for name in SAVERS}
    assert top.pop("dataset") == defaults(datasets.DatasetOptions)  # every dataset's options, the synthetic ones apart
    assert top == defaults(RunOptions)  # a key added to config.yaml is declared in RunOptions too
    assert savers == {name: defaults(cls) for name, cls in SAVERS.items()}  # and a saver's in its section
    assert set(RunOptions.reserved) == {*SECTIONS, *SAVERS}
    synthetic = _yaml(CONF / "dataset" / "synthetic.yaml")
    generator = {k: v for k, v in defaults(datasets.SyntheticOptions).items() if k != "transform"}  # config.yaml's
    assert synthetic.pop("name") == "synthetic" and synthetic == generator
    presets = set()
    for name in group_options("dataset"):
        section = _yaml(CONF / "dataset" / f"{name}.yaml")
        if name == "synthetic":
            continue
        if section["name"] == "synthetic":  # the generator at other sizes (synthetic-products): its options only
            assert set(section) <= {"name", *defaults(datasets.SyntheticOptions)}, name
            presets.add(name)
        else:
            assert section == {"name": name}  # a real dataset takes its name alone
            assert datasets.options(name) is datasets.DatasetOptions
    assert set(group_options("dataset")) - presets == set(datasets.LOADERS)
    assert "synthetic-products" in presets
    gat = _yaml(CONF / "model" / "gat.yaml")
    assert gat["heads"] == defaults(ModelOptions)["heads"]
    for name in group_options("model"):
        assert set(_yaml(CONF / "model" / f"{name}.yaml")) <= {"name", *defaults(ModelOptions)}


def test_every_declared_key_has_a_type_the_validator_knows():
    for cls in (RunOptions, datasets.SyntheticOptions, ModelOptions):
        for f in dataclasses.fields(cls):
            validate(cls, {f.name: getattr(cls(), f.name)}, section="")  # the default passes its own check


def test_check_needs_no_machine_facts(make_cfg):
    cfg = make_cfg("device=cuda")  # refused by plan on a machine without CUDA, not by the schema
    run = check(cfg)
    assert run.method_name == "full_halo" and run.method_cls.__module__ == "methods.full_halo"


def test_a_float_given_as_an_integer_is_one_configuration(make_cfg):
    """`dropout=0` and `dropout=0.0` (or `lr=1` and `lr=1.0`) are one run: one record name, one setting."""
    from benchmarks.run.record import config_hash, record_path, setting_config

    a, b = check(make_cfg("dropout=0", "lr=1")), check(make_cfg("dropout=0.0", "lr=1.0"))
    assert record_path(a) == record_path(b) and a.as_dict() == b.as_dict()
    assert (setting_config(a.as_dict()) == setting_config(b.as_dict())
            and config_hash(a.as_dict()) == config_hash(b.as_dict()))
    assert isinstance(a.as_dict()["dropout"], float)
