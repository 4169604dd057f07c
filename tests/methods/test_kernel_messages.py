"""`kernel=messages` (per-edge messages, PyG's default path; a weaker baseline than the papers'
DGL vanilla, which fuses its builtins: docs/sar.md) against the single-process oracle run with the
default CSR kernel: same losses,
epoch-0 gradients and evaluation for GCN, SAGE and GAT under `full_halo` (3 workers) and under `sar`
(its fused GAT kernel dispatches on the kernel too), and the same analytic halo volume."""
from __future__ import annotations

import pytest

from tests.methods.exactness import AT_DROPOUT, DATASETS, analytic_bytes, assert_comm, assert_matches, oracle, run_ok


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_messages_kernel_matches_the_spmm_oracle(make_cfg, model):
    common = [*DATASETS["synthetic"], f"model={model}", "layers=2", AT_DROPOUT]
    single, single_grads = oracle(make_cfg, common)  # kernel=spmm (the default)
    methods = [("full_halo", False), ("sar", True)] if model == "gat" else [("full_halo", False)]
    for method, refetch in methods:
        label = f"{method} kernel=messages"
        cfg = make_cfg(f"method={method}", "kernel=messages", "workers=3", *common, "probe_grads=true")
        path, record = run_ok(cfg)
        assert record["config"]["kernel"] == "messages"
        assert_matches(record, path, single, single_grads, label)
        assert_comm(record, cfg, analytic_bytes(record, cfg, refetch_attention=refetch), label)
