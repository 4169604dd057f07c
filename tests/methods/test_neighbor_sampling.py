"""Neighbour sampling held to its definition: the sampler draws uniformly without replacement from
real neighbours only, both graph stores give the same blocks in distribution, and with every
neighbour and every training node in one batch it is exactly full-graph training."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from benchmarks.base.errors import UserError
from benchmarks.run.runner import run
from benchmarks.core.sampling import NodeDraws, in_id_order, block_columns, keyed_order, sample_neighbors
from tests.conftest import SMALL_SYNTHETIC
from tests.methods.exactness import DATASETS, assert_matches, oracle, param_bytes, run_ok


def star_csr(degrees: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSR whose node i has in-neighbours 1000*i + 0..deg_i-1 (ids tell owner and position)."""
    indptr = torch.tensor([0, *itertools.accumulate(degrees)])
    indices = torch.cat([1000 * i + torch.arange(d) for i, d in enumerate(degrees)])
    return indptr, indices


# Degrees covering the sampler's three regimes for fan-out 5: all (<= 5), top-k keys (6..10),
# redraw duplicates (> 10).
DEGREES = [1, 5, 6, 9, 10, 11, 40, 300]
# Training's keyed draws (a node's values from (key, its id)) and a generator's stream (tools, tests).
DRAWS = ("keyed", "stream")


def trial_draws(kind: str, seed: int, nodes: torch.Tensor):
    """(draws, ids) for sampling `nodes` as independent trials: keyed draws need a distinct id per trial."""
    if kind == "keyed":
        return NodeDraws(seed), torch.arange(nodes.numel())
    return torch.Generator().manual_seed(seed), None


@pytest.mark.parametrize("kind", DRAWS)
def test_sampler_respects_fanout_draws_without_replacement_and_only_neighbours(kind):
    indptr, indices = star_csr(DEGREES)
    nodes = torch.arange(len(DEGREES)).repeat(50)
    for fanout in (1, 5, -1):
        counts, positions = sample_neighbors(indptr, indices, nodes, fanout, *trial_draws(kind, 0, nodes))
        deg = torch.tensor(DEGREES)[nodes]
        assert torch.equal(counts, deg if fanout < 0 else deg.clamp(max=fanout))
        drawn = indices[positions].split(counts.tolist())
        for node, got in zip(nodes.tolist(), drawn):
            assert got.unique().numel() == got.numel()  # without replacement
            assert ((got // 1000 == node) & (got % 1000 < DEGREES[node])).all()  # real in-neighbours of `node`


@pytest.mark.parametrize("kind", DRAWS)
@pytest.mark.parametrize("degree", [7, 40])  # both sampling regimes for fan-out 5
def test_sampler_frequencies_are_uniform(degree, kind):
    """Each neighbour is drawn with probability k/d: chi-square over the d neighbours, and for a small
    case every k-subset equally likely."""
    k, trials = 5, 20000
    indptr, indices = star_csr([degree])
    nodes = torch.zeros(trials, dtype=torch.int64)
    counts, positions = sample_neighbors(indptr, indices, nodes, k, *trial_draws(kind, 1, nodes))
    freq = torch.bincount(indices[positions], minlength=degree).double()
    expected = trials * k / degree
    chi2 = (((freq - expected) ** 2) / expected).sum().item()
    # chi-square with d-1 degrees of freedom: mean d-1, sd sqrt(2(d-1)); 5 sd is far in the tail.
    assert chi2 < degree - 1 + 5 * math.sqrt(2 * (degree - 1)), chi2


@pytest.mark.parametrize("kind", DRAWS)
def test_sampler_draws_every_subset_equally_often(kind):
    k, degree, trials = 2, 5, 30000  # 10 subsets; regime k < d <= 2k is top-k, d > 2k redraws
    for d in (4, degree):
        indptr, indices = star_csr([d])
        nodes = torch.zeros(trials, dtype=torch.int64)
        _, positions = sample_neighbors(indptr, indices, nodes, k, *trial_draws(kind, 2, nodes))
        pairs = indices[positions].view(trials, k).sort(1).values
        subsets = torch.unique(pairs, dim=0, return_counts=True)[1].double()
        n = math.comb(d, k)
        assert subsets.numel() == n
        expected = trials / n
        chi2 = (((subsets - expected) ** 2) / expected).sum().item()
        assert chi2 < n - 1 + 5 * math.sqrt(2 * (n - 1)), (d, chi2)


def test_keyed_sample_is_a_function_of_the_node_whatever_its_numbering():
    """The same graph numbered two ways (as two partitions number it): with rows in dataset-id order
    (`in_id_order`) and draws keyed by dataset id, every node draws the same in-neighbours (by dataset
    id), asked for in any order, alone or among others; another key draws another sample."""
    g = torch.Generator().manual_seed(3)
    n = 300
    deg = torch.randint(1, 40, (n,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(deg, 0)])
    indices = torch.cat([torch.randperm(n, generator=g)[:int(d)] for d in deg])  # distinct sources per row
    perm = torch.randperm(n, generator=g)  # new id -> dataset id
    new_of_old = torch.argsort(perm)
    # the renumbered CSR: row i is old row perm[i], its sources renumbered (and so reordered)
    rows = [new_of_old[indices[indptr[o]:indptr[o + 1]]].sort().values for o in perm.tolist()]
    indptr2 = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(deg[perm], 0)])
    indices2 = torch.cat(rows)
    assert not torch.equal(in_id_order(indptr2, indices2, perm), indices2)

    def sampled(ip, ix, ids_of, nodes, key, fanout=5):
        ix = in_id_order(ip, ix, ids_of)
        counts, positions = sample_neighbors(ip, ix, nodes, fanout, NodeDraws(key), ids_of[nodes])
        return {int(ids_of[v]): sorted(ids_of[ix[p]].tolist()) for v, p in zip(nodes, positions.split(counts.tolist()))}

    every = sampled(indptr, indices, torch.arange(n), torch.arange(n), key=7)
    some = torch.randperm(n, generator=g)[:50]
    assert sampled(indptr2, indices2, perm, some, key=7) == {v: every[v] for v in perm[some].tolist()}
    assert sampled(indptr, indices, torch.arange(n), torch.arange(n), key=8) != every


def test_keyed_order_restricted_to_a_subset_is_the_subset_in_the_global_order():
    ids = torch.randperm(1000, generator=torch.Generator().manual_seed(4))
    whole = ids[keyed_order(ids, 11)]
    part = ids[::3]
    in_whole = whole[torch.isin(whole, part)]
    assert torch.equal(part[keyed_order(part, 11)], in_whole)
    assert not torch.equal(whole, ids[keyed_order(ids, 12)])


def test_relabel_puts_destinations_first():
    dst = torch.tensor([7, 3, 9])
    neighbors = torch.tensor([3, 12, 7, 5, 12, 9])
    columns, sources = block_columns(dst, neighbors)
    assert sources[:3].tolist() == [7, 3, 9]
    assert sorted(sources[3:].tolist()) == [5, 12] and sources.unique().numel() == sources.numel()
    assert torch.equal(sources[columns], neighbors)


# A neighbour-sampling run that, before training, samples the same seed set through both stores (real
# process group, ranks asking each other), with every neighbour and with fan-outs under 20 keys.
STORES_PLUGIN = """
import torch
from methods import neighbor_sampling as ns
from benchmarks.core.sampling import NodeDraws


class Method(ns.Method):
    def __init__(self, ctx):
        super().__init__(ctx)
        stores = {kind: ctx.graph_store(kind) for kind in ("replicated", "partitioned")}
        seeds = self.lo + torch.arange(0, ctx.part.num_local, 5)
        self.identical, inputs = [], set()
        for fanouts, key in [([-1] * len(self.fanouts), 0)] + [(self.fanouts, k) for k in range(20)]:
            (rb, ri, _), (pb, pi, _) = (ns.sample_blocks(s, seeds, fanouts, NodeDraws(key)) for s in stores.values())
            self.identical.append(
                torch.equal(ri, pi)
                and torch.equal(stores["replicated"].features(ri, 0), stores["partitioned"].features(pi, 0))
                and torch.equal(stores["replicated"].dataset_ids(ri), stores["partitioned"].dataset_ids(pi))
                and all(torch.equal(a.indptr, b.indptr) and torch.equal(a.src, b.src)
                        and torch.equal(a.col_deg, b.col_deg) for a, b in zip(rb, pb)))
            inputs.add(tuple(ri.tolist()))
        self.samples = len(inputs)

    def probes(self):
        return {**super().probes(), "identical": self.identical, "samples": self.samples}
"""


@pytest.fixture
def stores_plugin(write_plugins):
    write_plugins({"ns_stores": STORES_PLUGIN})


def test_partitioned_and_replicated_stores_draw_the_same_blocks(make_cfg, stores_plugin):
    """Both stores keep rows in dataset-id order and key draws by dataset id: under the same key they
    draw identical blocks (with every neighbour, and with fan-outs), and another key another sample."""
    cfg = make_cfg("method=neighbor_sampling", "layers=2", "method.fanouts=[4,2]", "workers=3", "epochs=1",
                   *DATASETS["synthetic"])
    cfg["method"]["name"] = "ns_stores"
    _, record = run_ok(cfg)
    for rank in record["summary"]["per_rank"]:
        assert all(rank["identical"]) and len(rank["identical"]) == 21
        assert rank["samples"] == 21  # every key: another sample (and the full one)


@pytest.mark.parametrize("dataset,models,workers,store", [
    ("citeseer", ["gcn", "sage", "gat"], 1, "replicated"),
    ("synthetic", ["sage", "gat"], 3, "partitioned"),
    ("synthetic", ["gcn"], 3, "replicated"),
])
def test_every_neighbour_and_every_training_node_is_single(make_cfg, data_root, dataset, models, workers, store):
    for model in models:
        common = [*DATASETS[dataset], f"model={model}", f"data_root={data_root}"]
        single, single_grads = oracle(make_cfg, common)
        path, record = run_ok(make_cfg("method=neighbor_sampling", "method.fanouts=[-1,-1,-1]",
                                       "method.batch_size=100000", f"method.store={store}", f"workers={workers}",
                                       *common, "probe_grads=true"))
        assert_matches(record, path, single, single_grads, f"{dataset} {model} {workers} workers {store}")


def test_traffic_steps_and_phases(make_cfg):
    """Partitioned: sampling and feature traffic counted; replicated: only the gradients move. Every
    rank takes the same number of steps (ranks hold different numbers of training nodes)."""
    common = ["method=neighbor_sampling", "method.fanouts=[5,5,5]", "method.batch_size=64", "workers=3",
              "epochs=2", *DATASETS["synthetic"]]
    for store in ("partitioned", "replicated"):
        _, record = run_ok(make_cfg(*common, f"method.store={store}"))
        moved = {c for c, b in record["comm"]["bytes_by_category"].items() if b and c not in ("setup", "eval", "probe")}
        want = {"grad_allreduce"} | ({"sample_request", "sample_response", "feature_request", "feature_fetch"}
                                     if store == "partitioned" else set())
        assert moved == want, store
        ranks = record["summary"]["per_rank"]
        train = record["graph"]["train_nodes"]
        assert len({r["steps"] for r in ranks}) == 1 and ranks[0]["steps"] >= 2 * math.ceil(train / 3 / 64)
        for r in ranks:
            assert set(r["phase_time_s"]) == {"sampling", "feature_fetch", "compute", "communication"}
            assert r["sampled_edges"] > 0


def test_ranks_with_empty_batches_keep_step(make_cfg):
    """A rank with fewer training nodes than steps gets empty batches; it still takes every step
    (every collective), for GAT too."""
    _, record = run_ok(make_cfg("method=neighbor_sampling", "model=gat", "layers=2", "method.fanouts=[2]",
                                "method.batch_size=1", "method.store=replicated", "workers=3", "epochs=1",
                                *DATASETS["synthetic"]))
    train = record["partition"]["train_nodes_per_rank"]
    assert min(train) < max(train)  # so the smaller ranks' batches include empty ones
    assert [r["steps"] for r in record["summary"]["per_rank"]] == [max(train)] * 3


def test_shared_pages_count_once_in_pss(make_cfg):
    """Two ranks map the replicated store's graph (and share the forkserver's pages): each rank's
    peak PSS, its share of what it maps, is at most its peak RSS; the summary keeps the largest rank
    and the sum over ranks (one machine's total)."""
    _, record = run_ok(make_cfg("method=neighbor_sampling", "method.store=replicated", "workers=2", "epochs=2",
                                *DATASETS["synthetic"]))
    ranks, summary = record["summary"]["per_rank"], record["summary"]
    pss = [r["peak_pss_bytes"] for r in ranks]
    if None in pss:
        pytest.skip("no /proc/self/smaps_rollup on this platform")
    assert all(0 < r["peak_pss_bytes"] <= r["peak_rss_bytes"] for r in ranks)
    assert (summary["peak_pss_bytes_max"], summary["peak_pss_bytes_sum"]) == (max(pss), sum(pss))


def test_ggs_averages_parameters_instead_of_gradients(make_cfg):
    """GGS (neighbour sampling with `avg_every`): no gradient all-reduce; parameters averaged every
    `avg_every` steps, P x parameters x 4 bytes a round; one fan-out serves every layer."""
    cfg = make_cfg("method=ggs", "method.local_steps=null", "method.fanouts=[4]", "method.batch_size=64",
                   "method.avg_every=2", "workers=3", "epochs=2", *DATASETS["synthetic"])
    _, record = run_ok(cfg)
    moved = {c: b for c, b in record["comm"]["bytes_by_category"].items() if b and c not in ("setup", "eval", "probe")}
    assert set(moved) == {"param_avg", "sample_request", "sample_response", "feature_request", "feature_fetch"}
    steps = record["summary"]["per_rank"][0]["steps"]
    assert steps >= 4
    params = param_bytes(record, cfg)
    assert moved["param_avg"] == (steps // 2) * 3 * params
    assert record["summary"]["best_val_acc"] > 0.3  # it trains (5 classes)


@pytest.mark.parametrize("overrides,message", [
    (["method.fanouts=[10,10]"], "has 2 entries but layers=3"),
    (["method.avg_every=0"], "method.avg_every=0 must be a positive integer"),
    (["method.fanouts=[10,0,5]"], "must be a list of positive integers"),
    (["method.batch_size=0"], "method.batch_size=0 must be a positive integer"),
    (["method.store=shared"], "unknown method.store 'shared'; choose one of: partitioned, replicated"),
    # the feature cache's (tests/methods/test_feature_cache.py)
    (["method.feature_cache=0.1", "method.store=replicated"], "method.store=replicated reads every row locally"),
    (["method.feature_cache=1.5"], "method.feature_cache=1.5"),
    (["method.cache_policy=lru"], "unknown method.cache_policy 'lru'; choose one of: degree, presample"),
    (["method.cache_presample_epochs=0"], "method.cache_presample_epochs=0 must be a positive integer"),
])
def test_bad_options_are_one_line_errors(make_cfg, overrides, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        run(make_cfg("method=neighbor_sampling", *overrides, *SMALL_SYNTHETIC))
