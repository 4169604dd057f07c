"""Where a rank's data lives beyond its own part: graph stores for the mini-batch family and the
shared-memory store DIGEST-A uses.

Graph stores answer `GraphStore`'s three calls: `hop(nodes, fanout, layer, draws)` (in-neighbours,
all or sampled), `features(nodes, layer)` and `dataset_ids(nodes)`. Both keep every node's in-edges
in dataset-id order and key a node's draws by its dataset id (`benchmarks.core.sampling`), so both
draw the same sample of a node, whatever the layout:
  - `ReplicatedStore`: the whole graph, read locally (memory-mapped and shared on one machine);
  - `PartitionedStore`: this rank's part only; other parts' nodes are sampled by their owners and
    their features fetched from them, through counted all-to-alls; optionally with a `FeatureCache`
    of other ranks' rows filled once (`fill_cache`: neighbour sampling's `feature_cache`), so only
    the misses are fetched.

DIGEST-A's shared state: a representation store and a parameter server that workers use without
waiting for each other.

Both are interfaces with one implementation here, in shared memory for the workers of one machine:
tensors mapped from files under /dev/shm that every rank opens and rank 0 unlinks as soon as all
have them mapped. Their names carry the creating process's pid and start time, so the files of a
run killed before the unlink are removed by the next run (`remove_leftovers`). A multi-machine
store (a key-value tier, a parameter-server process) implements the same methods. Critical sections
are short copies under one inter-process lock (`flock`).

Traffic is counted through `Comm.count` by the suite's one rule, every byte once, at its sender: what
a rank writes is what it sends (`stale_push`, `param_push`); what it reads (a pull) is what it
receives, sent by the store, which is not a rank, so it is not counted (docs/measurement.md).
"""
from __future__ import annotations

import fcntl
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import torch

from benchmarks.core.comm import Comm, flatten, unflatten_into
from benchmarks.base.errors import UserError
from benchmarks.core.graph import concat_ranges
from benchmarks.base.leftovers import on_this_host, owner_tag, remove_leftovers
from benchmarks.core.partition import load_part
from benchmarks.core.sampling import in_id_order, node_draws, sample_neighbors


# --------------------------------------------------------------------------- graph stores
class GraphStore:
    """What a sampler asks of the graph (`ctx.graph_store(kind)`). Ids: every call takes and returns
    *store ids*, the partition's global numbering (a rank's local row i is store id
    i + `ctx.part.offsets[rank]`); draws and dropout masks are keyed by *dataset ids*
    (`dataset_ids`). `hop` and `features` are collective under the partitioned store (other ranks'
    nodes are answered by their owners): every rank calls them the same number of times, in the same
    order, an empty `nodes` included."""

    def hop(self, nodes: torch.Tensor, fanout: int, layer: int, draws=None):
        """In-neighbours of `nodes` for model layer `layer` (the traffic's layer): every in-edge
        (`fanout` -1; `draws` unused) or min(fanout, degree) drawn without replacement by `draws` (a
        `sampling.NodeDraws`, keyed by each node's dataset id; a torch generator is read as a stream).
        Returns (count per node, neighbour ids grouped by node in the order of `nodes`, their degrees,
        degrees of `nodes`), ids as store ids, each node's neighbours in dataset-id order."""
        raise NotImplementedError

    def features(self, nodes: torch.Tensor, layer: int) -> torch.Tensor:
        """The input rows of `nodes` (store ids), counted at `layer`."""
        raise NotImplementedError

    def dataset_ids(self, nodes: torch.Tensor) -> torch.Tensor:
        """The dataset ids of `nodes` (store ids): what draws, dropout masks and keyed orders are keyed by."""
        raise NotImplementedError


def drawn(fanout: int, draws):
    """`draws` for a hop of `fanout`: a hop that draws (fanout >= 0) needs them."""
    if fanout >= 0 and draws is None:
        raise ValueError(f"hop with fanout {fanout} draws a sample: give it `draws` (a NodeDraws)")
    return node_draws(draws)


class ReplicatedStore(GraphStore):
    """The whole graph, read locally: global in-edge CSR (each row in dataset-id order: `in_id_order`),
    degrees and features; `node_ids[i]` the dataset id of node i (None: i itself)."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor,
                 node_ids: torch.Tensor | None = None):
        self.indptr, self.indices, self.x, self.node_ids = indptr, indices, x, node_ids
        self.deg = indptr[1:] - indptr[:-1]

    def dataset_ids(self, nodes):
        return nodes if self.node_ids is None else self.node_ids[nodes]

    def hop(self, nodes, fanout: int, layer: int, draws=None):
        counts, positions = sample_neighbors(self.indptr, self.indices, nodes, fanout, drawn(fanout, draws),
                                             self.dataset_ids(nodes))
        neighbors = self.indices[positions]
        return counts, neighbors, self.deg[neighbors], self.deg[nodes]

    def features(self, nodes, layer: int):
        return self.x[nodes]


def replicated_store(part, comm: Comm, device: torch.device, partition_folder: Path | None,
                     builds: bool) -> ReplicatedStore:
    """One in-process rank: its part is the whole graph. Several ranks: the whole graph assembled
    once from every part of the partition cache into `<cache>/replicated/` and memory-mapped
    copy-on-write (read-only use, so every rank shares the same pages). The ranks with `builds` (the
    first of each machine: under torchrun, machines may not share a file system) build it if it is
    not there yet; collective (a barrier)."""
    if comm.world == 1:
        return ReplicatedStore(part.indptr, in_id_order(part.indptr, part.indices, part.node_ids), part.x,
                               part.node_ids)
    folder = Path(partition_folder) / "replicated"
    names = ("indptr", "indices", "x", "node_ids")
    if builds and folder.is_dir() and not (folder / "node_ids.npy").exists():  # built before rows had ids
        shutil.rmtree(folder, ignore_errors=True)
    if builds and not folder.is_dir():
        remove_leftovers(folder.parent, on_this_host("replicated.tmp-"))  # of this machine's killed builders
        tmp = folder.with_name(f"{on_this_host('replicated.tmp-')}{owner_tag()}")
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            arrays = {name: [] for name in names}
            edges = 0
            for p in range(part.num_parts):
                q = load_part(partition_folder, p)
                lo = int(q.offsets[p])
                global_of_col = torch.cat([lo + torch.arange(q.num_local), q.halo_ids])
                arrays["indptr"].append(q.indptr[1:] + edges if p else q.indptr + edges)
                arrays["indices"].append(global_of_col[in_id_order(q.indptr, q.indices, q.node_ids)])
                arrays["x"].append(q.x)
                arrays["node_ids"].append(q.node_ids[:q.num_local])
                edges += q.indices.numel()
            for name in names:
                np.save(tmp / f"{name}.npy", torch.cat(arrays[name]).numpy())
            os.replace(tmp, folder)
        except OSError:  # another machine or run built it meanwhile
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    comm.barrier()
    try:
        tensors = [torch.from_numpy(np.load(folder / f"{name}.npy", mmap_mode="c")) for name in names]
    except (OSError, ValueError) as e:
        raise UserError(f"damaged replicated-graph cache {folder} ({e}); delete that folder and rerun") from e
    return ReplicatedStore(*(t.to(device) if device.type != "cpu" else t for t in tensors))


class PartitionedStore(GraphStore):
    """This rank's part only; neighbours of other ranks' nodes are sampled by their owners and
    their features fetched from them, through counted all-to-alls. The part's rows are sampled in
    dataset-id order (a copy of its columns, `in_id_order`); every node's dataset id is kept (N x 8
    bytes, each rank's sent to every other once under `setup`): a block's rows are dropped out by it."""

    def __init__(self, part, comm: Comm, device: torch.device):
        self.part, self.comm, self.offsets = part, comm, part.offsets.to(device)
        self.lo = int(part.offsets[part.rank])
        self.hi = self.lo + part.num_local
        self.global_of_col = torch.cat([self.lo + torch.arange(part.num_local, device=device), part.halo_ids])
        self.indices = in_id_order(part.indptr, part.indices, part.node_ids)
        self.node_ids = torch.cat(comm.all_to_all_v([part.node_ids[:part.num_local]] * comm.world, "setup"))
        #: The categories `hop` counts under (a pre-sampling counts its own: `counted_as`).
        self.sample_categories = ("sample_request", "sample_response")
        #: Other ranks' feature rows kept here (`fill_cache`); None: every remote row is fetched.
        self.cache: FeatureCache | None = None
        #: Remote input rows `features` was asked for: served from the cache, or fetched from owners.
        self.cache_hits = self.cache_misses = 0

    @contextmanager
    def counted_as(self, request: str, response: str):
        """`hop`'s traffic counted under other categories meanwhile (a pre-sampling's)."""
        kept, self.sample_categories = self.sample_categories, (request, response)
        try:
            yield self
        finally:
            self.sample_categories = kept

    def by_owner(self, nodes):
        """(order grouping `nodes` by owner, the grouped ids split per owner)."""
        owner = torch.bucketize(nodes, self.offsets[1:], right=True)
        order = torch.argsort(owner, stable=True)
        sizes = torch.bincount(owner, minlength=self.comm.world).tolist()
        return order, list(nodes[order].split(sizes))

    def dataset_ids(self, nodes):
        return self.node_ids[nodes]

    def hop(self, nodes, fanout: int, layer: int, draws=None):
        draws = drawn(fanout, draws)
        part = self.part
        order, asked = self.by_owner(nodes)
        request_category, response_category = self.sample_categories
        requests = self.comm.all_to_all_v(asked, request_category, layer)
        # Serve every requester (myself included) with one sampler call over my own in-edges.
        local = torch.cat(requests) - self.lo
        counts, positions = sample_neighbors(part.indptr, self.indices, local, fanout, draws, part.node_ids[local])
        cols = self.indices[positions]
        meta = torch.stack([counts, part.deg[local]], 1)
        edges = torch.stack([self.global_of_col[cols], part.deg[cols]], 1)
        sizes = [r.numel() for r in requests]
        edge_sizes = [int(c.sum()) for c in counts.split(sizes)]
        answers = [torch.cat([m, e]) for m, e in zip(meta.split(sizes), edges.split(edge_sizes))]
        replies = self.comm.all_to_all_v(answers, response_category, layer)
        metas = torch.cat([r[:len(a)] for r, a in zip(replies, asked)])
        edges = torch.cat([r[len(a):] for r, a in zip(replies, asked)])
        # Back from owner order to the order of `nodes`.
        counts = torch.empty_like(metas[:, 0])
        counts[order] = metas[:, 0]
        deg = torch.empty_like(counts)
        deg[order] = metas[:, 1]
        # The j-th request's edges (owner order) go where node order[j]'s edges start.
        place = concat_ranges((torch.cumsum(counts, 0) - counts)[order], metas[:, 0])
        neighbors, neighbor_deg = torch.empty_like(place), torch.empty_like(place)
        neighbors[place], neighbor_deg[place] = edges[:, 0], edges[:, 1]
        return counts, neighbors, neighbor_deg, deg

    def features(self, nodes, layer: int):
        """The input rows of `nodes` (global ids): my own read locally, cached ones from the cache,
        the rest fetched from their owners (`feature_request`, `feature_fetch`). Collective, unless
        every rank's cache holds every remote row (`FeatureCache.everywhere`): then no rank asks."""
        remote = (nodes < self.lo) | (nodes >= self.hi)
        if self.cache is None:
            self.cache_misses += int(remote.sum())
            return self.fetch(nodes, "feature_request", "feature_fetch", layer)
        hit, slot = self.cache.lookup(nodes)
        hits = int(hit.sum())
        self.cache_hits += hits
        self.cache_misses += int(remote.sum()) - hits
        x = torch.empty((nodes.numel(), self.part.x.shape[1]), dtype=self.part.x.dtype, device=nodes.device)
        x[hit] = self.cache.rows[slot[hit]]
        need = ~hit
        if self.cache.everywhere:  # nothing is missing anywhere: my own rows only, no exchange
            x[need] = self.part.x[nodes[need] - self.lo]
        else:
            x[need] = self.fetch(nodes[need], "feature_request", "feature_fetch", layer)
        return x

    def fetch(self, nodes, request: str, response: str, layer=None):
        """Rows of `nodes` from their owners (mine copied locally, not counted). Collective."""
        order, asked = self.by_owner(nodes)
        requests = self.comm.all_to_all_v(asked, request, layer)
        rows = self.comm.all_to_all_v([self.part.x[r - self.lo] for r in requests], response, layer)
        x = torch.empty((nodes.numel(), self.part.x.shape[1]), dtype=self.part.x.dtype, device=nodes.device)
        x[order] = torch.cat(rows)
        return x

    def fill_cache(self, ids, everywhere: bool) -> None:
        """Keep the rows of `ids` (other ranks' nodes) here from now on: fetched once from their
        owners, ids and rows both counted under `cache_fill` (setup: outside every epoch's bytes).
        `everywhere`: every rank's cache holds every remote row (every rank knows it from the options
        and the partition's sizes), so `features` never exchanges anything. Collective."""
        ids = torch.sort(ids).values
        self.cache = FeatureCache(ids, self.fetch(ids, "cache_fill", "cache_fill"), everywhere)


class FeatureCache:
    """Other ranks' input feature rows one rank keeps (`ids` sorted, `rows[i]` the features of
    `ids[i]`), looked up by binary search: ids x 8 bytes beside the rows, not a table over the graph."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, everywhere: bool = False):
        self.ids, self.rows, self.everywhere = ids, rows, everywhere

    def lookup(self, nodes) -> tuple[torch.Tensor, torch.Tensor]:
        """(which of `nodes` are cached, the row of each in `rows`: valid where cached)."""
        if self.ids.numel() == 0:
            return torch.zeros_like(nodes, dtype=torch.bool), torch.zeros_like(nodes)
        slot = torch.searchsorted(self.ids, nodes).clamp_(max=self.ids.numel() - 1)
        return self.ids[slot] == nodes, slot

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size() + self.ids.numel() * self.ids.element_size()


# --------------------------------------------------------------------------- shared memory (DIGEST-A)
SHM_FOLDER = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
SHM_PREFIX = "gnnbench-"  # then <creator pid>-<its start time>-<token>, then -<name> or .lock


class SharedMemory:
    """Named CPU tensors shared by every rank of a one-machine run."""

    def __init__(self, comm: Comm, specs: dict[str, tuple[tuple[int, ...], torch.dtype]]):
        if comm.rank == 0:
            remove_leftovers(SHM_FOLDER, SHM_PREFIX)
        # os.urandom, not torch's generator: the dropout masks' random stream stays untouched.
        creator = torch.tensor([os.getpid(), int.from_bytes(os.urandom(7), "little")])
        pid, token = comm.broadcast(creator, 0, "setup").tolist()
        base = os.path.join(SHM_FOLDER, f"{SHM_PREFIX}{owner_tag(pid)}{token:x}")  # rank 0 owns them (one machine)
        paths = {name: f"{base}-{name}" for name in specs}
        lock_path = f"{base}.lock"
        self.tensors = {}
        for turn in (0, 1):  # rank 0 creates the files (zero-filled), then the others map them
            if (comm.rank == 0) == (turn == 0):
                self.lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                for name, (shape, dtype) in specs.items():
                    numel = math.prod(shape)
                    self.tensors[name] = torch.from_file(paths[name], shared=True, size=numel, dtype=dtype).view(shape)
            comm.barrier()
        if comm.rank == 0:
            for path in [*paths.values(), lock_path]:
                os.unlink(path)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    @contextmanager
    def locked(self):
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)


class RepresentationStore:
    """Rows keyed by (layer, global node id), each stamped with the parameter-server version at
    which it was written (-1: never written)."""

    def __init__(self, shm: SharedMemory, comm: Comm):
        self.shm, self.comm = shm, comm

    @staticmethod
    def specs(num_nodes: int, widths: dict[int, int]) -> dict:
        out = {}
        for layer, width in widths.items():
            out[f"rows{layer}"] = ((num_nodes, width), torch.float32)
            out[f"stamp{layer}"] = ((num_nodes,), torch.int64)
        return out

    def init_stamps(self) -> None:
        """Rank 0, before anyone pushes."""
        for name, t in self.shm.tensors.items():
            if name.startswith("stamp"):
                t.fill_(-1)

    def push(self, layer: int, ids: torch.Tensor, rows: torch.Tensor, version: int) -> None:
        rows = self.comm.quantized(rows.detach().to("cpu", torch.float32), "stale_push", layer)
        with self.shm.locked():
            self.shm[f"rows{layer}"].index_copy_(0, ids, rows)
            self.shm[f"stamp{layer}"].index_fill_(0, ids, version)

    def pull(self, layer: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self.shm.locked():
            rows = self.shm[f"rows{layer}"].index_select(0, ids)
            stamps = self.shm[f"stamp{layer}"].index_select(0, ids)
        return rows, stamps


class ParameterServer:
    """The model's parameters (flattened) with Adam applied by whichever worker pushes a gradient
    (torch.optim.Adam's update with L2 weight decay; its step count is the version)."""

    def __init__(self, shm: SharedMemory, comm: Comm, lr: float, weight_decay: float,
                 betas=(0.9, 0.999), eps: float = 1e-8):
        self.shm, self.comm = shm, comm
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps

    @staticmethod
    def specs(numel: int) -> dict:
        return {"params": ((numel,), torch.float32), "exp_avg": ((numel,), torch.float32),
                "exp_avg_sq": ((numel,), torch.float32), "version": ((1,), torch.int64)}

    def version(self) -> int:
        return int(self.shm["version"][0])

    def initialise(self, params: list[torch.Tensor]) -> None:
        """Rank 0, before anyone pulls."""
        self.shm["params"].copy_(flatten([p.detach() for p in params]).cpu())

    def pull(self, params: list[torch.Tensor]) -> int:
        """Copy the current parameters into `params`; returns their version (received: not counted)."""
        with self.shm.locked():
            flat, version = self.shm["params"].clone(), self.version()
        unflatten_into(flat, [p.data for p in params])
        return version

    def push(self, grads: list[torch.Tensor]) -> int:
        """Apply one Adam step with this gradient; returns the new version."""
        g = flatten(grads).to("cpu", torch.float32)
        (b1, b2), shm = self.betas, self.shm
        with shm.locked():
            p, m, v = shm["params"], shm["exp_avg"], shm["exp_avg_sq"]
            step = self.version() + 1
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** step))
            shm["version"][0] = step
        self.comm.count("param_push", None, g.numel() * g.element_size())
        return step
