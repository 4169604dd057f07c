"""Dataset loaders: every dataset becomes one canonical `Graph` (see graph.py).

`synthetic` needs no download. Real datasets read the libraries' own on-disk layouts under
`data_root`; when the files are absent and the download fails (offline), the error is one line
naming the dataset, the folder searched and how to get the files.

The keys of the `dataset` section are declared per dataset (`options`): `synthetic`'s generator
parameters (`SyntheticOptions`, whose defaults are conf/dataset/synthetic.yaml's); a real dataset
takes its `name` alone. `runner.plan` checks them before anything is loaded.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

import torch

from benchmarks.base.errors import UserError, choose
from benchmarks.core.graph import Graph, from_edge_index
from benchmarks.base.options import Options, option, seed_option
from benchmarks import PROJECT_ROOT

DATA = PROJECT_ROOT / "data"  # Cora and CiteSeer ship here (data/README.md); downloads land here


# --------------------------------------------------------------------------- options
#: `dataset.transform`: what is done to the features once the graph is loaded, before partitioning, the
#: same for every method and layout. `row_normalize` divides each row by its sum (a row summing to 0
#: stays 0), as the reference codes of GCN (tkipf/gcn utils.py `preprocess_features`), GAT
#: (PetarV-/GAT utils/process.py `preprocess_features`) and GAS (rusty1s/pyg_autoscale
#: `T.NormalizeFeatures()`) do to the Planetoid features.
TRANSFORMS = ("none", "row_normalize")


@dataclass(frozen=True)
class DatasetOptions(Options):
    """A real dataset's section: its name and the feature transform (the files decide the rest)."""

    reserved: ClassVar[tuple[str, ...]] = ("name",)

    transform: Literal[TRANSFORMS] = option(
        "none", "the features' preprocessing, applied once before partitioning: none (as the files hold them) or "
                "row_normalize (each row divided by its sum, as the GCN, GAT and GAS reference codes do). "
                "Named in a record's variant, so one setting holds both")


@dataclass(frozen=True)
class SyntheticOptions(DatasetOptions):
    """`dataset=synthetic`: the generator's parameters (`synthetic`); defaults as in its YAML."""

    nodes: int = option(20000, "nodes of the graph", ge=2)
    avg_degree: float = option(16, "edges per node", gt=0)
    classes: int = option(8, "classes, the blocks of the block model", ge=2)
    features: int = option(64, "feature dimension", ge=1)
    homophily: float = option(0.8, "probability that an edge stays within its class", ge=0, le=1)
    feature_noise: float = option(6.0, "std of the noise around each class centroid (features alone classify "
                                       "poorly)", ge=0)
    degree_skew: float = option(1.0, "std of the log-normal degree propensity", ge=0)
    train_frac: float = option(0.3, "share of the nodes in the training set", ge=0, le=1)
    val_frac: float = option(0.2, "share of the nodes in the validation set", ge=0, le=1)
    test_frac: float = option(0.5, "share of the nodes in the test set (the three shares add up to at most 1)",
                              ge=0, le=1)
    seed: int = seed_option(doc="the graph's: the generator is deterministic from it")

    def check(self, cfg: dict) -> None:
        if self.nodes < self.classes:
            raise UserError(f"synthetic graph needs nodes >= classes >= 2 (got nodes={self.nodes}, "
                            f"classes={self.classes})")
        fracs = {"train_frac": self.train_frac, "val_frac": self.val_frac, "test_frac": self.test_frac}
        if sum(fracs.values()) > 1 + 1e-9:
            raise UserError(f"dataset.{' + '.join(f'{k}={v}' for k, v in fracs.items())} = {sum(fracs.values()):g} "
                            "must be at most 1 (the three sets are disjoint)")
        for key, frac in fracs.items():
            if int(frac * self.nodes) < 1:
                raise UserError(f"dataset.{key}={frac} selects no node of {self.nodes} (the {key[:-5]} set would be "
                                f"empty); make it at least {1 / self.nodes:.2g}")


def options(name: str) -> type[DatasetOptions]:
    """The options class of the dataset `name` (a UserError for an unknown name)."""
    choose("dataset", name, LOADERS)
    return SyntheticOptions if name == "synthetic" else DatasetOptions


def resolve_data_root(data_root) -> Path:
    """A given folder is used as is (a dataset missing there is downloaded into it or named in the
    error). `null` means the project's data/: the shipped Cora and CiteSeer raw files are read in
    place (nothing is written beside them) and other datasets are downloaded beside them, in
    their own folders that git ignores."""
    if data_root:
        return Path(data_root).expanduser()
    return DATA


# --------------------------------------------------------------------------- synthetic
def synthetic(nodes: int, avg_degree: float, classes: int, features: int, homophily: float,
              feature_noise: float, degree_skew: float, train_frac: float, val_frac: float,
              test_frac: float, seed: int, **_) -> Graph:
    """Degree-corrected stochastic block model whose blocks are the classes.

    Each undirected edge picks its first end with probability proportional to a log-normal degree
    propensity theta (spread `degree_skew`), keeps that end's class with probability `homophily`
    (otherwise a uniformly chosen other class), and draws the second end within the chosen class,
    again proportional to theta. Features are a class centroid plus Gaussian noise of scale
    `feature_noise`: noisy enough that features alone classify poorly while averaging over
    homophilous neighbours denoises them, so methods that drop edges lose accuracy visibly.
    Fully vectorised and deterministic from `seed`.
    """
    if nodes < classes or classes < 2:
        raise UserError(f"synthetic graph needs nodes >= classes >= 2 (got nodes={nodes}, classes={classes})")
    g = torch.Generator().manual_seed(int(seed))
    y = torch.randint(0, classes, (nodes,), generator=g)
    theta = torch.exp(degree_skew * torch.randn(nodes, generator=g, dtype=torch.float64))
    order = torch.argsort(y, stable=True)  # nodes grouped by class
    cum = torch.cumsum(theta[order], 0)
    counts = torch.bincount(y, minlength=classes)
    class_end = torch.cumsum(counts, 0)
    hi = cum[class_end - 1]
    lo = torch.cat([torch.zeros(1, dtype=torch.float64), hi[:-1]])
    del theta

    # Inverse-CDF sampling within [lo_w, lo_w + width) of the cumulative weights: r = lo_w + U * width.
    # The arithmetic runs in place, one edge list's worth of temporaries at a time; its bits, and the
    # generator's draws, are those of the out-of-place expression (tests/benchmarks/test_graph.py).
    def node_at(r):
        return order[torch.searchsorted(cum, r, right=True).clamp_(max=nodes - 1)]

    m = int(nodes * avg_degree / 2)
    # The first end: lo_w = 0 and width = the total weight, rounded to float32 as it always was (the
    # clamp in `node_at` catches a draw past the last node).
    u = node_at(torch.rand(m, generator=g, dtype=torch.float64).mul_(float(cum[-1].float())))
    same = torch.rand(m, generator=g) < homophily
    shift = torch.randint(1, classes, (m,), generator=g)
    yu = y[u]
    cv = torch.where(same, yu, shift.add_(yu).remainder_(classes))  # the class of the second end
    del same, shift, yu
    lo_w = lo[cv]
    width = hi[cv].sub_(lo_w)
    del cv
    r = torch.rand(m, generator=g, dtype=torch.float64).mul_(width)
    del width
    v = node_at(r.add_(lo_w))
    del r, lo_w
    edge_index = torch.stack([u, v])
    del u, v

    centroids = torch.randn(classes, features, generator=g)
    x = torch.randn(nodes, features, generator=g).mul_(feature_noise).add_(centroids[y])
    perm = torch.randperm(nodes, generator=g)
    n_train, n_val, n_test = (int(f * nodes) for f in (train_frac, val_frac, test_frac))
    masks = []
    for start, size in ((0, n_train), (n_train, n_val), (n_train + n_val, n_test)):
        mask = torch.zeros(nodes, dtype=torch.bool)
        mask[perm[start:start + size]] = True
        masks.append(mask)
    return from_edge_index("synthetic", edge_index, nodes, x, y, *masks, classes)


# --------------------------------------------------------------------------- real datasets
def _missing(name: str, folder: Path, how: str, cause: Exception) -> UserError:
    return UserError(f"dataset '{name}' not found under {folder} and could not be downloaded "
                     f"({type(cause).__name__}); {how}")


#: What the Planetoid files (`ind.<name>.x`, ..., Python 2 pickles) may build when read: numpy arrays,
#: scipy CSR matrices, and the graph's dict of lists. The files are pickles, and unpickling calls
#: whatever a file names; so every name is checked before any is read (`check_planetoid_pickle`).
PLANETOID_GLOBALS = {("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct"),
                     ("numpy._core.multiarray", "_reconstruct"), ("scipy.sparse.csr", "csr_matrix"),
                     ("scipy.sparse._csr", "csr_matrix"), ("__builtin__", "list"), ("builtins", "list"),
                     ("collections", "defaultdict"), ("_codecs", "encode")}  # encode: bytes in protocol 2


def check_planetoid_pickle(path: Path) -> None:
    """Refuse, before anything in it runs, a Planetoid file that would call anything but what
    `PLANETOID_GLOBALS` allows: the opcodes are read (`pickletools`), not executed. Names a pickle
    can only compute at load time (protocol 4's STACK_GLOBAL, INST, the extension registry) are refused."""
    import pickletools

    try:
        with open(path, "rb") as f:
            for op, arg, _ in pickletools.genops(f):
                if op.name == "GLOBAL" and tuple(arg.split(" ", 1)) in PLANETOID_GLOBALS:
                    continue
                if op.name in ("GLOBAL", "STACK_GLOBAL", "INST") or op.name.startswith("EXT"):
                    what = arg.replace(" ", ".") if op.name in ("GLOBAL", "INST") else f"a name computed by {op.name}"
                    raise UserError(f"{path} is not a Planetoid data file: reading it would call {what} (the files "
                                    "are Python pickles; only numpy arrays, scipy matrices and lists are read)")
    except (ValueError, EOFError):  # not a pickle at all: the reader then names the file and the cause
        pass


def _damaged(name: str, folder: Path, cause: Exception) -> UserError:
    """The Planetoid file that fails to parse, named, with how to get a good copy."""
    from torch_geometric.io.planetoid import read_file

    culprit = folder
    for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):  # the files the reader reads
        try:
            read_file(str(folder), name, part)
        except Exception as e:
            culprit, cause = folder / f"ind.{name}.{part}", e
            break
    shipped = DATA in folder.parents
    how = ("restore it with `git checkout -- data/`" if shipped
           else f"replace it with a good copy (the repository ships Cora and CiteSeer in {DATA / 'planetoid'})")
    return UserError(f"dataset '{name}': {culprit} could not be read ({_cause(cause)}); {how}")


def _cause(e: Exception) -> str:
    """A reader's exception in one line."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def planetoid(name: str, data_root: Path) -> Graph:
    """Cora, CiteSeer, PubMed with the public split, read straight from the raw Planetoid files
    (nothing is written beside them, so a read-only copy works)."""
    from torch_geometric.io import read_planetoid_data

    pyg_name = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}[name]
    candidates = [data_root / "planetoid" / pyg_name / "raw", data_root / pyg_name / "raw"]
    folder = next((c for c in candidates if (c / f"ind.{name}.graph").exists()), None)
    if folder is None:
        from torch_geometric.datasets import Planetoid
        target = data_root / "planetoid"
        try:
            Planetoid(str(target), pyg_name)  # downloads raw/ (and writes processed/) when online
        except Exception as e:
            raise _missing(name, candidates[0].parent, "copy the Planetoid raw files into "
                           f"{candidates[0]} or run once with network access", e) from None
        folder = target / pyg_name / "raw"
    files = tuple((f.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                  for f in sorted(folder.glob(f"ind.{name}.*")) for st in [f.stat()])
    key = (name, str(folder.resolve()), files)
    if key not in _planetoid_loaded:
        for file_name, *_ in files:
            if file_name != f"ind.{name}.test.index":  # text, not a pickle
                check_planetoid_pickle(folder / file_name)
        try:
            data = read_planetoid_data(str(folder), name)
        except Exception as e:
            raise _damaged(name, folder, e) from None
        _planetoid_loaded[key] = from_edge_index(name, data.edge_index, data.num_nodes, data.x, data.y,
                                                 data.train_mask, data.val_mask, data.test_mask,
                                                 int(data.y.max()) + 1)
    graph = _planetoid_loaded[key]
    # a copy: whoever gets the graph may change its tensors in place
    return replace(graph, **{f.name: getattr(graph, f.name).clone() for f in fields(graph)
                             if isinstance(getattr(graph, f.name), torch.Tensor)})


# Planetoid graphs this process has read, by their files' identity (any write changes it): run after
# run of a sweep or the tests reads and symmetrises the same files once.
_planetoid_loaded: dict[tuple, Graph] = {}


def _split_masks(n: int, split: dict) -> list[torch.Tensor]:
    masks = []
    for key in ("train", "valid", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.tensor(split[key], dtype=torch.long)] = True
        masks.append(mask)
    return masks


def ogb(name: str, data_root: Path) -> Graph:
    """ogbn-* in the `ogb` package's on-disk layout (data_root/ogbn_<x>/{raw,split}/, RELEASE_v*.txt),
    read with ogb's own raw readers; downloaded through ogb when the folder is absent."""
    import ogb.nodeproppred
    import pandas as pd
    from ogb.nodeproppred import NodePropPredDataset

    folder = data_root / name.replace("-", "_")
    raw = folder / "raw"

    def complete() -> bool:
        has_raw = (raw / "edge.csv.gz").exists() or (raw / "data.npz").exists()
        return has_raw and any(folder.glob("RELEASE_v*.txt"))

    if folder.exists() and not complete():
        # ogb would stop at an interactive "update the dataset?" prompt here.
        raise UserError(f"dataset '{name}': {folder} is incomplete (needs raw/ files and RELEASE_v*.txt); "
                        "delete it and run again with network access")
    if not folder.exists():
        try:
            NodePropPredDataset(name=name, root=str(data_root))
        except Exception as e:
            raise _missing(name, folder, "run once with network access (the ogb package downloads it) "
                           f"or place OGB's files in {folder}", e) from None
    meta = pd.read_csv(Path(ogb.nodeproppred.__file__).parent / "master.csv", index_col=0,
                       keep_default_na=False)[name]
    try:
        return _read_ogb(name, folder, meta)
    except Exception as e:  # a damaged download: name the folder rather than a reader's traceback
        raise UserError(f"dataset '{name}': files under {folder} could not be read ({_cause(e)}); delete {folder} "
                        "and run again with network access") from None


def _read_ogb(name: str, folder: Path, meta) -> Graph:
    import numpy as np
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    raw = folder / "raw"
    inverse = meta["add_inverse_edge"] == "True"
    if meta["binary"] == "True":
        g = read_binary_graph_raw(str(raw), add_inverse_edge=inverse)[0]
        labels = np.load(raw / "node-label.npz")["node_label"]
    else:
        g = read_csv_graph_raw(str(raw), add_inverse_edge=inverse)[0]
        labels = pd.read_csv(raw / "node-label.csv.gz", compression="gzip", header=None).values
    split_dir = folder / "split" / meta["split"]
    split = {k: pd.read_csv(split_dir / f"{k}.csv.gz", compression="gzip", header=None).values[:, 0]
             for k in ("train", "valid", "test")}
    n = int(g["num_nodes"])
    y = torch.as_tensor(np.nan_to_num(labels.astype(np.float64).reshape(-1), nan=-1)).long()
    return from_edge_index(name, torch.as_tensor(g["edge_index"]), n, torch.as_tensor(g["node_feat"]), y,
                           *_split_masks(n, split), int(meta["num classes"]))


def pyg_single(name: str, data_root: Path) -> Graph:
    """Reddit and Flickr through PyG's dataset classes (they download into data_root/<name>)."""
    from torch_geometric import datasets as pyg_datasets

    cls = {"reddit": pyg_datasets.Reddit, "flickr": pyg_datasets.Flickr}[name]
    folder = data_root / name
    try:
        data = cls(str(folder))[0]
    except Exception as e:
        raise _missing(name, folder, "run once with network access (PyG downloads it)", e) from None
    return from_edge_index(name, data.edge_index, data.num_nodes, data.x, data.y, data.train_mask,
                           data.val_mask, data.test_mask, int(data.y.max()) + 1)


def planetoid_full(name: str, data_root: Path) -> Graph:
    """`cora-full`, `citeseer-full`, `pubmed-full`: the Planetoid graph with the full split, every node outside the
    public validation and test sets training (PyG's `Planetoid(split="full")`, the split LLCG's code trains
    Cora on), the same validation and test nodes. Its own dataset name, so every table names the regime."""
    graph = planetoid(name.removesuffix("-full"), data_root)
    return replace(graph, name=name, train_mask=~(graph.val_mask | graph.test_mask))


LOADERS = {
    "synthetic": None,
    "cora": planetoid, "citeseer": planetoid, "pubmed": planetoid,
    "cora-full": planetoid_full, "citeseer-full": planetoid_full, "pubmed-full": planetoid_full,
    "ogbn-arxiv": ogb, "ogbn-products": ogb, "ogbn-papers100M": ogb,
    "reddit": pyg_single, "flickr": pyg_single,
}


#: Graphs a warm sweep loaded once before forking its runs (`preload`), by (dataset section, data
#: root): every run is a fork and reads its own copy-on-write copy; nothing a run does reaches them.
_PRELOADED: dict[tuple, Graph] = {}


def _preload_key(dataset_cfg, data_root) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in dict(dataset_cfg).items())), str(data_root)


def preload(dataset_cfg, data_root=None) -> None:
    """Load a dataset now, in a process that forks runs, so each run finds it loaded. A dataset that
    cannot be loaded is left to the run, which says why in its own record."""
    key = _preload_key(dataset_cfg, data_root)
    if key not in _PRELOADED:
        try:
            _PRELOADED[key] = load_dataset(dataset_cfg, data_root)
        except (UserError, OSError):
            pass


def load_dataset(dataset_cfg, data_root=None) -> Graph:
    """Load the dataset described by the `dataset` config group (a preloaded one as it is), its
    `transform` applied."""
    preloaded = _PRELOADED.get(_preload_key(dataset_cfg, data_root))
    if preloaded is not None:
        return preloaded
    cfg = dict(dataset_cfg)
    name = choose("dataset", cfg.pop("name"), LOADERS)
    transform = choose("dataset.transform", cfg.pop("transform", "none"), TRANSFORMS)
    graph = synthetic(**cfg) if name == "synthetic" else LOADERS[name](name, resolve_data_root(data_root))
    return transformed(graph, transform)


def transformed(graph: Graph, transform: str) -> Graph:
    """`graph` with its features transformed (`TRANSFORMS`); a new Graph, the loaded one untouched (a
    warm sweep's preloaded graph is shared by its runs)."""
    if transform == "none":
        return graph
    if bool((graph.x < 0).any()):  # a row of signed features can sum to about 0: its quotient is noise
        raise UserError(f"dataset.transform={transform} divides each feature row by its sum, which needs "
                        f"non-negative features; {graph.name}'s has negative values (use dataset.transform=none)")
    sums = graph.x.sum(1, keepdim=True, dtype=torch.float64)
    inverse = torch.where(sums == 0, torch.zeros_like(sums), 1.0 / sums)  # tkipf/gcn: r_inv[isinf] = 0
    return replace(graph, x=(graph.x.double() * inverse).to(graph.x.dtype))
