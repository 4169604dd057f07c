"""A paper's regime beside its method: the feature transform, which layers weight decay reaches, GAT's
attention dropout and the papers' stopping rules (issue 38). In-process, no rank started."""
from __future__ import annotations

import pytest
import torch

from benchmarks.run.config import check
from benchmarks.core.datasets import SyntheticOptions, load_dataset, transformed
from benchmarks.core.draws import Draws
from benchmarks.base.errors import UserError
from benchmarks.core.models import build_model, decay_groups
from benchmarks.base.options import defaults
from benchmarks.run.record import run_variant, setting_config
from benchmarks.run.stopping import Stopper, selected

pytestmark = pytest.mark.fast


def test_row_normalize_divides_each_row_by_its_sum_and_leaves_empty_rows_empty(data_root):
    raw = load_dataset({"name": "cora"}, data_root)
    normal = load_dataset({"name": "cora", "transform": "row_normalize"}, data_root)
    sums = raw.x.sum(1)
    assert sums.min() >= 1  # Cora's rows are binary, 1 to 30 words
    torch.testing.assert_close(normal.x.sum(1), torch.ones(raw.num_nodes))
    torch.testing.assert_close(normal.x * sums[:, None], raw.x)
    assert raw.fingerprint() != normal.fingerprint()  # its own partition cache
    g = transformed(raw, "none")
    assert g is raw
    zero = transformed(type(raw)(**{**vars(raw), "x": torch.zeros_like(raw.x)}), "row_normalize")
    assert zero.x.abs().sum() == 0  # tkipf/gcn: a row summing to 0 stays 0, no NaN


def test_row_normalize_refuses_signed_features_in_one_line():
    graph = load_dataset({"name": "synthetic", **defaults(SyntheticOptions), "nodes": 50})
    with pytest.raises(UserError, match="needs non-negative features") as e:
        transformed(graph, "row_normalize")
    assert "\n" not in str(e.value)


def test_the_regime_axes_are_in_the_variant_and_the_hash_but_not_the_setting(make_cfg):
    plain = check(make_cfg("method=single", "dataset=cora"))
    regime = check(make_cfg("method=single", "dataset=cora", "dataset.transform=row_normalize",
                            "weight_decay_layers=first"))
    assert run_variant(plain.as_dict(), {}) == "single"
    assert run_variant(regime.as_dict(), {}) == "single dataset.transform=row_normalize weight_decay_layers=first"
    assert setting_config(plain.as_dict()) == setting_config(regime.as_dict())  # paired in one setting
    assert plain.as_dict()["dataset"] != regime.as_dict()["dataset"]  # and hashed apart


@pytest.mark.parametrize("which, decayed", [
    ("all", {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "layers.2.weight",
             "layers.2.bias"}),
    ("first", {"layers.0.weight", "layers.0.bias"}),  # Kipf & Welling: the first layer's
    ("all_but_last", {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}),  # GAS
])
def test_weight_decay_reaches_the_layers_named(which, decayed):
    model = build_model("gcn", 8, 16, 3, 3, 0.5, 0)
    groups = decay_groups(model, 5e-4, which)
    names = {id(p): n for n, p in model.named_parameters()}
    got = {names[id(p)] for g in groups if g["weight_decay"] == 5e-4 for p in g["params"]}
    assert got == decayed
    assert sum(len(g["params"]) for g in groups) == len(names)  # every parameter is stepped


def test_the_gcn_window_stops_once_the_loss_exceeds_its_last_window_mean():
    stopper = Stopper("window", 3)
    losses = [5, 4, 3, 2, 2.5, 2.4, 2.6, 3.0]
    stops = [stopper.stop(v, 0.5) for v in losses]
    # tkipf/gcn: epoch > 3 and loss > mean of the 3 before: epoch 4 (2.5 > mean(4, 3, 2) = 3)? no; epoch 6:
    # 2.6 > mean(2, 2.5, 2.4) = 2.3, the first that does
    assert stops.index(True) == 6
    history = [{"epoch": i, "val_acc": 0.1 * i, "val_loss": v, "test_acc": i} for i, v in enumerate(losses[:7])]
    assert selected(history, "window")["epoch"] == 6  # the model it stopped with


def test_the_gat_patience_counts_epochs_without_a_better_loss_or_accuracy():
    stopper = Stopper("patience", 2)
    #            acc   loss
    seq = [(0.5, 1.0), (0.6, 0.9), (0.6, 0.95), (0.55, 0.8), (0.5, 0.85), (0.5, 0.9)]
    stops = [stopper.stop(loss, acc) for acc, loss in seq]
    assert stops == [False, False, False, False, False, True]  # 0.6 >= 0.6 resets; 0.8 resets; two without
    history = [{"epoch": i, "val_acc": a, "val_loss": v, "test_acc": 10 + i} for i, (a, v) in enumerate(seq)]
    # the reference's checkpoint: the last epoch that met both (epoch 1: 0.6 >= 0.6 and 0.9 <= 0.9)
    assert selected(history, "patience")["epoch"] == 1
    assert selected(history, "none")["epoch"] == 1  # the first best validation accuracy


def test_the_plateau_counts_epochs_without_a_strictly_better_accuracy_and_reports_the_best():
    """The findings' rule: a loss that rises while the accuracy climbs does not end the run or pick an early
    model (the `patience` rule's checkpoint would be epoch 0 here), and a tie does not reset the count."""
    stopper = Stopper("plateau", 2)
    #            acc   loss
    seq = [(0.5, 1.0), (0.6, 1.1), (0.6, 1.2), (0.7, 1.3), (0.7, 1.35), (0.65, 1.4)]
    stops = [stopper.stop(loss, acc) for acc, loss in seq]
    assert stops == [False, False, False, False, False, True]  # 0.6 = 0.6 and 0.7 = 0.7 do not reset
    history = [{"epoch": i, "val_acc": a, "val_loss": v, "test_acc": 10 + i} for i, (a, v) in enumerate(seq)]
    assert selected(history, "plateau")["epoch"] == 3  # the first best validation accuracy
    assert selected(history, "patience")["epoch"] == 0


def test_attention_dropout_is_keyed_by_edge_not_by_layout():
    draws = Draws(0)
    alpha = torch.rand(6, 4)
    dst, src = torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 5, 1, 7, 2, 9])
    out = draws.edge_dropout(alpha, 0.6, ("attention", 0), (dst, src))
    # another layout holds the same edges in another order: each edge loses the same coefficients
    perm = torch.tensor([3, 1, 5, 0, 2, 4])
    again = Draws(0).edge_dropout(alpha[perm], 0.6, ("attention", 0), (dst[perm], src[perm]))
    torch.testing.assert_close(again, out[perm])
    kept = out != 0
    torch.testing.assert_close(out[kept], alpha[kept] / 0.4)
    big = draws.edge_dropout(torch.ones(20000, 4), 0.6, ("attention", 1), (torch.arange(20000), torch.arange(20000)))
    assert (big == 0).float().mean().item() == pytest.approx(0.6, abs=0.02)


@pytest.mark.parametrize("bad, message", [
    (["model=gcn", "+model.attention_dropout=0.6"], "applies to model=gat"),
    (["model=gat", "model.attention_dropout=0.6", "method=psgd_pa"], "does not apply model.attention_dropout"),
    (["stopping=window", "eval_every=2"], "set eval_every=1"),
    (["dataset.transform=whiten"], "dataset.transform"),
    (["weight_decay_layers=middle"], "weight_decay_layers"),
])
def test_a_regime_the_run_cannot_follow_is_refused_in_one_line(make_cfg, bad, message):
    with pytest.raises(UserError, match=message) as e:
        check(make_cfg("dataset=cora", *bad))
    assert "\n" not in str(e.value)
