"""The record builder on its own: labels, setting keys, the summary, and the ok / failed records it
writes (fields analysis reads, history kept on failure); plus the launch plan's one-line checks.
No process is spawned."""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest

from benchmarks.run.config import check
from benchmarks.base.errors import UserError
from benchmarks.run.method import method_defaults
from benchmarks.run import record
from benchmarks.run.record import RecordBuilder, config_hash, record_path, setting_config, summarize, variant_label, \
    warmup_dropped
from benchmarks.run.runner import plan, run
from tests.conftest import SMALL_SYNTHETIC

pytestmark = pytest.mark.fast


def entry(epoch, seconds=1.0, val=None, loss=1.0, comm=100):
    return {"epoch": epoch, "train_loss": loss, "val_acc": val, "test_acc": None if val is None else val - 0.1,
            "train_acc": None, "epoch_time_s": seconds, "comm_bytes": comm}


def rank_probes(rank, peak=1000, delta=100, by_cat=None):
    return {"rank": rank, "peak_rss_bytes": peak, "peak_pss_bytes": peak - 10, "train_mem_delta_bytes": delta,
            "train_data_delta_bytes": delta - 10,
            "process_peak_rss_bytes": peak + 5, "process_peak_pss_bytes": peak - 5,
            "threads": 2, "comm_bytes_by_category": by_cat or {"halo_fwd": 300, "eval": 50, "setup": 7}}


def test_variant_names_only_options_that_differ_from_the_defaults_when_it_ran():
    defaults = {"mode": "sar", "prefetch": 1}
    assert variant_label({"name": "sar", "mode": "sar", "prefetch": 1}, defaults) == "sar"
    assert variant_label({"name": "sar", "mode": "sa", "prefetch": 1}, defaults) == "sar mode=sa"
    assert variant_label({"name": "ggs", "plugin": "neighbor_sampling", "fanouts": [10]}, {"fanouts": [10]}) == "ggs"
    assert variant_label({"name": "x", "new": 3}, {}) == "x new=3"  # an option the defaults lack is named


def test_setting_leaves_out_the_comparison_axes_and_where_things_are(make_cfg):
    a, b = make_cfg("method=full_halo", "workers=2", "seed=0"), make_cfg("method=sar", "workers=4", "seed=1",
                                                                         "results_dir=/elsewhere")
    assert setting_config(a) == setting_config(b)
    assert config_hash(a) != config_hash(b)
    assert setting_config(make_cfg("hidden=32")) != setting_config(a)
    assert record_path(check(a)).name.startswith("synthetic-sage-full_halo-w2-s0-")


HASHED_KEYS = Path(__file__).parent / "data" / "hashed_keys.json"


def schema_keys() -> dict:
    """Every key a record's name hashes, by section (a method's by its plugin): what the schema declares today."""
    from dataclasses import fields

    from benchmarks.base.registry import method_names
    from benchmarks.core import datasets
    from benchmarks.core.models import MemoryOptions, ModelOptions
    from benchmarks.core.quantize import CommOptions
    from benchmarks.run.config import RunOptions
    from benchmarks.run.method import method_class
    from benchmarks.run.record import NON_SEMANTIC

    def names(cls):
        return sorted(f.name for f in fields(cls))
    plugins = {method_class(m).__module__.rpartition(".")[2]: method_class(m).Options for m in method_names()}
    return {"top": sorted(set(names(RunOptions)) - set(NON_SEMANTIC)), "dataset": names(datasets.SyntheticOptions),
            "model": names(ModelOptions), "memory": names(MemoryOptions), "comm": names(CommOptions),
            "method": {plugin: names(cls) for plugin, cls in sorted(plugins.items())}}


def test_every_option_added_since_records_are_kept_is_listed_with_the_value_that_runs_as_before():
    # A record's name hashes every option; an option added later changes every configuration, so without an entry in
    # record.ADDED_OPTIONS every kept record would lose its name and a sweep would run it again beside the old one.
    if os.environ.get("GNNBENCH_UPDATE_KEYS"):  # renames every record: only where that is meant
        HASHED_KEYS.write_text(json.dumps(schema_keys(), indent=1, sort_keys=True) + "\n")
    kept, now = json.loads(HASHED_KEYS.read_text()), schema_keys()
    added = [f"{section}.{key}" for section in ("top", "dataset", "model", "memory", "comm")
             for key in now[section] if key not in kept.get(section, [])]
    added += [f"method.{plugin}.{key}" for plugin, keys in now["method"].items() if plugin in kept["method"]
              for key in keys if key not in kept["method"][plugin]]  # a new plugin has no record to keep
    added = [key.removeprefix("top.") for key in added]
    missing = [key for key in added if key not in record.ADDED_OPTIONS]
    assert not missing, (f"options added since records are kept: {', '.join(missing)}; list each in "
                         "benchmarks/run/record.py ADDED_OPTIONS with the value that runs as before it existed")


def test_an_added_option_at_its_former_behaviour_keeps_the_record_name(make_cfg, monkeypatch):
    cfg = check(make_cfg("method=bns_gcn", "workers=2", "seed=0")).as_dict()
    before = copy.deepcopy(cfg)
    del before["method"]["boundary_fraction"], before["eval_every"], before["comm"]
    monkeypatch.setattr(record, "ADDED_OPTIONS", {
        "method.bns_gcn.boundary_fraction": cfg["method"]["boundary_fraction"], "eval_every": cfg["eval_every"],
        "comm": {}, **{f"comm.{k}": v for k, v in cfg["comm"].items()}})
    assert config_hash(before) == config_hash(cfg)
    assert config_hash({**cfg, "eval_every": cfg["eval_every"] + 1}) != config_hash(cfg)
    other = copy.deepcopy(cfg)  # another plugin's option of that name is not the added one
    other["method"] = {"name": "full_halo", "boundary_fraction": cfg["method"]["boundary_fraction"]}
    assert config_hash(other) != config_hash({**other, "method": {"name": "full_halo"}})


def test_warmup_drops_at_least_one_epoch_and_never_all():
    assert [warmup_dropped(n, 5) for n in (1, 2, 3, 10)] == [0, 1, 2, 5]
    assert warmup_dropped(10, 0) == 1


def test_summary_reduces_history_and_every_ranks_probes():
    history = [entry(0, 9.0), entry(1, 1.0, val=0.5), entry(2, 2.0, val=0.7), entry(3, 3.0, val=0.6)]
    s = summarize(history, [rank_probes(0, 1000, 100), rank_probes(1, 3000, 300)], warmup_epochs=1)
    assert s["epoch_time_s_median"] == 2.0 and s["warmup_epochs_dropped"] == 1 and s["train_time_s"] == 15.0
    assert s["peak_rss_bytes_max"] == 3000 and s["train_mem_delta_bytes_max"] == 300
    assert (s["peak_pss_bytes_max"], s["peak_pss_bytes_sum"]) == (2990, 3980)  # PSS: the largest rank, the machine
    assert (s["process_peak_pss_bytes_max"], s["process_peak_pss_bytes_sum"], s["process_peak_rss_bytes_max"]) == \
        (2995, 3990, 3005)  # the process over the whole run
    assert s["train_mem_delta_bytes_mean"] == 200 and s["train_data_delta_bytes_max"] == 290
    assert (s["best_val_acc"], s["best_epoch"]) == (0.7, 2) and s["test_acc_at_best_val"] == pytest.approx(0.6)


def builder(make_cfg, tmp_path, *overrides):
    cfg = make_cfg("method=sar", "method.mode=sa", *overrides)
    prepared = {"graph": {"edges": 1000}, "partition": {}, "setup": {}}
    return RecordBuilder(check(cfg), tmp_path, prepared, {"cores": 2}, method_defaults("sar"))


def test_finish_writes_everything_analysis_reads(make_cfg, tmp_path):
    b = builder(make_cfg, tmp_path)
    history = [entry(e, 1.0 + e, val=0.5) for e in range(4)]
    record = b.finish(history, [rank_probes(0), rank_probes(1)])
    assert json.loads(b.path.read_text()) == json.loads(json.dumps(record, default=str))
    assert record["status"] == "ok" and record["variant"] == "sar mode=sa" and len(record["setting"]) == 6
    assert record["summary"]["train_time_s"] == 1 + 2 + 3 + 4
    assert record["comm"]["bytes_by_category"] == {"halo_fwd": 600, "eval": 100, "setup": 14}
    assert record["comm"]["bytes_per_epoch_by_category"] == {"halo_fwd": 150}  # training traffic only
    assert record["summary"]["edges_per_s"] == 1000 / record["summary"]["epoch_time_s_median"]


def test_fail_keeps_the_history_reached(make_cfg, tmp_path):
    b = builder(make_cfg, tmp_path)
    b.keep_epoch(entry(0))
    b.keep_epoch(entry(1))
    record = b.fail("RuntimeError: boom", "trace")
    assert record["status"] == "failed" and record["error"] == "RuntimeError: boom"
    assert [h["epoch"] for h in record["history"]] == [0, 1] and record["variant"] == "sar mode=sa"
    assert json.loads(b.path.read_text())["status"] == "failed"


@pytest.mark.parametrize("overrides, message", [
    (["workers=0"], "workers must be a positive integer (got 0)"),
    (["dropout=1"], "dropout must be in [0, 1)"),
    (["malloc_mmap_threshold=-1"], "malloc_mmap_threshold must be null or a number of bytes"),
    (["method=sar", "method.mode=fast"], "unknown method.mode 'fast'"),
    (["partitioner=spectral"], "unknown partitioner 'spectral'"),
])
def test_plan_rejects_bad_input_in_one_line_before_anything_runs(make_cfg, overrides, message):
    with pytest.raises(UserError) as e:
        plan(make_cfg(*overrides))
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1


def test_plan_resolves_the_method_once_and_counts_its_ranks(make_cfg):
    p = plan(make_cfg("method=single", "workers=4"))
    assert p.world == 1 and p.cfg.method_cls.single_process and p.method_defaults == {}
    assert plan(make_cfg("method=ggs")).method_defaults["fanouts"] == [10]


def strict_json(text: str) -> dict:
    """Parse as strict JSON: bare NaN / Infinity (Python's json extension) are refused."""
    def refuse(constant):
        raise ValueError(f"non-JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def test_records_are_strict_json_with_non_finite_numbers_as_null(make_cfg, tmp_path):
    b = builder(make_cfg, tmp_path)
    b.keep_epoch(entry(0))
    b.keep_epoch(entry(1, loss=float("nan")))
    b.fail("Diverged: train loss became NaN at epoch 2")
    record = strict_json(b.path.read_text())
    assert [h["train_loss"] for h in record["history"]] == [1.0, None]
    history = [entry(0, val=float("inf")), entry(1, loss=float("-inf"), val=0.5)]
    b.finish(history, [rank_probes(0), rank_probes(1)])
    assert strict_json(b.path.read_text())["summary"]["final_train_loss"] is None


@pytest.mark.parametrize("overrides", [["lr=1e30"], ["lr=1e30", "model=gat"]])
def test_a_diverging_run_ends_failed_naming_the_epoch(make_cfg, overrides):
    path, record = run(make_cfg("method=single", "epochs=4", *SMALL_SYNTHETIC, *overrides))
    assert record["status"] == "failed"
    assert re.fullmatch(r"Diverged: train loss became (NaN|infinite) at epoch \d "
                        r"\(allow_nonfinite=true trains on\)", record["error"]), record["error"]
    assert strict_json(path.read_text())["history"][-1]["train_loss"] is None


def test_allow_nonfinite_trains_on_and_records_nulls(make_cfg):
    path, record = run(make_cfg("method=single", "epochs=4", "lr=1e30", "allow_nonfinite=true", *SMALL_SYNTHETIC))
    assert record["status"] == "ok" and len(record["history"]) == 4
    assert strict_json(path.read_text())["summary"]["final_train_loss"] is None


@pytest.mark.parametrize("make_unwritable, message", [
    (lambda p: p.write_text("a file"), "is a file, not a folder"),
    (lambda p: (p.parent / "file").write_text("x"), "is not a writable folder"),
])
def test_an_unwritable_results_dir_is_refused_before_anything_runs(make_cfg, tmp_path, make_unwritable, message):
    folder = tmp_path / "out"
    make_unwritable(folder)
    target = folder if "a file" in message else tmp_path / "file" / "results"
    cfg = make_cfg(*SMALL_SYNTHETIC)
    cfg["results_dir"] = str(target)
    with pytest.raises(UserError, match=f"results_dir={target} {message}"):
        run(cfg)
    assert not (tmp_path / "cache").exists()  # nothing was loaded or partitioned
