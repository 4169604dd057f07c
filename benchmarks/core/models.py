"""GCN, GraphSAGE (mean), GAT and the graph-free MLP, written once against the aggregation interface
(aggregation.py). A method changes where neighbour rows come from, never the arithmetic here.

Initial parameters depend only on the seed (`build_model` seeds its own generator), so every method
and worker count starts from the same weights.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from benchmarks.base.errors import UserError, choose
from benchmarks.base.options import Options, option
from benchmarks.core.recompute import Recompute


def _glorot(*shape) -> nn.Parameter:
    w = torch.empty(*shape)
    nn.init.xavier_uniform_(w.view(-1, shape[-1]) if w.dim() > 2 else w)
    return nn.Parameter(w)


def _work(edges: int, width: int, rows: int, dense_flops: int, edge_ops: int = 0) -> dict:
    """One forward pass of a layer over a rank's rows, counted, not timed (the cost model's input):
    `edges` aggregated at `aggregate_width` features each, `rows` transformed, the dense FLOPs of the
    projections (2 per multiply-add), and `edge_ops` (GAT: the logits, softmax and weights of each
    edge and head)."""
    return {"edges": edges, "aggregate_width": width, "rows": rows, "dense_flops": dense_flops, "edge_ops": edge_ops}


class GCNLayer(nn.Module):
    """h' = Â (h W) + b with Â = D^-1/2 (A + I) D^-1/2 (self-loops are in the graph). W is applied
    before aggregating, as PyG's GCNConv does, so the halo carries the narrower output width."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.weight = _glorot(d_out, d_in)
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        self.exchange_width = d_out

    def exchange_needs_grad(self, first: bool) -> bool:
        return True

    def work(self, rows: int, edges: int) -> dict:
        d_out, d_in = self.weight.shape
        return _work(edges, d_out, rows, 2 * rows * d_in * d_out)

    def forward(self, h, agg, layer: int):
        out = agg.propagate_linear(h, self.weight, "gcn", layer)
        return out + self.bias if self.bias is not None else out


class SAGELayer(nn.Module):
    """h' = W_l mean_{u in N(v)} h_u + b + W_r h_v (PyG SAGEConv, mean). Because mean is linear,
    W_l is applied before aggregating when that narrows the rows (same math, less traffic)."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.lin_l = nn.Linear(d_in, d_out, bias=bias)
        self.lin_r = nn.Linear(d_in, d_out, bias=False)
        self.project_first = d_out < d_in
        self.exchange_width = min(d_in, d_out)

    def exchange_needs_grad(self, first: bool) -> bool:
        return self.project_first or not first

    def work(self, rows: int, edges: int, targets: float | None = None) -> dict:
        """`targets`: the rows written, where fewer than those read (a sampled block): lin_r runs on them."""
        d_out, d_in = self.lin_l.weight.shape
        targets = rows if targets is None else targets
        return _work(edges, self.exchange_width, rows, 2 * (rows + targets) * d_in * d_out)  # lin_l and lin_r

    def forward(self, h, agg, layer: int):
        if self.project_first:
            neigh = agg.propagate_linear(h, self.lin_l.weight, "mean", layer)
            neigh = neigh + self.lin_l.bias if self.lin_l.bias is not None else neigh
        else:
            neigh = self.lin_l(agg.propagate(h, "mean", layer))
        return neigh + self.lin_r(agg.targets(h, layer))


class GATLayer(nn.Module):
    """Multi-head GAT (Velickovic et al.; PyG GATConv without edge features): z = W h, attention
    logits LeakyReLU(a_src . z_u + a_dst . z_v), softmax over v's in-edges (self-loop included)."""

    def __init__(self, d_in: int, d_out: int, heads: int, concat: bool, negative_slope: float = 0.2,
                 bias: bool = True, attention_dropout: float = 0.0):
        super().__init__()
        self.heads, self.out_per_head, self.concat = heads, d_out, concat
        self.attention_dropout = attention_dropout
        self.negative_slope = negative_slope
        self.weight = _glorot(heads * d_out, d_in)
        self.att_src = _glorot(1, heads, d_out)
        self.att_dst = _glorot(1, heads, d_out)
        self.bias = nn.Parameter(torch.zeros(heads * d_out if concat else d_out)) if bias else None
        self.exchange_width = heads * d_out

    def exchange_needs_grad(self, first: bool) -> bool:
        return True

    def work(self, rows: int, edges: int) -> dict:
        width, d_in = self.weight.shape
        # the projection, then each row's two attention logits per head (a_src . z, a_dst . z)
        return _work(edges, width, rows, 2 * rows * d_in * width + 2 * 2 * rows * width, edge_ops=edges * self.heads)

    def forward(self, h, agg, layer: int):
        # the paper's dropout of the normalised coefficients, in training only
        drop = {"dropout": self.attention_dropout} if self.training and self.attention_dropout else {}
        out = agg.attention_linear(h, self.weight, self.heads, self.att_src, self.att_dst, layer, self.negative_slope,
                                   **drop)
        out = out.reshape(out.shape[0], self.heads * self.out_per_head) if self.concat else out.mean(1)
        return out + self.bias if self.bias is not None else out


class MLPLayer(nn.Module):
    """Features only: the graph-free reference that shows how much the graph is worth."""

    exchange_width = 0

    def __init__(self, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out, bias=bias)

    def exchange_needs_grad(self, first: bool) -> bool:
        return False

    def work(self, rows: int, edges: int) -> dict:
        d_out, d_in = self.lin.weight.shape
        return _work(0, 0, rows, 2 * rows * d_in * d_out)

    def forward(self, h, agg, layer: int):
        return self.lin(agg.targets(h, layer))


class BatchNorm(nn.Module):
    """Batch normalisation over every node of the graph, whichever rank holds it: the per-feature
    sums are added across ranks through the aggregator (`agg.node_sum`, differentiable), so exact
    methods stay exact. Evaluation uses the running statistics, identical on every rank."""

    def __init__(self, dim: int, momentum: float = 0.1, eps: float = 1e-5, recompute: Recompute | None = None):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.recompute = recompute or Recompute()  # the model's: a re-run block must not update the statistics
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, h, agg):
        if self.training:
            # Sums in float64: counts beyond 2^24 nodes and E[x^2] - E[x]^2 need the precision.
            d, f64 = h.shape[1], torch.float64
            sums = agg.node_sum(torch.cat([h.sum(0, dtype=f64), (h * h).sum(0, dtype=f64),
                                           torch.full((1,), h.shape[0], dtype=f64, device=h.device)]))
            n = sums[-1].detach()
            mean = sums[:d] / n
            var = (sums[d:2 * d] / n - mean * mean).clamp(min=0)
            mean, var = mean.to(h.dtype), var.to(h.dtype)
            if not self.recompute.active:  # a checkpointed block re-run in backward took its statistics already
                with torch.no_grad():
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_var.lerp_(var * (n / (n - 1).clamp(min=1)).to(h.dtype), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (h - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class GNN(nn.Module):
    """`checkpoint` (`memory.checkpoint`): `none` keeps every activation for backward; `layer` keeps
    each GNN layer's input and output and recomputes what the layer itself saves (aggregation,
    projections, attention) in backward; `all` keeps only each block's input and recomputes the whole
    block (dropout, layer, norm, activation)."""

    def __init__(self, layers: list[nn.Module], activation, dropout: float, norms: list[nn.Module] = (),
                 checkpoint: str = "none", precision: str = "fp32", offload: str = "none",
                 recompute: Recompute | None = None):
        super().__init__()
        # the rank's checkpointing state, handed to the model (benchmarks/core/recompute.py): active
        # while backward re-runs a checkpointed block
        self.recompute = recompute or Recompute()
        self.layers = nn.ModuleList(layers)
        self.norms = nn.ModuleList(norms)  # one per hidden layer, or none
        self.activation, self.dropout = activation, dropout
        self.checkpoint = choose("memory.checkpoint", checkpoint, CHECKPOINTS)
        self.autocast = PRECISIONS[choose("precision", precision, PRECISIONS)]
        self.offload = choose("memory.offload", offload, OFFLOADS)

    def forward(self, x, agg):
        training = self.training and torch.is_grad_enabled()
        mode = self.checkpoint if training else "none"
        h = x
        # `memory.offload=activations`: what backward keeps goes to pinned host memory as it is saved
        # and comes back when backward needs it (CUDA only: on CPU it is host memory already).
        offload = (torch.autograd.graph.save_on_cpu(pin_memory=True) if training and self.offload == "activations"
                   else contextlib.nullcontext())
        with offload, torch.autocast(x.device.type, dtype=self.autocast, enabled=self.autocast is not None):
            for i in range(len(self.layers)):
                if mode == "all":
                    h = recomputed(self.block, self.recompute, h, agg, i)
                else:
                    h = self.block(h, agg, i, checkpoint_layer=mode == "layer")
        return h.float()  # the loss and the evaluation read fp32 logits at every precision

    def block(self, h, agg, i: int, checkpoint_layer: bool = False):
        layer = self.layers[i]
        h = agg.dropout(h, self.dropout, self.training, i)
        h = recomputed(layer, self.recompute, h, agg, i) if checkpoint_layer else layer(h, agg, i)
        if i < len(self.layers) - 1:
            if self.norms:
                h = self.norms[i](h, agg)
            h = self.activation(h)
        return h

    def work(self, rows: int, edges: int) -> list[dict]:
        """Per layer, one forward pass over `rows` local rows whose in-edges number `edges` (halo
        sources included): what each layer aggregates and computes (`_work`). Backward is the cost
        model's business (about twice the dense work; the aggregation once more where gradients flow)."""
        return [layer.work(rows, edges) for layer in self.layers]

    def exchanges(self) -> list[tuple[int, bool]]:
        """Per layer: (width of the rows a halo exchange carries, whether they need gradients).
        Tests derive the analytic halo volume from this; 0 means the layer exchanges nothing."""
        return [(layer.exchange_width, layer.exchange_needs_grad(i == 0)) for i, layer in enumerate(self.layers)]


MODELS = ("gcn", "sage", "gat", "mlp")
CHECKPOINTS = ("none", "layer", "all")
# `precision`: the autocast dtype of the dense parts (projections, attention logits, activations;
# rows exchanged after a projection travel in it); aggregations run in fp32 (aggregation.py: CPU's
# sparse kernels have no bf16, and fp32 sums keep the degree normalisation exact). fp16's narrow range
# needs loss scaling (`RankContext.scaler`), which only the methods with `precision=fp16` in `Method.applies` apply.
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
OFFLOADS = ("none", "activations")


def recomputed(fn, recompute: Recompute, *args):
    """fn(*args) under activation checkpointing: what fn would save for backward is dropped and
    recomputed when backward needs it. The recompute runs with the rank's `Recompute` active (the one
    the model, its `Comm` and its aggregators were handed: benchmarks/core/recompute.py), so its
    communication is counted apart and aggregators replay rows they must not fetch twice; dropout
    draws the same masks (the RNG state is saved and restored)."""
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True,
                                             context_fn=lambda: (contextlib.nullcontext(), recompute.running()))


@dataclass(frozen=True)
class MemoryOptions(Options):
    """The `memory` section: activation checkpointing and offloading (models.GNN)."""

    checkpoint: Literal[CHECKPOINTS] = option(
        "none", "layer: recompute what each GNN layer saves for backward; all: recompute each whole block (dropout, "
                "layer, norm, activation). Exact: the same losses and gradients (tests/savers/test_checkpoint.py)")
    checkpoint_halo: Literal["refetch", "keep"] = option(
        "refetch", "in the recompute, exchange halo rows again (counted as `<category>_recompute`, e.g. "
                   "halo_fwd_recompute) or keep the forward's (no second exchange; their memory held). Stale tables, "
                   "posted exchanges, skip decisions and quantised rows are always replayed, never fetched twice")
    offload: Literal[OFFLOADS] = option(
        "none", "activations: what backward keeps goes to pinned host memory (save_on_cpu); device=cuda only")

    def check(self, run) -> None:
        if self.checkpoint_halo == "keep" and self.checkpoint == "none":
            raise UserError("memory.checkpoint_halo=keep applies to a recompute: set memory.checkpoint=layer or all")
        if self.offload == "activations" and run is not None:
            check_on_device("memory.offload=activations", run)


def check_on_device(setting: str, run) -> None:
    """A saver that moves device memory to the host needs a device (`run`: the top-level options)."""
    if run.device != "cuda":
        raise UserError(f"{setting} moves device memory to the host, so it needs device=cuda "
                        "(on cpu everything is in host memory already)")


@dataclass(frozen=True)
class ModelOptions(Options):
    """The `model` section's keys besides its name, one declaration for every model (a preset may set
    `model.heads` for a sweep over models; the models other than GAT ignore it)."""

    reserved: ClassVar[tuple[str, ...]] = ("name",)

    heads: int = option(4, "GAT's attention heads", ge=1)
    # SAR's GAT is DGL's GATConv(d_in, d_out, heads) with the heads averaged after every layer
    # (IntelLabs/SAR examples/train_homogeneous_graph_advanced.py, GNNModel), so its "hidden 128,
    # 4 heads" is 128 channels per head; PyG's and the GAT paper's hidden layers concatenate.
    heads_concat: bool = option(True, "GAT: true = hidden layers concatenate heads of hidden / heads channels, the "
                                      "output layer has one head; false = every layer has `heads` heads of full "
                                      "width (hidden, or the classes), averaged (DGL GATConv + mean, as SAR)")

    attention_dropout: float = option(
        0.0, "GAT: dropout of the normalised attention coefficients in training, keyed by edge (the GAT paper's "
             "0.6; PetarV-/GAT utils/layers.py `coef_drop`)", ge=0, lt=1)

    def check_for(self, model: str, hidden: int) -> None:
        """Checks that need the model's name (`config.check` calls it once the section is valid)."""
        if self.attention_dropout and model != "gat":
            raise UserError(f"model.attention_dropout applies to model=gat, not model={model}")
        if model == "gat" and self.heads_concat and hidden % self.heads:
            raise UserError(f"hidden={hidden} must be divisible by model.heads={self.heads} for GAT "
                            f"(each head has hidden / heads channels)")


#: `weight_decay_layers`: which parameters weight decay applies to (`decay_groups`).
DECAYED = ("all", "first", "all_but_last")


def decay_groups(model: GNN, weight_decay: float, which: str = "all") -> list[dict]:
    """The optimizer's parameter groups: weight decay on the parameters `which` names (`DECAYED`; a
    hidden layer's batch norm goes with its layer), none on the rest. Each group keeps the model's
    parameter order, so every rank's optimizer state lines up."""
    choose("weight_decay_layers", which, DECAYED)
    last = len(model.layers) - 1
    decayed = set()
    for name, p in model.named_parameters():
        parts = name.split(".")
        index = int(parts[1]) if parts[0] in ("layers", "norms") else None
        if (which == "all" or (which == "first" and index == 0)
                or (which == "all_but_last" and index is not None and index < last)):
            decayed.add(name)
    params = list(model.named_parameters())
    groups = [{"params": [p for n, p in params if n in decayed], "weight_decay": weight_decay},
              {"params": [p for n, p in params if n not in decayed], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_model(name: str, d_in: int, hidden: int, d_out: int, num_layers: int, dropout: float,
                seed: int, heads: int = 4, batch_norm: bool = False, checkpoint: str = "none",
                precision: str = "fp32", offload: str = "none", heads_concat: bool = True,
                attention_dropout: float = 0.0, recompute: Recompute | None = None) -> GNN:
    choose("model", name, MODELS)
    dims = [d_in] + [hidden] * (num_layers - 1) + [d_out]
    # A bias right before batch norm is cancelled by it (its gradient is zero up to rounding, which
    # Adam would blow up into full-size steps), so such layers have none.
    bias = [not batch_norm or i == num_layers - 1 for i in range(num_layers)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "gat" and not heads_concat:  # `model.heads_concat=false`: heads averaged everywhere
            layers = [GATLayer(dims[i], dims[i + 1], heads, False, bias=bias[i], attention_dropout=attention_dropout)
                      for i in range(num_layers)]
        elif name == "gat":
            if hidden % heads:
                raise UserError(f"hidden={hidden} must be divisible by model.heads={heads} for GAT")
            layers = [GATLayer(dims[i], hidden // heads, heads, True, bias=bias[i], attention_dropout=attention_dropout)
                      for i in range(num_layers - 1)] + [GATLayer(dims[-2], d_out, 1, False,
                                                                  attention_dropout=attention_dropout)]
        else:
            cls = {"gcn": GCNLayer, "sage": SAGELayer, "mlp": MLPLayer}[name]
            layers = [cls(dims[i], dims[i + 1], bias=bias[i]) for i in range(num_layers)]
        activation = F.elu if name == "gat" else F.relu
        recompute = recompute or Recompute()
        norms = [BatchNorm(hidden, recompute=recompute) for _ in range(num_layers - 1)] if batch_norm else []
        return GNN(layers, activation, dropout, norms, checkpoint, precision, offload, recompute)
