"""Holding an exact method to the single-process oracle: same per-epoch losses, same gradients,
same evaluation, and exactly the analytic communication volume."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from benchmarks.core.models import build_model
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC

DATASETS = {
    # CiteSeer partitioned by METIS (with 3 parts one part has no halo at all); the synthetic graph
    # randomly (most edges cut, big halos).
    "citeseer": ["dataset=citeseer", "partitioner=metis"],
    "synthetic": ["dataset=synthetic", *SMALL_SYNTHETIC, "partitioner=random"],
}


#: Exact layouts are held to the oracle with dropout on: every mask is keyed by node and column, never
#: by rank (benchmarks/core/draws.py), so a layout drops out exactly what `single` does.
AT_DROPOUT = "dropout=0.5"


def run_ok(cfg):
    path, record = run(cfg)
    assert record["status"] == "ok", record.get("traceback")
    return path, record


def grads_of(path):
    return torch.load(path.with_suffix(".grads.pt"))


def analytic_bytes(record, cfg, refetch_attention: bool = False) -> dict[str, int]:
    """Per epoch, all ranks (docs/measurement.md, "Communication"): each halo node is sent once per layer, and its
    gradient comes back on layers whose exchanged rows need one; gradients are all-reduced once.
    With SAR's rematerialisation, attention layers also refetch their halo rows in backward."""
    g, p = record["graph"], record["partition"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], heads=cfg["model"].get("heads", 4), batch_norm=cfg["batch_norm"])
    halo = sum(p["halo_nodes_per_rank"])
    exchanges = model.exchanges()
    params = sum(t.numel() for t in model.parameters())
    out = {
        "halo_fwd": sum(halo * width * 4 for width, _ in exchanges),
        "halo_bwd": sum(halo * width * 4 for width, needs_grad in exchanges if needs_grad),
        "grad_allreduce": record["workers"] * params * 4,
    }
    if refetch_attention and cfg["model"]["name"] == "gat":
        out["halo_refetch"] = out["halo_bwd"]
    return out


# The oracle's (record, epoch-0 gradients) per configuration (less where it writes): the same
# oracle serves every test and every method that compares against it, so it runs once a session.
_ORACLES: dict[str, tuple[dict, dict]] = {}


def oracle(make_cfg, common):
    cfg = make_cfg("method=single", *common, "probe_grads=true")
    key = json.dumps({k: v for k, v in cfg.items() if k not in ("results_dir", "cache_dir")}, sort_keys=True)
    if key not in _ORACLES:
        path, record = run_ok(cfg)
        assert record["summary"]["comm_bytes_per_epoch"] == 0
        _ORACLES[key] = record, grads_of(path)
    record, grads = _ORACLES[key]
    return copy.deepcopy(record), {name: g.clone() for name, g in grads.items()}


def assert_matches(record, path, oracle_record, oracle_grads, label):
    losses = [h["train_loss"] for h in record["history"]]
    assert losses == pytest.approx([h["train_loss"] for h in oracle_record["history"]], rel=1e-5, abs=1e-6), label
    grads = grads_of(path)
    assert grads.keys() == oracle_grads.keys()
    for name in grads:
        # float32 sums in another order: an element's error scales with the tensor's largest (dropout
        # 0.5 doubles the kept rows, GAT's softmax amplifies), so the absolute tolerance does too
        atol = max(1e-6, 1e-4 * oracle_grads[name].abs().max().item())
        torch.testing.assert_close(grads[name], oracle_grads[name], rtol=1e-4, atol=atol,
                                   msg=lambda m: f"{name}, {label}: {m}")
    # Evaluation is the shared exact inference: accuracies match the oracle's too.
    assert [h["val_acc"] for h in record["history"]] == [h["val_acc"] for h in oracle_record["history"]], label


def assert_comm(record, cfg, want: dict[str, int], label):
    epochs = cfg["epochs"]
    if record["workers"] == 1:
        assert record["summary"]["comm_bytes_per_epoch"] == 0, label
        return
    got = record["comm"]["bytes_by_category"]
    assert sum(record["partition"]["halo_nodes_per_rank"]) > 0
    for category, per_epoch in want.items():
        assert got.get(category, 0) == epochs * per_epoch, f"{category}, {label}"
    training = {c for c in got if c not in ("setup", "eval", "probe")}
    assert training <= set(want) | {"norm"}, label  # nothing else moved
    norm = got.get("norm", 0) // epochs
    assert [h["comm_bytes"] for h in record["history"]] == [sum(want.values()) + norm] * epochs, label


def param_bytes(record, cfg) -> int:
    g = record["graph"]
    model = build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                        cfg["seed"], heads=cfg["model"].get("heads", 4))
    return sum(t.numel() for t in model.parameters()) * 4
