"""The latency terms in every record (`comm_calls_by_category`, `comm_messages_by_category`): the
operations a rank entered and the point-to-point messages it sent equal the analytic numbers of the
method's exchange pattern. On the randomly partitioned synthetic graph every pair of parts shares
halo nodes, so every peer gets a message."""
from __future__ import annotations

import pytest

from benchmarks.core.models import build_model
from tests.methods.exactness import DATASETS, run_ok


def per_epoch(record: dict, field: str) -> list[dict]:
    epochs = len(record["history"])
    return [{c: n / epochs for c, n in r[field].items() if c not in ("setup", "eval", "probe")}
            for r in record["summary"]["per_rank"]]


@pytest.mark.parametrize("method", ["full_halo", "sar"])
def test_calls_and_messages_follow_the_exchange_pattern(make_cfg, method):
    cfg = make_cfg(f"method={method}", "workers=3", *DATASETS["synthetic"], "model=sage", "epochs=2")
    _, record = run_ok(cfg)
    g, peers = record["graph"], record["workers"] - 1
    model = build_model("sage", g["features"], cfg["hidden"], g["classes"], cfg["layers"], 0.0, 0)
    layers = len(model.exchanges())
    with_grad = sum(1 for _, grad in model.exchanges() if grad)
    if method == "full_halo":  # one all-to-all per layer, to every peer; its reverse in backward
        calls = {"halo_fwd": layers, "halo_bwd": with_grad, "grad_allreduce": 1}
    else:  # SAR: P - 1 ring rounds per layer, one peer each; gradients returned round by round
        calls = {"halo_fwd": layers * peers, "halo_bwd": with_grad * peers, "grad_allreduce": 1}
    messages = {"halo_fwd": layers * peers, "halo_bwd": with_grad * peers, "grad_allreduce": 0}
    for got_calls, got_messages in zip(per_epoch(record, "comm_calls_by_category"),
                                       per_epoch(record, "comm_messages_by_category")):
        assert got_calls == calls and got_messages == messages
