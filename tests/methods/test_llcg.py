"""PSGD-PA, LLCG and GGS in LLCG's regime: rounds of K neighbour-sampled local steps on each
worker's own part, averaged once a round; LLCG's server correction on mini-batches sampled from
the whole graph. Exact byte counts on real gloo ranks."""
from __future__ import annotations

import pytest

from tests.methods.exactness import DATASETS, param_bytes, run_ok

NOT_TRAINING = ("setup", "eval", "probe")


def training(record, per_rank=None) -> dict[str, int]:
    by = record["comm"]["bytes_by_category"] if per_rank is None else \
        record["summary"]["per_rank"][per_rank]["comm_bytes_by_category"]
    return {c: b for c, b in by.items() if b and c not in NOT_TRAINING}


@pytest.mark.parametrize("workers", [2, 3])
def test_psgd_pa_takes_k_sampled_local_steps_and_averages_once_a_round(make_cfg, workers):
    """K sampled steps from the own part in memory move nothing; each round one averaging of
    P x parameters x 4 bytes. The steps follow LLCG's growth schedule (K=8, rho=2: 2, 4, 8)."""
    cfg = make_cfg("method=psgd_pa", "method.local_steps=8", "method.local_steps_rho=2", "method.batch_size=32",
                   "method.fanouts=[5]", f"workers={workers}", "epochs=3", *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    assert training(record) == {"param_avg": 3 * workers * param_bytes(record, cfg)}
    for rank in record["summary"]["per_rank"]:
        assert rank["steps"] == 2 + 4 + 8 and rank["sampled_edges"] > 0


def test_avg_every_counts_rounds(make_cfg):
    cfg = make_cfg("method=psgd_pa", "method.local_steps=4", "method.avg_every=2", "workers=3", "epochs=4",
                   *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    assert training(record) == {"param_avg": 2 * 3 * param_bytes(record, cfg)}
    assert [r["steps"] for r in record["summary"]["per_rank"]] == [16] * 3


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_sampling_every_neighbour_of_every_training_node_is_the_full_partition_step(make_cfg, model):
    """A batch of every training node with every neighbour of the part's own subgraph (own
    degrees) is the full-partition step: the same losses, K steps a round."""
    common = ["method=psgd_pa", "method.local_steps=3", f"model={model}", "workers=2", "epochs=3",
              *DATASETS["synthetic"]]
    _, full = run_ok(make_cfg(*common, "method.local=full"))
    _, sampled = run_ok(make_cfg(*common, "method.fanouts=[-1]", "method.batch_size=100000"))
    assert [h["train_loss"] for h in sampled["history"]] == pytest.approx([h["train_loss"] for h in full["history"]],
                                                                          rel=1e-5)


def test_llcg_corrects_on_the_server_with_sampled_whole_graph_batches(make_cfg):
    """LLCG = PSGD-PA + the server's correction: with no correction step the same losses; with
    steps, rank 0 (the server, reading the whole graph from the replicated store) broadcasts the
    corrected model once a round (`correction`: parameters x 4 bytes, counted at rank 0), and
    nothing else moves."""
    common = ["method.local_steps=4", "method.batch_size=32", "method.avg_every=2", "workers=3", "epochs=4",
              *DATASETS["synthetic"]]
    _, psgd = run_ok(make_cfg("method=psgd_pa", *common))
    _, none = run_ok(make_cfg("method=llcg", "method.correction_steps=0", *common))
    assert [h["train_loss"] for h in none["history"]] == [h["train_loss"] for h in psgd["history"]]
    assert training(none) == training(psgd)
    cfg = make_cfg("method=llcg", "method.correction_steps=3", "method.server_lr=0.05",
                   "method.server_batch_size=64", *common)
    _, llcg = run_ok(cfg)
    params, rounds = param_bytes(llcg, cfg), 2
    assert training(llcg) == {"param_avg": rounds * 3 * params, "correction": rounds * params}
    assert training(llcg, per_rank=0)["correction"] == rounds * params
    assert all("correction" not in training(llcg, per_rank=r) for r in (1, 2))
    assert [h["train_loss"] for h in llcg["history"]][2:] != [h["train_loss"] for h in psgd["history"]][2:]


def test_ggs_takes_rounds_of_k_steps_averaged_once_a_round(make_cfg):
    cfg = make_cfg("method=ggs", "method.local_steps=4", "method.fanouts=[4]", "method.batch_size=32", "workers=3",
                   "epochs=2", *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    moved = training(record)
    assert set(moved) == {"param_avg", "sample_request", "sample_response", "feature_request", "feature_fetch"}
    assert moved["param_avg"] == 2 * 3 * param_bytes(record, cfg)
    assert [r["steps"] for r in record["summary"]["per_rank"]] == [8] * 3
