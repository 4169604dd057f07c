import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.core.datasets import DATA, load_dataset, resolve_data_root, synthetic
from benchmarks.base.errors import UserError

pytestmark = pytest.mark.fast

SYNTH = dict(nodes=3000, avg_degree=10, classes=4, features=16, homophily=0.8, feature_noise=3.0,
             degree_skew=1.0, train_frac=0.3, val_frac=0.2, test_frac=0.5, seed=7)


def test_synthetic_is_deterministic_from_its_seed_and_follows_its_parameters():
    a, b = synthetic(**SYNTH), synthetic(**SYNTH)
    assert a.fingerprint() == b.fingerprint()
    assert synthetic(**{**SYNTH, "seed": 8}).fingerprint() != a.fingerprint()
    assert a.num_nodes == 3000 and a.num_features == 16 and a.num_classes == 4
    # avg_degree counts undirected edges twice; duplicates are removed, self-loops added.
    non_loop = a.num_edges - a.num_nodes
    assert 0.9 * 3000 * 10 <= non_loop <= 3000 * 10
    src, dst = a.edge_index()
    off = src != dst
    homophily = (a.y[src[off]] == a.y[dst[off]]).float().mean().item()
    assert abs(homophily - 0.8) < 0.03
    masks = torch.stack([a.train_mask, a.val_mask, a.test_mask]).long()
    assert masks.sum(0).max() == 1  # disjoint splits
    assert masks.sum(1).tolist() == [900, 600, 1500]


def test_citeseer_loads_from_the_planetoid_raw_files(data_root):
    g = load_dataset({"name": "citeseer"}, data_root)
    s = g.summary()
    assert (s["nodes"], s["features"], s["classes"]) == (3327, 3703, 6)
    assert (s["train_nodes"], s["val_nodes"], s["test_nodes"]) == (120, 500, 1000)
    # 9,104 directed edges (PyG's count) plus one self-loop per node.
    assert g.num_edges == 9104 + 3327
    assert not list((data_root / "planetoid" / "CiteSeer").glob("processed"))  # nothing written beside raw/


def test_default_data_root_reads_the_cora_shipped_with_the_repository():
    """data_root=null is the project's data/, where Cora is read in place and nothing is written."""
    assert resolve_data_root(None) == DATA and resolve_data_root("/x/y") == Path("/x/y")
    before = sorted(p.relative_to(DATA) for p in DATA.rglob("*"))
    g = load_dataset({"name": "cora"})
    assert (g.num_nodes, g.num_features, g.num_classes, g.num_edges) == (2708, 1433, 7, 10556 + 2708)
    assert int(g.train_mask.sum()) == 140
    assert sorted(p.relative_to(DATA) for p in DATA.rglob("*")) == before


def test_missing_dataset_gives_one_line_naming_the_dataset_and_folder(tmp_path):
    with pytest.raises(UserError) as e:
        load_dataset({"name": "cora"}, tmp_path / "empty")
    msg = str(e.value)
    assert "\n" not in msg and "'cora'" in msg and str(tmp_path / "empty") in msg


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(UserError, match="unknown dataset 'coraa'; choose one of: .*citeseer.*synthetic"):
        load_dataset({"name": "coraa"})


def _write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def test_ogb_loader_reads_the_ogb_on_disk_layout(tmp_path):
    """A tiny ogbn-arxiv written in OGB's layout: raw CSVs, a time split and the RELEASE marker."""
    root = tmp_path / "ogb"
    folder = root / "ogbn_arxiv"
    n, rng = 12, np.random.default_rng(0)
    edges = [(i, (i + 1) % n) for i in range(n)] + [(0, 6), (3, 9)]
    _write_csv_gz(folder / "raw" / "edge.csv.gz", edges)
    _write_csv_gz(folder / "raw" / "num-node-list.csv.gz", [n])
    _write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", [len(edges)])
    _write_csv_gz(folder / "raw" / "node-feat.csv.gz", rng.standard_normal((n, 5)).round(4))
    _write_csv_gz(folder / "raw" / "node-label.csv.gz", [[i % 40] for i in range(n)])
    for name, idx in (("train", range(0, 6)), ("valid", range(6, 9)), ("test", range(9, 12))):
        _write_csv_gz(folder / "split" / "time" / f"{name}.csv.gz", list(idx))
    (folder / "RELEASE_v1.txt").write_text("tiny test fixture\n")

    g = load_dataset({"name": "ogbn-arxiv"}, root)
    assert (g.num_nodes, g.num_features, g.num_classes) == (n, 5, 40)
    assert g.num_edges == 2 * len(edges) + n  # made undirected, plus self-loops
    assert g.train_mask[:6].all() and g.val_mask[6:9].all() and g.test_mask[9:].all()
    assert g.y.tolist() == [i % 40 for i in range(n)]


def test_incomplete_ogb_folder_is_named_instead_of_prompting(tmp_path):
    (tmp_path / "ogbn_products").mkdir()
    with pytest.raises(UserError, match="ogbn_products is incomplete"):
        load_dataset({"name": "ogbn-products"}, tmp_path)


@pytest.mark.parametrize("damage, file", [
    (lambda raw: (raw / "ind.citeseer.graph").write_bytes((raw / "ind.citeseer.graph").read_bytes()[:1000]), "graph"),
    (lambda raw: (raw / "ind.citeseer.allx").write_text("garbage"), "allx"),
])
def test_a_damaged_planetoid_file_is_named_with_how_to_get_a_good_copy(data_root, tmp_path, damage, file):
    root = tmp_path / "damaged"
    shutil.copytree(data_root / "planetoid" / "CiteSeer", root / "planetoid" / "CiteSeer")
    damage(root / "planetoid" / "CiteSeer" / "raw")
    with pytest.raises(UserError) as e:
        load_dataset({"name": "citeseer"}, root)
    message = str(e.value)
    assert f"ind.citeseer.{file} could not be read" in message and "good copy" in message
    assert len(message.splitlines()) == 1


class _RunsCode:
    """Unpickling this calls os.system: what a crafted Planetoid file could carry."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os
        return os.system, (self.command,)


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_planetoid_file_that_would_run_code_is_refused_before_it_is_read(data_root, tmp_path, protocol):
    """D6: the Planetoid format is pickle; a file that would call anything but numpy, scipy or list
    constructors is refused in one line, and nothing in it runs."""
    import pickle

    root = tmp_path / "crafted"
    shutil.copytree(data_root / "planetoid" / "Cora", root / "planetoid" / "Cora")
    marker = tmp_path / "ran"
    (root / "planetoid" / "Cora" / "raw" / "ind.cora.x").write_bytes(
        pickle.dumps(_RunsCode(f"touch {marker}"), protocol=protocol))
    with pytest.raises(UserError) as e:
        load_dataset({"name": "cora"}, root)
    message = str(e.value)
    assert "ind.cora.x is not a Planetoid data file: reading it would call" in message, message
    assert ("posix.system" in message or "os.system" in message) if protocol == 2 else "STACK_GLOBAL" in message
    assert len(message.splitlines()) == 1 and not marker.exists()


def test_the_generator_makes_the_graphs_it_always_made():
    # Fingerprints of graphs generated before the generator computed in place (commit 949f6ef): a
    # change here moves every synthetic result and invalidates every partition cache.
    assert synthetic(**SYNTH).fingerprint() == "d572666c7db47eca2a80a22e945ebfd1"
    default = load_dataset({"name": "synthetic", "nodes": 20000, "avg_degree": 16, "classes": 8, "features": 64,
                            "homophily": 0.8, "feature_noise": 6.0, "degree_skew": 1.0, "train_frac": 0.3,
                            "val_frac": 0.2, "test_frac": 0.5, "seed": 0})
    assert default.fingerprint() == "953f93dd1e7038a23e105121e21d22e8"


def test_the_full_split_trains_every_node_outside_the_public_validation_and_test_sets():
    """`cora-full`: PyG's Planetoid(split="full"): 2708 - 500 - 1000 = 1208 training nodes, the public
    validation and test sets unchanged, its own name (so its partitions and records are its own)."""
    public, full = load_dataset({"name": "cora"}), load_dataset({"name": "cora-full"})
    assert full.name == "cora-full" and int(full.train_mask.sum()) == 1208
    assert torch.equal(full.val_mask, public.val_mask) and torch.equal(full.test_mask, public.test_mask)
    assert not bool((full.train_mask & (full.val_mask | full.test_mask)).any())
    assert bool(full.train_mask[public.train_mask].all())
    assert full.fingerprint() != public.fingerprint()
