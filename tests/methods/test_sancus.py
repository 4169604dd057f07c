"""Sancus held to its definition: threshold 0 (and max_staleness 0) is exact against the
single-process oracle; every skipped block sends no bytes, every rank logs the same decisions for
each pair, and no cached block is used more than max_staleness epochs; with lr=0 everything after
the first send is skipped except the sends max_staleness forces."""
from __future__ import annotations

import pytest

from benchmarks.base.errors import UserError
from benchmarks.core.models import build_model
from benchmarks.run.runner import run
from tests.conftest import SMALL_SYNTHETIC
from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok

# Worker counts per (model, dataset): every count 1-3 appears for every model.
WORKERS = {"gcn": {"citeseer": (1, 3), "synthetic": (2, 3)},  # 3: several peers, a skip flag per peer
           "sage": {"citeseer": (2, 3), "synthetic": (1, 3)},
           "gat": {"citeseer": (1, 3), "synthetic": (2, 3)}}


def exchanges(record, cfg):
    g = record["graph"]
    return build_model(cfg["model"]["name"], g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0,
                       cfg["seed"], heads=cfg["model"].get("heads", 4)).exchanges()


def bits(mask: int) -> set[int]:
    return {q for q in range(mask.bit_length()) if mask >> q & 1}


def check_definition(record, cfg) -> dict:
    """Bytes from the skip logs (per epoch and per layer), the same decisions at both ends of every
    pair, staleness within max_staleness. Returns {(direction, layer): skipped sends, all ranks}."""
    if record["workers"] == 1:  # no halo: nothing to exchange, nothing logged
        assert record["summary"]["comm_bytes_per_epoch"] == 0
        return {}
    max_staleness, epochs = cfg["method"]["max_staleness"], cfg["epochs"]
    per_rank = record["summary"]["per_rank"]
    widths = [width for width, _ in exchanges(record, cfg)]
    per_epoch = [0] * epochs
    skipped = {}
    for rank, probes in enumerate(per_rank):
        by_layer = probes["comm_bytes_by_layer"]
        flag_bytes = {}  # layer -> one byte per flag, both directions
        for key, p in probes["sancus"].items():
            direction, layer = key.split("/")
            width = widths[int(layer)]
            peers = [q for q, rows in enumerate(p["block_rows"]) if rows and q != rank]
            assert len(p["skipped_to"]) == len(p["skipped_by"]) == epochs
            run_length = {q: 0 for q in peers}
            halo = flags = oldest = 0
            for epoch, mask in enumerate(p["skipped_to"]):
                assert bits(mask) <= set(peers), key
                for q in peers:  # both ends of the pair saw the same decision
                    assert (rank in bits(per_rank[q]["sancus"][key]["skipped_by"][epoch])) == (q in bits(mask)), key
                eligible = [q for q in peers if epoch > 0 and run_length[q] < max_staleness]
                assert bits(mask) <= set(eligible), key  # only pairs that may skip did
                sent = sum(p["block_rows"][q] for q in peers if q not in bits(mask)) * width * 4
                halo, flags = halo + sent, flags + len(eligible)
                per_epoch[epoch] += sent + len(eligible)
                for q in peers:
                    run_length[q] = run_length[q] + 1 if q in bits(mask) else 0
                    oldest = max(oldest, run_length[q])
            assert p["max_staleness_used"] == oldest <= max_staleness, key
            flag_bytes[layer] = flag_bytes.get(layer, 0) + flags
            assert by_layer.get(f"halo_{direction}/{layer}", 0) == halo, f"rank {rank}, {key}"
            assert p["sends"] == epochs * len(peers)
            skipped[(direction, int(layer))] = skipped.get((direction, int(layer)), 0) + p["skipped"]
        for layer, n in flag_bytes.items():
            assert by_layer.get(f"skip_flags/{layer}", 0) == n, f"rank {rank}, layer {layer}"
    got = record["comm"]["bytes_by_category"]
    inputs = sum(record["partition"]["halo_nodes_per_rank"]) * record["graph"]["features"] * 4
    assert got.get("halo_inputs", 0) == inputs  # once, at the first step
    per_epoch[0] += inputs
    grads = got["grad_allreduce"] // epochs
    assert set(got) - {"setup", "eval", "probe"} <= {"halo_inputs", "halo_fwd", "halo_bwd", "skip_flags",
                                                     "grad_allreduce"}  # nothing else moved
    assert [h["comm_bytes"] for h in record["history"]] == [b + grads for b in per_epoch]
    return skipped


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_threshold_zero_is_exact(make_cfg, data_root, model):
    for dataset, worker_counts in WORKERS[model].items():
        common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}", "layers=3"]
        single, single_grads = oracle(make_cfg, common)
        for workers in worker_counts:
            # The largest count runs max_staleness=0 with a threshold that would skip everything:
            # never skipping is full_halo, whatever the threshold (no flags either).
            never = workers == max(worker_counts)
            options = ["method.max_staleness=0", "method.threshold=1e9"] if never else ["method.threshold=0"]
            cfg = make_cfg("method=sancus", *options, f"workers={workers}", *common, "probe_grads=true")
            path, record = run_ok(cfg)
            label = f"{dataset}, {workers} workers, {options}"
            assert_matches(record, path, single, single_grads, label)
            check_definition(record, cfg)
            if never:
                assert "skip_flags" not in record["comm"]["bytes_by_category"], label


def test_lr_zero_skips_all_but_the_forced_sends(make_cfg):
    """Nothing changes, so every block that may skip does: each pair sends at epochs 0, 3, 6."""
    cfg = make_cfg("method=sancus", "method.threshold=0", "method.max_staleness=2", "lr=0", "epochs=7",
                   "workers=3", "model=gcn", "partitioner=random", *SMALL_SYNTHETIC)
    path, record = run_ok(cfg)
    skipped = check_definition(record, cfg)
    for probes in record["summary"]["per_rank"]:
        for key, p in probes["sancus"].items():
            peers = {q for q, rows in enumerate(p["block_rows"]) if rows and q != probes["rank"]}
            assert [bits(m) for m in p["skipped_to"]] == [set(), peers, peers, set(), peers, peers, set()], key
            assert p["max_staleness_used"] == 2
    assert skipped and all(n > 0 for n in skipped.values())
    history = record["history"]
    assert len({h["train_loss"] for h in history}) == 1  # logits unchanged
    assert len({(h["train_acc"], h["val_acc"], h["test_acc"]) for h in history}) == 1


def test_threshold_skips_send_nothing(make_cfg):
    """A real threshold while training: skipped blocks cost nothing, the logs agree across ranks, no
    cached block outlives max_staleness; GAT's exchanged rows are its projected z."""
    cfg = make_cfg("method=sancus", "method.threshold=0.3", "method.max_staleness=2", "epochs=5", "workers=3",
                   "model=gat", "partitioner=random", *SMALL_SYNTHETIC)
    _, record = run_ok(cfg)
    skipped = check_definition(record, cfg)
    assert sum(skipped.values()) > 0


@pytest.mark.parametrize("override, message", [
    ("method.threshold=-0.1", "method.threshold=-0.1 must be a number >= 0"),
    ("method.max_staleness=-1", "method.max_staleness=-1 must be a non-negative integer"),
    ("method.max_staleness=1.5", "method.max_staleness=1.5 must be a non-negative integer"),
    ("method.skip_grads=maybe", "method.skip_grads='maybe' must be true or false"),
])
def test_bad_options_are_one_line_errors(make_cfg, override, message):
    with pytest.raises(UserError, match=message) as error:
        run(make_cfg("method=sancus", override, *SMALL_SYNTHETIC))
    assert "\n" not in str(error.value)
