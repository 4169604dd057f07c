"""Activation checkpointing (`memory.checkpoint`) composes with every method and changes nothing but
memory and recompute traffic: the same per-epoch losses and epoch-0 gradients as the same run
without it, on real gloo ranks, with dropout on (the recompute replays the masks) and batch norm
(its running statistics are taken once)."""
from __future__ import annotations

import pytest
import torch

from benchmarks.base.errors import UserError
from benchmarks.run.runner import plan
from tests.methods.exactness import DATASETS, grads_of, run_ok

# (method and its options, the modes tried, what the recompute adds to the traffic: `_recompute` categories)
CASES = {
    "single": (["method=single"], ("layer",), set()),
    "full_halo": (["method=full_halo", "workers=3"], ("layer", "all"), {"halo_fwd_recompute"}),
    "sar": (["method=sar", "workers=3"], ("all",), {"halo_fwd_recompute"}),  # SAR's shards fetched again
    # stale rows and posted exchanges are replayed, never fetched twice
    "digest": (["method=digest", "method.sync_every=2", "workers=3"], ("layer", "all"), set()),
    "neighbor_sampling": (["method=neighbor_sampling", "method.fanouts=[5,5]", "workers=2"], ("layer",), set()),
    # stale blocks posted a step ago and blocks a skip rule decided on: replayed too
    "pipegcn": (["method=pipegcn", "workers=3"], ("all",), set()),
    "sancus": (["method=sancus", "workers=3"], ("layer",), set()),
}


def losses_and_grads(make_cfg, *overrides):
    path, record = run_ok(make_cfg(*overrides, "probe_grads=true"))
    return record, [h["train_loss"] for h in record["history"]], grads_of(path)


@pytest.mark.parametrize("case", list(CASES))
def test_checkpointing_gives_the_same_losses_and_gradients(make_cfg, data_root, case):
    method, modes, recompute_categories = CASES[case]
    common = [*method, *DATASETS["synthetic"], "model=sage", "layers=2", "dropout=0.5", "epochs=3",
              f"data_root={data_root}"]
    base, base_losses, base_grads = losses_and_grads(make_cfg, *common)
    for mode in modes:
        record, losses, grads = losses_and_grads(make_cfg, *common, f"memory.checkpoint={mode}")
        assert record["variant"] == f"{base['variant']} memory.checkpoint={mode}"
        assert losses == pytest.approx(base_losses, rel=1e-5, abs=1e-6), mode
        for name in base_grads:
            torch.testing.assert_close(grads[name], base_grads[name], rtol=1e-4, atol=1e-6)
        got, want = record["comm"]["bytes_by_category"], base["comm"]["bytes_by_category"]
        assert {c for c in got if c.endswith("_recompute")} == recompute_categories, mode
        for category in want:  # what the step sends is unchanged; the recompute's traffic is apart
            assert got[category] == want[category], (mode, category)


def test_kept_halo_rows_are_not_fetched_again_and_batch_norm_statistics_are_taken_once(make_cfg, data_root):
    common = ["method=full_halo", "workers=3", *DATASETS["citeseer"], "model=gat", "batch_norm=true",
              "dropout=0.5", f"data_root={data_root}"]
    base, base_losses, base_grads = losses_and_grads(make_cfg, *common)
    record, losses, grads = losses_and_grads(make_cfg, *common, "memory.checkpoint=all",
                                             "memory.checkpoint_halo=keep")
    assert losses == pytest.approx(base_losses, rel=1e-5, abs=1e-6)
    for name in base_grads:
        torch.testing.assert_close(grads[name], base_grads[name], rtol=1e-4, atol=1e-6)
    got = record["comm"]["bytes_by_category"]
    assert not {c for c in got if c.endswith("_recompute")} - {"norm_recompute"}  # halo rows kept, not refetched
    # The evaluation uses the running statistics: had the recompute taken them twice, accuracies would differ.
    assert [h["val_acc"] for h in record["history"]] == [h["val_acc"] for h in base["history"]]


@pytest.mark.parametrize("overrides, message", [
    (["memory.checkpoint=some"], "unknown memory.checkpoint .some.; choose one of: all, layer, none"),
    (["memory.checkpoint_halo=keep"], "memory.checkpoint_halo=keep applies to a recompute"),
    (["+memory.offload_to=cpu"], "unknown option memory.offload_to"),
    (["memory.offload=activations"],
     "memory.offload=activations moves device memory to the host, so it needs device=cuda"),
    (["method=digest", "method.offload_stale=true"], "method.offload_stale=true moves .* needs device=cuda"),
    # DIGEST's own option: method.offload_stale
    (["+memory.offload_stale=true"], "unknown option memory.offload_stale"),
    (["precision=fp16", "method=digest"], "precision=fp16 needs loss scaling, which method=digest does not apply"),
    (["memory=layer"], "memory is a section of options"),
])
def test_bad_memory_options_are_one_line_errors(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message) as e:
        plan(make_cfg(*overrides))
    assert "\n" not in str(e.value)
