"""Every modelled method's analytic traffic (its plugin's `Method.Cost.traffic` hook, through
`analysis.costmodel.traffic`) equals what its runs count: bytes, calls and point-to-point messages
per epoch and category, summed over ranks. The methods are the registry's: every plugin that states
its traffic and runs on several ranks."""
from __future__ import annotations

import pytest

from analysis import costmodel, projection
from benchmarks.run.method import method_class
from benchmarks.base.registry import plugin_names
from benchmarks.base.traffic import Rank
from tests.methods.exactness import DATASETS, run_ok

#: Models a plugin is checked on (sage unless named: GAT's softmax changes SAR's rounds, CAGNET's
#: backward and tensor parallelism's transfers; BNS-GCN's sampled rows are checked at GAT's width)
#: and run options that keep the runs short (a sync every step) or make the counts predictable (no
#: skipped blocks). A method whose traffic repeats over
#: several epochs runs for that period (`period`), so a new periodic plugin needs no entry here.
MODELS = {"sar": ("sage", "gat"), "bns_gcn": ("gat",), "cagnet": ("sage", "gat"), "tensor_parallel": ("sage", "gat")}
EXTRA = {"digest": ["method.sync_every=1"], "sancus": ["method.max_staleness=0"]}
#: Methods whose sampled traffic the model states as an expectation over the draws (docs/projection.md,
#: "The sampled families"): their categories must match, their gradient all-reduce to the count, and
#: the sampled categories' bytes within a factor of 3 (a run counts one draw).
EXPECTED = {"neighbor_sampling"}


def period(method: str, cfg: dict) -> int:
    """Epochs after which the method's modelled traffic repeats: its plugin states periodic traffic
    as a fraction of a call per epoch (DIGEST's 1 / sync_every), so a run of that many epochs (from
    epoch 0) counts the same average."""
    model = projection.build_model(cfg["model"]["name"], 8, cfg["hidden"], 3, cfg["layers"])
    transfers = costmodel.traffic(method, cfg["method"], model, Rank(nodes=100, edges=1000, halo=10, peers=2))
    return max([round(1 / t.calls) for t in transfers if 0 < t.calls < 1] or [1])
METHODS = [(name, model, EXTRA.get(name, [])) for name in sorted(plugin_names())
           if method_class(name).Cost.states_traffic() and not method_class(name).single_process
           for model in MODELS.get(name, ("sage",))]


@pytest.mark.parametrize("method,model,extra", METHODS, ids=[f"{m}-{g}" for m, g, _ in METHODS])
def test_analytic_traffic_equals_the_counted_traffic(make_cfg, method, model, extra):
    """Per epoch and category, summed over ranks. On the randomly partitioned graph every pair of
    parts shares halo nodes, so every rank has P - 1 peers. BNS-GCN keeps floor(p |B_ij|) rows of
    each pair, the model p |B_ij|: within 1 %."""
    cfg = make_cfg(f"method={method}", "workers=3", *DATASETS["synthetic"], f"model={model}", *extra)
    cfg["epochs"] = max(2, period(method, cfg))
    _, record = run_ok(cfg)
    epochs = len(record["history"])
    counted = {}
    for r in record["summary"]["per_rank"]:
        for i, field in enumerate(("comm_bytes_by_category", "comm_calls_by_category", "comm_messages_by_category")):
            for category, n in r[field].items():
                if category not in ("setup", "eval", "probe", "halo_inputs"):  # not per-epoch training traffic
                    counted.setdefault(category, [0.0, 0.0, 0.0])[i] += n / epochs
    for r, edges in zip(record["summary"]["per_rank"], record["partition"]["edges_per_rank"]):
        assert r["peers"] == record["workers"] - 1  # the model's input, counted by the runtime
        assert [w["edges"] for w in r["work_per_layer"]] == [edges] * cfg["layers"]
    g = record["graph"]
    model_ = projection.build_model(model, g["features"], cfg["hidden"], g["classes"], cfg["layers"])
    analytic = {}
    degrees = projection.graph_degrees(record["graph"], None, record["partition"], record["workers"])
    for rank in projection.ranks_of(record["partition"], record["workers"], graph=degrees):
        for t in costmodel.traffic(method, record["config"]["method"], model_, rank):
            a = analytic.setdefault(t.category, [0.0, 0.0, 0.0])
            a[0], a[1], a[2] = a[0] + t.bytes, a[1] + t.calls, a[2] + t.messages
    hook = f"method {method}: its Cost.traffic"
    assert counted.keys() == analytic.keys(), (
        f"{hook} states categories {sorted(analytic)}, its run counts {sorted(counted)}: state every category "
        "the run moves per epoch, and no other")
    for category, (nbytes, calls, messages) in counted.items():
        if method in EXPECTED and category != "grad_allreduce":
            assert nbytes / 3 <= analytic[category][0] <= 3 * nbytes, (
                f"{hook} states {analytic[category][0]:g} bytes of {category} per epoch, the run counts {nbytes:g}")
            continue
        assert analytic[category][1:] == [calls, messages], (
            f"{hook} states {analytic[category][1:]} (calls, messages) of {category} per epoch, the run counts "
            f"{[calls, messages]}; if they depend on its draws, add it to EXPECTED")
        assert analytic[category][0] == pytest.approx(nbytes, rel=0.01 if method == "bns_gcn" else 1e-9), (
            f"{hook} states {analytic[category][0]:g} bytes of {category} per epoch, the run counts {nbytes:g}")
