from tests.methods.exactness import DATASETS, assert_matches, oracle, run_ok


def test_every_neighbour_and_one_batch_is_single(make_cfg):
    common = [*DATASETS["synthetic"], "model=sage", "epochs=2"]
    single, single_grads = oracle(make_cfg, common)
    path, record = run_ok(make_cfg("method=layerwise_sampling", "method.layer_size=-1", "method.batch_size=100000",
                                   "workers=2", *common, "probe_grads=true"))
    assert_matches(record, path, single, single_grads, "2 workers")


def test_a_layer_keeps_only_the_drawn_nodes_edges_on_cora(make_cfg):
    def run(layer_size):
        _, record = run_ok(make_cfg("method=layerwise_sampling", f"method.layer_size={layer_size}",
                                    "method.batch_size=32", "workers=2", "dataset=cora", "model=gcn", "epochs=2"))
        return record

    sampled, every = run(16), run(-1)
    assert sampled["control"] == every["control"] == "single"
    edges = [sum(r["sampled_edges"] for r in rec["summary"]["per_rank"]) for rec in (sampled, every)]
    assert 0 < edges[0] < edges[1]
    moved = {c for c, b in sampled["comm"]["bytes_per_epoch_by_category"].items() if b}
    assert "grad_allreduce" in moved and len(moved) > 1     # the partitioned store fetches other parts' rows
