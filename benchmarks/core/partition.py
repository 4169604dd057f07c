"""Partition the graph, relabel so each part is a contiguous id range, cut it into per-rank parts
(local in-edge CSR, halo, exchange plan) and cache the parts on disk.

Cache layout: <cache_root>/parts/<dataset>-<fingerprint>-<partitioner>-p<P>-s<seed>/ holding
part_<p>.pt and manifest.json (key, sizes, edge cut, halo sizes, a checksum per file). A cache
whose manifest is missing, unreadable, for another key or whose files fail their checksum is
reported in one line and rebuilt, never used. A cache is built in
<cache_root>/parts/tmp-<host>-<owner tag>-<name>-XXXX/ and renamed into place; the build folder of
a process killed meanwhile is removed when the cache is next used on that machine (`leftovers`).
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from benchmarks.base.errors import UserError, choose
from benchmarks.core.graph import Graph, edge_rows, permute
from benchmarks.base.leftovers import die_with_launcher, on_this_host, owner_tag, remove_leftovers
from benchmarks.base.outputs import writing

PARTITIONERS = ("metis", "metis_edges", "random", "contiguous")
CACHE_FORMAT = 3  # 2: parts carry `node_ids`; 3: the manifest's stats carry the REGIME_KEYS


# --------------------------------------------------------------------------- assignment
def assign(graph: Graph, partitioner: str, parts: int, seed: int) -> torch.Tensor:
    """Part id of every node."""
    choose("partitioner", partitioner, PARTITIONERS)
    n = graph.num_nodes
    if parts == 1:
        return torch.zeros(n, dtype=torch.int64)
    if partitioner == "contiguous":
        return torch.arange(n) * parts // n
    if partitioner == "random":
        g = torch.Generator().manual_seed(seed)
        return torch.randperm(n, generator=g) % parts
    # Balanced on nodes and on training nodes (two constraints), so every rank gets a fair share of
    # the loss; `metis_edges` adds each node's in-degree (its in-edges, the rank's aggregation work
    # and edge memory) as a third constraint, as SAR's partitions (DGL `balance_edges=True`) do.
    constraints = [torch.ones(n, dtype=torch.int64), graph.train_mask.long()]
    if partitioner == "metis_edges":
        constraints.append((graph.indptr[1:] - graph.indptr[:-1]).long())
    return metis(graph.indptr, graph.indices, parts, seed, torch.stack(constraints, 1))


def metis(indptr: torch.Tensor, indices: torch.Tensor, parts: int, seed: int,
          vweights: torch.Tensor | None = None) -> torch.Tensor:
    """METIS part of every node of a symmetric in-edge CSR (self-loops ignored in the adjacency);
    `vweights` [n, c] balances c constraints (default: nodes). METIS runs in a child process
    (`_in_child`), so a stop signal never lands inside it."""
    indptr, indices = indptr.cpu(), indices.cpu()
    n = indptr.numel() - 1
    # The edge-sized temporaries are dropped before METIS's child is forked: what this process holds
    # then stays held (and shared with the child) while METIS runs.
    rows = edge_rows(indptr)
    keep = indices != rows
    loops = torch.bincount(rows[~keep], minlength=n)
    del rows
    xadj = np.concatenate([[0], np.cumsum((indptr[1:] - indptr[:-1] - loops).numpy())])
    adjncy = indices[keep].numpy()
    del keep
    weights = None if vweights is None else vweights.reshape(-1).numpy()
    return torch.as_tensor(_in_child(_part_graph, parts, xadj, adjncy, weights, seed), dtype=torch.int64)


def _part_graph(parts: int, xadj, adjncy, weights, seed: int):
    import pymetis

    result = pymetis.part_graph(parts, pymetis.CSRAdjacency(xadj, adjncy), vweights=weights,
                                options=pymetis.Options(seed=seed))
    return np.asarray(result.vertex_part, dtype=np.int64)


def _in_child(fn, *args):
    """`fn(*args)` in a forked child, for native code a stop must not interrupt: METIS traps SIGTERM
    itself while it runs (and SIGABRT; GKlib's `gk_sigtrap`) and jumps out of the partitioning, which
    reached Python as `RuntimeError: Caught an unknown exception!`, a crash, or no error at all.
    Here the stop reaches this process's handler (`errors.stop_on_signals`: `Stopped`), which ends
    the child; a child dies with this process even if it is SIGKILLed (`leftovers.die_with_launcher`)."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(send, fn, args), name="gnnbench-metis", daemon=True)
    child.start()
    send.close()
    try:
        try:
            ok, value = receive.recv()
        except EOFError:
            child.join()
            raise RuntimeError(f"{fn.__name__} died in its child process (exit code {child.exitcode})") from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    if not ok:
        raise RuntimeError(value)
    return value


def _child_main(send, fn, args) -> None:
    for s in (signal.SIGINT, signal.SIGHUP):  # the parent stops; it ends this child
        signal.signal(s, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_launcher()
    try:
        send.send((True, fn(*args)))
    except Exception as e:  # noqa: BLE001 (the parent raises it)
        send.send((False, f"{type(e).__name__}: {e}"))


def order_by_part(assignment: torch.Tensor, parts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(perm, offsets): new node i is old node perm[i]; part p owns [offsets[p], offsets[p+1])."""
    perm = torch.argsort(assignment, stable=True)
    offsets = torch.zeros(parts + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.bincount(assignment, minlength=parts), 0)
    return perm, offsets


# --------------------------------------------------------------------------- per-rank parts
@dataclass
class Part:
    """Everything rank `rank` loads: its nodes' data, its in-edges and its exchange plan."""

    rank: int
    offsets: torch.Tensor  # [P+1] global id range of every part
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    indptr: torch.Tensor  # [n_local+1] in-edge CSR over local destinations
    indices: torch.Tensor  # column per edge: < n_local local source, else n_local + halo position
    deg: torch.Tensor  # [n_local + n_halo] global degree of every column (self-loop included)
    halo_ids: torch.Tensor  # sorted global ids of the halo (= owner-grouped, ids are contiguous)
    recv_counts: torch.Tensor  # [P] halo rows owned by each peer
    send_idx: torch.Tensor  # local rows each peer needs, concatenated in peer order
    send_counts: torch.Tensor  # [P]
    num_classes: int
    num_train_global: int
    #: [n_local + n_halo] the dataset's own id of every column (local rows, then the halo): what a
    #: run's random draws are keyed by (benchmarks/core/draws.py), the same node whatever the layout.
    node_ids: torch.Tensor = None

    @property
    def num_parts(self) -> int:
        return self.offsets.numel() - 1

    @property
    def num_local(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_halo(self) -> int:
        return self.halo_ids.numel()

    def state(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def build_parts(graph: Graph, offsets: torch.Tensor, node_ids: torch.Tensor | None = None) -> list[Part]:
    """Cut a graph whose parts are contiguous id ranges into per-rank parts. `node_ids[i]`: the
    dataset's id of node i (`order_by_part`'s perm; default: the graph's own ids)."""
    P = offsets.numel() - 1
    node_ids = torch.arange(graph.num_nodes) if node_ids is None else node_ids
    deg = graph.in_degree()
    num_train = int(graph.train_mask.sum())
    halos, raw = [], []
    for p in range(P):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        indptr = graph.indptr[lo:hi + 1] - graph.indptr[lo]
        src = graph.indices[graph.indptr[lo]:graph.indptr[hi]]
        remote = (src < lo) | (src >= hi)
        halo = torch.unique(src[remote])
        cols = src - lo
        cols[remote] = (hi - lo) + torch.searchsorted(halo, src[remote])
        halos.append(halo)
        raw.append((lo, hi, indptr, cols))
    parts = []
    for p, (lo, hi, indptr, cols) in enumerate(raw):
        owner = torch.bucketize(halos[p], offsets[1:], right=True)
        recv_counts = torch.bincount(owner, minlength=P)
        # Peer q needs my rows that appear in its halo, in its (sorted) halo order.
        needed = [halos[q][(halos[q] >= lo) & (halos[q] < hi)] - lo for q in range(P)]
        parts.append(Part(
            rank=p, offsets=offsets.clone(), x=graph.x[lo:hi].clone(), y=graph.y[lo:hi].clone(),
            train_mask=graph.train_mask[lo:hi].clone(), val_mask=graph.val_mask[lo:hi].clone(),
            test_mask=graph.test_mask[lo:hi].clone(), indptr=indptr.clone(), indices=cols,
            deg=torch.cat([deg[lo:hi], deg[halos[p]]]), halo_ids=halos[p], recv_counts=recv_counts,
            send_idx=torch.cat(needed), send_counts=torch.tensor([t.numel() for t in needed]),
            num_classes=graph.num_classes, num_train_global=num_train,
            node_ids=torch.cat([node_ids[lo:hi], node_ids[halos[p]]])))
    return parts


def imbalance(counts) -> float:
    """max / mean of per-part counts (1 is perfect balance)."""
    counts = [float(c) for c in counts]
    mean = sum(counts) / len(counts)
    return max(counts) / mean if mean else 1.0


#: The statistics of the partition's regime, the quantities the methods' effects depend on
#: (docs/records.md, `partition`), in every record's `partition` section and in every P's entry of
#: `benchmarks.tools.partition_stats`; optional for a reader (older records and files lack them).
REGIME_KEYS = ("halo_rows_per_node", "cut_fraction", "train_nodes_min", "train_nodes_mean", "train_nodes_max",
               "label_skew_per_rank", "label_skew_mean", "label_skew_max")


def label_skew(parts: list[Part]) -> list[float | None]:
    """Per part, the total-variation distance (half the L1 distance, 0 to 1) between its training
    nodes' label distribution and that of every training node; None for a part without training
    nodes (no label mix, and no loss of its own)."""
    classes = parts[0].num_classes
    counts = [torch.bincount(p.y[p.train_mask & (p.y >= 0)], minlength=classes).double() for p in parts]
    total = torch.stack(counts).sum(0)
    if total.sum() == 0:
        return [None] * len(parts)
    mix = total / total.sum()
    return [float((c / c.sum() - mix).abs().sum() / 2) if c.sum() else None for c in counts]


def regime_stats(parts: list[Part], cross: int, train: list[int]) -> dict:
    """The `REGIME_KEYS` of a cut: halo rows (summed over parts) per node of the graph; the share
    of directed in-edges (self-loops included) whose source another part owns (`cross` of them);
    training nodes per part (`train`: min, mean, max); and each part's label skew (`label_skew`), its
    mean and max over the parts that hold training nodes (None where none does)."""
    nodes = sum(p.num_local for p in parts)
    edges = sum(p.indices.numel() for p in parts)
    skew = label_skew(parts)
    known = [s for s in skew if s is not None]
    return {
        "halo_rows_per_node": sum(p.num_halo for p in parts) / nodes if nodes else 0.0,
        "cut_fraction": cross / edges if edges else 0.0,
        "train_nodes_min": min(train), "train_nodes_mean": sum(train) / len(train), "train_nodes_max": max(train),
        "label_skew_per_rank": skew,
        "label_skew_mean": sum(known) / len(known) if known else None,
        "label_skew_max": max(known) if known else None,
    }


def partition_stats(graph: Graph, parts: list[Part], partitioner: str) -> dict:
    cross = sum(int((p.indices >= p.num_local).sum()) for p in parts)  # directed in-edges across parts
    train = [int(p.train_mask.sum()) for p in parts]
    return {
        "partitioner": partitioner,
        "parts": len(parts),
        "edge_cut": cross // 2,  # undirected edges with ends in different parts
        "cross_edges_directed": cross,
        "nodes_per_rank": [p.num_local for p in parts],
        "edges_per_rank": [p.indices.numel() for p in parts],
        "train_nodes_per_rank": train,
        "halo_nodes_per_rank": [p.num_halo for p in parts],
        "edge_imbalance": imbalance(p.indices.numel() for p in parts),  # max / mean in-edges per rank
        **regime_stats(parts, cross, train),
    }


def partition(graph: Graph, partitioner: str, parts: int, seed: int) -> tuple[torch.Tensor, list[Part], dict, float]:
    """Assign, relabel and cut: (perm, per-rank parts, their `partition_stats`, seconds the
    assignment took). The one path from a graph to its parts: `prepare_parts` caches what it
    returns, `benchmarks.tools.partition_stats` measures it at scales too large to cache."""
    t0 = time.perf_counter()
    assignment = assign(graph, partitioner, parts, seed)
    partition_s = time.perf_counter() - t0
    perm, offsets = order_by_part(assignment, parts)
    relabelled = permute(graph, perm)
    built = build_parts(relabelled, offsets, perm)
    return perm, built, partition_stats(relabelled, built, partitioner), partition_s


# --------------------------------------------------------------------------- cache
def _file_checksum(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


# Checksums this process has computed, by file identity: a cache used by run after run (a sweep's,
# the tests') is hashed once, not before every run. Any write to a file changes its identity
# (size, modification time in ns, inode), so a changed or replaced file is hashed again.
_checksums: dict[tuple, str] = {}


def _verified_checksum(path: Path) -> str:
    st = path.stat()
    identity = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    if identity not in _checksums:
        _checksums[identity] = _file_checksum(path)
    return _checksums[identity]


def cache_key(graph: Graph, partitioner: str, parts: int, seed: int) -> dict:
    return {"format": CACHE_FORMAT, "dataset": graph.name, "fingerprint": graph.fingerprint(),
            "partitioner": partitioner, "parts": parts, "seed": seed}


def _validate(folder: Path, key: dict) -> str | None:
    """None when the cache can be used, else why not."""
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable manifest ({e})"
    if manifest.get("key") != key:
        return "manifest is for another dataset, partitioner or format (stale)"
    for name, checksum in manifest.get("checksums", {}).items():
        path = folder / name
        if not path.exists():
            return f"{name} is missing"
        if _verified_checksum(path) != checksum:
            return f"{name} fails its checksum"
    if len(manifest.get("checksums", {})) != key["parts"]:
        return "part files are missing from the manifest"
    return None


def load_manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def prepare_parts(graph: Graph, partitioner: str, parts: int, seed: int, cache_root: Path,
                  log=print) -> Path:
    """Return a validated cache folder for this (graph, partitioner, parts, seed), building it if
    needed. Building happens in a temporary sibling folder renamed into place, so an interrupted
    build or a concurrent one (several torchrun nodes on one file system) never leaves half a cache;
    the build folders of this machine's dead builders (killed before they could remove them) are
    removed first, whether or not this call builds."""
    key = cache_key(graph, partitioner, parts, seed)
    folder = Path(cache_root) / "parts" / f"{graph.name}-{key['fingerprint'][:12]}-{partitioner}-p{parts}-s{seed}"
    remove_leftovers(folder.parent, on_this_host("tmp-"))
    if folder.exists():
        problem = _validate(folder, key)
        if problem is None:
            return folder
        log(f"partition cache {folder} is damaged ({problem}); rebuilding it")
        shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{on_this_host('tmp-')}{owner_tag()}{folder.name}-", dir=folder.parent))
    try:
        t0 = time.perf_counter()
        perm, built, stats, partition_s = partition(graph, partitioner, parts, seed)
        checksums = {}
        with writing("the partition cache", folder.parent):  # a full disk: one line, no half cache
            for part in built:
                name = f"part_{part.rank}.pt"
                torch.save(part.state(), tmp / name)
                checksums[name] = _file_checksum(tmp / name)
            torch.save(perm, tmp / "perm.pt")  # new id -> original id, to map results back
            manifest = {"key": key, "graph": graph.summary(), "stats": stats,
                        "partition_time_s": partition_s, "build_time_s": time.perf_counter() - t0,
                        "checksums": checksums}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same cache first; theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_part(folder: Path, rank: int) -> Part:
    path = Path(folder) / f"part_{rank}.pt"
    try:
        state = torch.load(path, weights_only=True)
    except Exception as e:
        raise UserError(f"partition cache part {path} cannot be read ({e}); delete {folder} to rebuild it") from None
    return Part(**state)


def own_edges(part) -> tuple[torch.Tensor, torch.Tensor]:
    """The part's own subgraph as a square in-edge CSR (indptr, indices) over its local nodes: edges
    from halo columns (other parts) dropped, self-loops kept, order within each row unchanged."""
    keep = part.indices < part.num_local
    rows = edge_rows(part.indptr)
    counts = torch.bincount(rows[keep], minlength=part.num_local)
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]), part.indices[keep]
