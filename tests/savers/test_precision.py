"""`precision=bf16`: the dense parts run under autocast, aggregations in fp32, on every method; rows
exchanged after a projection travel in bf16 (half the bytes), and the losses stay close to fp32's."""
from __future__ import annotations

import pytest

from tests.methods.exactness import DATASETS, run_ok


def test_bf16_trains_close_to_fp32_and_sends_projected_rows_in_half_the_bytes(make_cfg, data_root):
    common = ["method=full_halo", "workers=3", *DATASETS["citeseer"], "model=gcn", f"data_root={data_root}",
              "epochs=5"]
    _, fp32 = run_ok(make_cfg(*common))
    _, bf16 = run_ok(make_cfg(*common, "precision=bf16"))
    assert bf16["variant"] == "full_halo precision=bf16"
    assert [h["train_loss"] for h in bf16["history"]] == pytest.approx([h["train_loss"] for h in fp32["history"]],
                                                                       rel=0.02)
    got, want = bf16["comm"]["bytes_by_category"], fp32["comm"]["bytes_by_category"]
    # GCN projects before aggregating: every exchanged row and its gradient is bf16; the parameter
    # gradients stay fp32 (autocast keeps the parameters and their gradients in fp32).
    assert got["halo_fwd"] * 2 == want["halo_fwd"] and got["halo_bwd"] * 2 == want["halo_bwd"]
    assert got["grad_allreduce"] == want["grad_allreduce"]


@pytest.mark.parametrize("method", ["sar", "digest"])
def test_bf16_composes_with_methods_and_checkpointing(make_cfg, method):
    cfg = make_cfg(f"method={method}", *DATASETS["synthetic"], "model=gat", "precision=bf16", "dropout=0.5",
                   "epochs=2")
    _, plain = run_ok(cfg)
    _, checkpointed = run_ok(make_cfg(f"method={method}", *DATASETS["synthetic"], "model=gat", "precision=bf16",
                                      "dropout=0.5", "epochs=2", "memory.checkpoint=layer"))
    assert [h["train_loss"] for h in checkpointed["history"]] == pytest.approx(
        [h["train_loss"] for h in plain["history"]], rel=1e-3)


def test_fp16_scales_the_loss_and_trains_close_to_fp32(make_cfg):
    """fp16 autocast with dynamic loss scaling (CPU autocast has fp16 too, so it runs here): the
    rows exchanged after a projection are fp16 (half the bytes) and the losses follow fp32's."""
    common = ["method=full_halo", "workers=2", *DATASETS["citeseer"], "model=gcn", "epochs=4"]
    _, fp32 = run_ok(make_cfg(*common))
    _, fp16 = run_ok(make_cfg(*common, "precision=fp16"))
    assert [h["train_loss"] for h in fp16["history"]] == pytest.approx([h["train_loss"] for h in fp32["history"]],
                                                                       rel=0.02)
    assert fp16["comm"]["bytes_by_category"]["halo_fwd"] * 2 == fp32["comm"]["bytes_by_category"]["halo_fwd"]


def test_the_gpu_check_says_in_one_line_that_there_is_no_gpu_here(capsys):
    import torch

    from benchmarks.tools import gpu_check
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: run `make gpu-check` itself")
    assert gpu_check.main([]) == 2
    assert capsys.readouterr().out.strip() == "gpu-check: no CUDA device here (torch.cuda.is_available() is false)"


@pytest.mark.parametrize("method", ["neighbor_sampling", "psgd_pa"])
def test_fp16_loss_scaling_reaches_the_minibatch_and_local_round_families(make_cfg, method):
    """`Method.optimize` scales every family's loss: the mini-batch loop (a gradient all-reduce every
    step, so every rank skips alike) and PSGD-PA's local rounds (each rank its own scale) train
    under fp16 close to fp32."""
    common = [f"method={method}", "workers=2", *DATASETS["synthetic"], "model=gcn", "epochs=3"]
    _, fp32 = run_ok(make_cfg(*common))
    _, fp16 = run_ok(make_cfg(*common, "precision=fp16"))
    assert [h["train_loss"] for h in fp16["history"]] == pytest.approx([h["train_loss"] for h in fp32["history"]],
                                                                       rel=0.02)
