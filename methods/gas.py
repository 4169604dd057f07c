"""`gas`: GNNAutoScale (Fey, Lenssen, Weichert, Leskovec, "GNNAutoScale: Scalable and Expressive
Graph Neural Networks via Historical Embeddings", ICML 2021, arXiv 2106.05609; code
github.com/rusty1s/pyg_autoscale at be65e92, read: `torch_geometric_autoscale/history.py` (the
`History` table: pinned host memory, `push`/`pull` under no_grad), `models/base.py` (`push_and_pull`,
`mini_inference`), `models/gcn.py` (where in the layer loop the push and pull sit),
`loader.py` (`SubgraphLoader`, `EvalSubgraphLoader`), `small_benchmark/main.py` with
`small_benchmark/conf/model/gcn.yaml`, and `large_benchmark/main.py`). Docs: docs/gas.md.

The graph is cut once into `num_parts` METIS clusters (the whole graph: GAS is one device). Each
step takes `batch_size` clusters (a fresh permutation per epoch, consumed `batch_size` at a time,
as SubgraphLoader with shuffle=True) and builds the batch: its in-batch nodes B (ascending ids)
plus their 1-hop out-of-batch in-neighbours O. Layer 0 reads the exact input features of B and O.
Every layer computes outputs for B only, with the rows of the *whole graph's* normalised adjacency
(global degrees, GAS's `gcn_norm` before partitioning). For a layer l >= 1 the input rows of O are
pulled from the history table of layer l's inputs, detached (no gradient reaches the history), and
the input rows of B, the previous layer's fresh outputs, are pushed into it; the concatenation
[B | O] is then dropped out, as `models/gcn.py` pushes after the activation and drops out after the
pull. With every cluster in one batch (`batch_size: -1`) O is empty and the step is full-batch
`single`'s, to the dropout masks (tests/methods/test_gas.py): `single` is the exact control.

Histories (`fill_history`): the authors' scripts refresh the tables with exact eval-mode rows once an
epoch: small_benchmark/main.py calls `test()` (a full-graph forward whose `push_and_pull` pushes every
node) before training and after every epoch; large_benchmark/main.py runs `mini_inference` ("Fill
history") before training and after every epoch, pushing each layer's outputs. `epoch` (default) does
that as a layer-wise no-grad pass over fixed groups of `batch_size` consecutive clusters
(`mini_inference` over EvalSubgraphLoader) before each epoch, outside its timed region
(`between_epochs`), counted as `history_fill`; `start` fills once before the first epoch; `none`
starts from zero tables (`History.reset_parameters`) and only training pushes.

Tables are host memory (pinned on CUDA, as `History`), one per layer l >= 1 (N x that layer's input
width); pulls and pushes are copies between host and device, counted as `history_pull` and
`history_push` (and `history_fill`) by `Comm.count(..., in_process=True)`. The device working set
is the batch's; the tables' bytes are the probe `history_bytes` (host-resident).

Loss: the sum over the batch's training nodes of their cross-entropy, weighted num_parts /
(clusters chosen x training nodes of the graph), as cluster_gcn does, so an epoch's loss estimates
the mean training loss (exactly it with every cluster in one batch). GAS's script takes the mean
over the batch's training nodes; both are minimised by Adam alike up to the per-batch scale. A batch
without training nodes is skipped (no forward, no step, nothing pushed), as `train()` there does.
Evaluation is the suite's exact full-graph inference; GAS's `mini_inference` gives the same rows
(it is exact: layer-wise over every batch, each layer complete before the next).

One device: pyg_autoscale trains on one GPU (no data parallelism in the repository), so the method
runs one process whatever `workers` says (`single_process`, as `single`; the record says workers=1).
Not applied: gradient clipping (`grad_norm: 1.0` for Cora in the conf; the suite
has none), split weight decay (`reg_weight_decay` on every layer but the last: the suite's one
`weight_decay` applies to all), GAS's asynchronous I/O pool (`AsyncIOPool`; copies here are
synchronous), `memory.checkpoint` (the push happens in the forward) and reduced precision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from benchmarks.base import traffic as cost
from benchmarks.core.aggregation import Aggregator, LocalAdjacency
from benchmarks.core.comm import Comm
from benchmarks.base.errors import UserError
from benchmarks.families.minibatch import Batch, SubgraphMethod
from benchmarks.core.graph import concat_ranges
from benchmarks.base.options import option
from benchmarks.core.sampling import block_columns
from methods.cluster_gcn import metis_clusters

CATEGORIES = ("history_pull", "history_push", "history_fill")


def batch_adjacency(indptr: torch.Tensor, indices: torch.Tensor, deg: torch.Tensor, nodes: torch.Tensor,
                    kernel: str) -> tuple[LocalAdjacency, torch.Tensor]:
    """The in-edges of `nodes` (B, ascending global ids) from the whole graph's CSR, over columns
    [B | O], O the out-of-batch in-neighbours (ascending); degrees global. Returns (adjacency, O)."""
    counts = indptr[nodes + 1] - indptr[nodes]
    cols = indices.index_select(0, concat_ranges(indptr[nodes], counts))
    columns, sources = block_columns(nodes, cols)  # sources: B, then O in id order
    sub_indptr = torch.zeros(nodes.numel() + 1, dtype=torch.int64, device=indices.device)
    sub_indptr[1:] = torch.cumsum(counts, 0)
    adj = LocalAdjacency(sub_indptr, columns, deg.index_select(0, nodes), deg.index_select(0, sources), kernel=kernel)
    return adj, sources[nodes.numel():]


class Histories:
    """GAS's `History` tables: for every layer l >= 1, N rows of layer l's input, in host memory
    (pinned when the model is on CUDA), zero at first. `pull` copies rows to the device, `push`
    copies detached rows back; both counted in `comm` (`in_process`: host <-> device copies)."""

    def __init__(self, num_nodes: int, widths: dict[int, int], device: torch.device, comm: Comm):
        pin = device.type == "cuda"
        self.tables = {layer: torch.zeros(num_nodes, width, pin_memory=pin) for layer, width in widths.items()}
        self.device, self.comm = device, comm
        comm.register_category(*CATEGORIES)

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tables.values())

    @torch.no_grad()
    def pull(self, layer: int, ids: torch.Tensor, category: str = "history_pull") -> torch.Tensor:
        rows = self.tables[layer].index_select(0, ids.cpu())
        self.comm.count(category, layer, rows.numel() * rows.element_size(), in_process=True)
        return rows.to(self.device, non_blocking=True)

    @torch.no_grad()
    def push(self, layer: int, ids: torch.Tensor, rows: torch.Tensor, category: str = "history_push") -> None:
        table = self.tables[layer]
        table[ids.cpu()] = rows.detach().to("cpu", table.dtype)
        self.comm.count(category, layer, rows.numel() * table.element_size(), in_process=True)


class GasAggregator(Aggregator):
    """One batch: layers aggregate the rows of B (the adjacency's rows) over columns [B | O]. A layer
    l >= 1 gets B's fresh rows from the previous layer; at its dropout (the start of a block) they are
    pushed into history l and O's rows pulled from it, detached, before the dropout of [B | O]
    (`models/gcn.py`: push_and_pull, then F.dropout). `histories` None: the inputs are [B | O]
    already (the fill pass)."""

    def __init__(self, adj: LocalAdjacency, nodes: torch.Tensor, outside: torch.Tensor, comm: Comm,
                 histories: Histories | None = None):
        self.adj, self.nodes, self.outside, self.comm, self.histories = adj, nodes, outside, comm, histories
        self.pulled: dict[int, torch.Tensor] = {}  # layer -> the O rows this step aggregated (tests read them)

    def dropout(self, h: torch.Tensor, p: float, training: bool, layer: int) -> torch.Tensor:
        if layer > 0 and self.histories is not None:
            self.histories.push(layer, self.nodes, h)
            self.pulled[layer] = self.histories.pull(layer, self.outside).to(h.dtype)
            h = torch.cat([h, self.pulled[layer]])
        ids = self.comm.draws.ids_of(torch.cat([self.nodes, self.outside]))  # [B | O], single's masks
        return self.comm.draws.dropout(h, p, training, ("input", layer), ids)

    def targets(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return h[:self.adj.num_rows]

    def propagate(self, h, norm: str, layer: int):
        return self.adj.spmm(norm, h)

    def attention(self, z, att_src, att_dst, layer: int, negative_slope: float = 0.2):
        return self.adj.attention(z, z[:self.adj.num_rows], att_src, att_dst, negative_slope)

    def node_sum(self, t):
        return t  # batch-norm statistics of the batch, as GAS's BatchNorm1d over the batch's rows


class Method(SubgraphMethod):
    class About(SubgraphMethod.About):
        approximates = "out-of-batch neighbours' rows from per-layer history tables (stale, no gradient)"
        claim = ("(Fey et al., ICML 2021) graphs too large for full-batch on one device: the device holds a batch, "
                 "the histories sit in host memory, accuracy close to full-batch")
        # = gas with batch_size: -1 (every cluster in one batch), to the dropout masks
        exact_control = {"name": "single"}

    #: One process whatever `workers` says (as `single`): pyg_autoscale trains on one device, with no data
    #: parallelism in the repository. Not a refusal of workers > 1: every registered method must compose
    #: with the default workers=2 (tests/benchmarks/test_method_configs.py) and the findings preset runs
    #: each at workers=2; the record says workers=1 and sweeps run it once per seed.
    single_process = True
    # No memory.checkpoint (the push is in the forward), no reduced precision, nothing crosses ranks.
    applies = frozenset({"kernel", "draws", "memory.offload"})

    @dataclass(frozen=True)
    class Options(SubgraphMethod.Options):
        # Defaults: small_benchmark/conf/model/gcn.yaml, Cora (CiteSeer: num_parts 24, batch_size 8)
        num_parts: int = option(40, "METIS clusters of the whole graph", ge=1)
        # steps per epoch = ceil(num_parts / batch_size)
        batch_size: int = option(10, "clusters per mini-batch, at most num_parts; -1: every cluster (the whole graph)",
                                 ge=1, also=(-1,))
        # epoch: exact eval-mode rows pushed into every table before each epoch (the authors' scripts:
        # their evaluation pushes); start: once, before the first epoch; none: zero tables at first
        fill_history: Literal["epoch", "start", "none"] = option(
            "epoch", "refresh the histories with exact eval-mode rows before every epoch, once at the start, or never")

        def check(self, run) -> None:
            if self.batch_size > self.num_parts:
                raise UserError(f"method.batch_size={self.batch_size} exceeds method.num_parts={self.num_parts}; "
                                f"use at most {self.num_parts} (or -1: every cluster)")

    @classmethod
    def check_partition(cls, run, partition_stats: dict) -> None:
        nodes = sum(partition_stats["nodes_per_rank"])
        if run.method.num_parts > nodes:
            raise UserError(f"method.num_parts={run.method.num_parts} exceeds the graph's {nodes} nodes; "
                            f"use at most {nodes}")

    def __init__(self, ctx):
        super().__init__(ctx)
        options, part = ctx.options, ctx.part
        self.num_parts = options.num_parts
        self.q = self.num_parts if options.batch_size == -1 else options.batch_size
        self.fill_mode = options.fill_history
        self.indptr, self.indices, self.deg = part.indptr.long(), part.indices.long(), part.deg
        clusters = metis_clusters(self.indptr.cpu(), self.indices.cpu(), self.num_parts, ctx.cfg.seed).to(ctx.device)
        self.members = torch.argsort(clusters, stable=True)  # cluster c: members[start[c]:start[c] + size[c]]
        self.size = torch.bincount(clusters, minlength=self.num_parts)
        self.start = torch.cumsum(self.size, 0) - self.size
        widths = {layer: width for layer, width in enumerate(self.input_widths()) if layer > 0}
        self.histories = Histories(part.num_local, widths, ctx.device, ctx.comm)
        self.fills = self.pulled_rows = self.skipped = 0
        self.peak_batch = [0, 0]  # the largest batch's |B|, |O|
        self._eval_batches = None

    def input_widths(self) -> list[int]:
        """Every layer's input width (layer 0: the features)."""
        cfg, part = self.ctx.cfg, self.ctx.part
        return [part.x.shape[1]] + [cfg.hidden] * (cfg.layers - 1)


    # ------------------------------------------------------------------ batches
    def steps_per_epoch(self) -> int:
        return math.ceil(self.num_parts / self.q)

    def begin_epoch(self, epoch: int) -> None:
        generator = self.ctx.draws.generator(self.members.device, "clusters", epoch)  # keyed by (seed, epoch)
        self.order = torch.randperm(self.num_parts, generator=generator, device=self.members.device)

    def batch_of(self, chosen: torch.Tensor) -> tuple[torch.Tensor, LocalAdjacency, torch.Tensor]:
        """(B, adjacency over [B | O], O) of the chosen clusters; B in ascending ids."""
        nodes = torch.sort(self.members[concat_ranges(self.start[chosen], self.size[chosen])]).values
        adj, outside = batch_adjacency(self.indptr, self.indices, self.deg, nodes, self.ctx.cfg.kernel)
        return nodes, adj, outside

    def sample(self, step: int):
        chosen = self.order[step * self.q:(step + 1) * self.q].to(self.members.device)
        return chosen, *self.batch_of(chosen)

    def fetch(self, sampled) -> Batch:
        chosen, nodes, adj, outside = sampled
        part = self.ctx.part
        self.peak_batch = max(self.peak_batch, [nodes.numel(), outside.numel()])
        self.pulled_rows += outside.numel()
        x = part.x.index_select(0, torch.cat([nodes, outside]))  # layer 0: exact features of B and O
        rows = part.train_mask.index_select(0, nodes).nonzero().flatten()
        weight = self.num_parts / (chosen.numel() * part.num_train_global)
        return Batch(GasAggregator(adj, nodes, outside, self.ctx.comm, self.histories), x, rows,
                     part.y.index_select(0, nodes.index_select(0, rows)), weight, adj.nnz)

    def batch_step(self, batch: Batch) -> float:
        if batch.rows.numel() == 0:  # small_benchmark/main.py's train(): `if mask.sum() == 0: continue`
            self.skipped += 1
            return 0.0
        return super().batch_step(batch)

    # ------------------------------------------------------------------ filling the histories
    def between_epochs(self, epoch: int) -> None:
        if self.fill_mode == "epoch" or (self.fill_mode == "start" and epoch == 0):
            self.fill()

    def eval_batches(self) -> list:
        """EvalSubgraphLoader's batches: groups of `batch_size` consecutive clusters, fixed."""
        if self._eval_batches is None:
            ids = torch.arange(self.num_parts, device=self.members.device)
            self._eval_batches = [self.batch_of(ids[i:i + self.q]) for i in range(0, self.num_parts, self.q)]
        return self._eval_batches

    @torch.no_grad()
    def fill(self) -> None:
        """`mini_inference`: layer by layer, every batch's in-batch outputs of layer l pushed into history
        l + 1 before layer l + 1 starts (so the rows are exact eval-mode rows), in eval mode."""
        ctx = self.ctx
        model, training = ctx.model, ctx.model.training
        model.eval()
        for layer in range(ctx.cfg.layers - 1):
            for nodes, adj, outside in self.eval_batches():
                if layer == 0:
                    h = ctx.part.x.index_select(0, torch.cat([nodes, outside]))
                else:
                    h = torch.cat([self.histories.pull(layer, nodes, "history_fill"),
                                   self.histories.pull(layer, outside, "history_fill")])
                out = model.block(h, GasAggregator(adj, nodes, outside, ctx.comm), layer)
                self.histories.push(layer + 1, nodes, out, "history_fill")
        model.train(training)
        self.fills += 1

    def probes(self) -> dict:
        return {**super().probes(), "history_bytes": self.histories.bytes(), "history_on": "host",
                "history_fills": self.fills, "pulled_rows": self.pulled_rows, "skipped_steps": self.skipped,
                "largest_batch": {"in_batch": self.peak_batch[0], "out_of_batch": self.peak_batch[1]}}

    # ------------------------------------------------------------------ the cost model's hooks
    class Cost(SubgraphMethod.Cost):
        #: The one-device choice on a large graph: GAS's own configs set the clusters per dataset, and its
        #: Cora defaults (40 clusters, 10 a batch) put a quarter of the graph in every batch.
        advise_variants = {"num_parts=1000": {"num_parts": 1000}}

        @classmethod
        def batch(cls, options, rank) -> tuple[float, float, float, float]:
            """(steps, in-batch nodes B, out-of-batch neighbours O, the batch's in-edges) of one step on the
            whole graph: `batch_size` of `num_parts` METIS clusters; O: the distinct other ends of the
            batch's cut edges (a cut into num_parts), drawn by degree among the nodes outside."""
            degrees = cost.degrees_of(rank)
            parts = options.num_parts
            chosen = parts if options.batch_size == -1 else options.batch_size
            n, e = degrees.nodes, degrees.edges
            share = chosen / parts
            leaving = e * share * degrees.cut(parts) * ((parts - chosen) / (parts - 1) if parts > 1 else 0.0)
            outside = sum(c * (1 - share) * (1 - math.exp(-leaving * d / e)) for d, c in degrees.histogram)
            return math.ceil(parts / chosen), n * share, outside, e * share

        @classmethod
        def shape(cls, options, model, rank):
            """Every layer reads B + O rows (layer 0 the features, later layers O from the histories),
            aggregates the batch's in-edges and writes B; the graph, features and histories (a table per
            layer >= 1) stay in host memory, the batch's inputs are copied to the device."""
            steps, inside, outside, edges = cls.batch(options, rank)
            layers = len(model.layers)
            tables = cost.degrees_of(rank).nodes * sum(cost.in_width(model, layer) for layer in range(1, layers))
            return cost.Shape(steps, (inside + outside,) * layers, (edges,) * layers, (inside,) * layers,
                              host_rows=inside + outside, host_bytes=tables * cost.FLOAT)

        @classmethod
        def traffic(cls, options, model, rank):
            """Host <-> device, per epoch: every step pulls O rows of each table and pushes B rows
            (`history_pull`, `history_push`); `fill_history=epoch` refreshes every table once (pushes of
            every node, pulls of every batch's B + O but the last layer's: `history_fill`)."""
            steps, inside, outside, _ = cls.batch(options, rank)
            layers, nodes = len(model.layers), cost.degrees_of(rank).nodes
            out = []
            for layer in range(1, layers):
                row = cost.in_width(model, layer) * cost.FLOAT
                out += [cost.Transfer("history_pull", layer, steps * outside * row, steps, 0, host=True),
                        cost.Transfer("history_push", layer, steps * inside * row, steps, 0, host=True)]
                if options.fill_history == "epoch":
                    pulled = steps * (inside + outside) if layer < layers - 1 else 0.0
                    out.append(cost.Transfer("history_fill", layer, (nodes + pulled) * row, 2 * steps, 0, host=True))
            return out
