"""Layer 0's treatments (`method.layer0`) and the boundary methods' exact controls. At the default
dropout (0.5) `precomputed` and `cached_undropped` are different models (dropout drawn on the
aggregate, or not on the halo), so each boundary method with its approximation switched off must give
the per-epoch losses of `full_halo` with the *same* layer 0. `cached` is `exchanged`'s model: every
mask is keyed by node (benchmarks/core/draws.py), so the receiver drops out a halo row exactly as its owner
would; under `draws=per_rank` it is another sample. Without dropout every treatment is the oracle."""
from __future__ import annotations

import pytest

from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok

# The overrides that switch each approximation off (PipeGCN with the owner's dropout masks, as
# full_halo's: its default, the receiver's, is a treatment of its own).
SWITCHED_OFF = {
    "pipegcn": ["method.pipeline=false", "method.halo_dropout=sender"],
    "bns_gcn": ["method.boundary_fraction=1.0"],
    "sancus": ["method.threshold=0"],
}


def losses(record) -> list[float]:
    return [h["train_loss"] for h in record["history"]]


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_boundary_methods_switched_off_are_full_halo_with_the_same_layer0_at_dropout(make_cfg, data_root, model):
    common = [*DATASETS["citeseer"], f"model={model}", f"data_root={data_root}", "layers=3", "workers=3",
              "dropout=0.5", "epochs=4"]
    exact = {}
    for layer0 in ("cached", "precomputed") if model == "sage" else ("cached",):
        _, exact[layer0] = run_ok(make_cfg("method=full_halo", f"method.layer0={layer0}", *common))
        for method, off in SWITCHED_OFF.items():
            _, record = run_ok(make_cfg(f"method={method}", *off, f"method.layer0={layer0}", *common))
            assert losses(record) == pytest.approx(losses(exact[layer0]), rel=1e-4), (method, layer0)
            assert record["control"] is None  # switched off, it is its own control
    _, exchanged = run_ok(make_cfg("method=full_halo", *common))
    assert losses(exchanged) == pytest.approx(losses(exact["cached"]), rel=1e-4)  # the owners' masks
    if "precomputed" in exact:
        assert losses(exchanged) != pytest.approx(losses(exact["precomputed"]), rel=1e-3)  # another model
    else:
        _, per_rank = run_ok(make_cfg("method=full_halo", "method.layer0=cached", "draws=per_rank", *common))
        assert losses(per_rank) != pytest.approx(losses(exchanged), rel=1e-3)  # each rank its own masks
        assert "draws=per_rank" in per_rank["variant"]


def test_without_dropout_every_treatment_is_the_oracle(make_cfg, data_root):
    common = [*DATASETS["citeseer"], "model=sage", f"data_root={data_root}", "layers=3"]
    single, single_grads = oracle(make_cfg, common)
    for layer0 in ("cached", "cached_undropped", "precomputed"):
        path, record = run_ok(make_cfg("method=full_halo", f"method.layer0={layer0}", "workers=3", *common,
                                       "probe_grads=true"))
        assert_matches(record, path, single, single_grads, layer0)
        by_layer = {key for r in record["summary"]["per_rank"] for key in r["comm_bytes_by_layer"]}
        assert "halo_inputs/0" in by_layer and "halo_fwd/0" not in by_layer  # layer 0's inputs cross once
        assert record["control"] is None
