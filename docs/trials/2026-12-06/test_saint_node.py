from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok


def test_a_budget_that_keeps_every_node_is_single_on_one_worker(make_cfg):
    # p_v = 1 for every node: one step on the whole (one-part) graph, every scale 1, loss weight 1 / train nodes
    common = [*DATASETS["synthetic"], "model=sage", "epochs=2"]
    single, single_grads = oracle(make_cfg, common)
    path, record = run_ok(make_cfg("method=saint_node", "method.budget=100000000", "workers=1", *common,
                                   "probe_grads=true"))
    assert_matches(record, path, single, single_grads, "1 worker")


def test_only_gradients_cross_ranks_on_cora(make_cfg):
    _, record = run_ok(make_cfg("method=saint_node", "method.budget=300", "workers=2", "epochs=2", "dataset=cora",
                                "model=gcn"))
    assert record["control"] == "single"
    moved = {c for c, b in record["comm"]["bytes_per_epoch_by_category"].items() if b}
    assert moved == {"grad_allreduce"}
    assert all(h["train_loss"] > 0 for h in record["history"])
