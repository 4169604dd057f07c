"""`pyg_plain`: a plain PyTorch Geometric full-batch training loop, the external anchor.

GCNConv / SAGEConv (mean) layers, dropout before each, ReLU between, Adam, cross-entropy over the
training nodes, the whole graph's `edge_index` in one process: what a user writes from PyG's
examples. It runs through the suite's runtime (same graph, timing, memory probe, evaluation and
record), so its numbers sit in the same tables as `single`'s; its own layers replace the suite's
model. It ignores `workers`. GAT, the MLP and batch norm are refused: the anchor is the two
convolutions the runtime study compares."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmarks.base.errors import UserError
from benchmarks.core.graph import edge_rows
from benchmarks.run.method import Method as MethodBase
from benchmarks.run.method import RankContext, loss_share


class PygNet(torch.nn.Module):
    """The layers over one fixed graph; `forward(x, agg)` ignores `agg`, so the runtime's shared
    evaluation can call it like the suite's models (the part is the whole graph here)."""

    def __init__(self, convs: torch.nn.ModuleList, edge_index: torch.Tensor, dropout: float):
        super().__init__()
        self.convs, self.edge_index, self.dropout = convs, edge_index, dropout

    def forward(self, x: torch.Tensor, agg=None) -> torch.Tensor:
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(F.dropout(h, self.dropout, self.training), self.edge_index)
            if i < len(self.convs) - 1:
                h = F.relu(h)
        return h


class Method(MethodBase):
    class About(MethodBase.About):
        claim = "description: the external anchor, what a user writes from PyG's examples"

    single_process = True
    builds_model = False
    # None of the savers: PyG's layers run outside the suite model (its autocast, checkpointing and
    # kernels), and one process sends nothing.
    applies = frozenset()

    @dataclass(frozen=True)
    class Options(MethodBase.Options):
        def check(self, run) -> None:
            if run is None:
                return
            if run.model_name not in ("gcn", "sage"):
                raise UserError(f"pyg_plain runs model=gcn or model=sage (PyG's GCNConv/SAGEConv), not "
                                f"model={run.model_name}")
            if run.batch_norm:
                raise UserError("pyg_plain has no batch norm; use batch_norm=false")
            if run.weight_decay_layers != "all":
                raise UserError(f"pyg_plain decays every parameter of PyG's network; drop "
                                f"weight_decay_layers={run.weight_decay_layers}")

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        from torch_geometric.nn import GCNConv, SAGEConv

        cfg, part = ctx.cfg, ctx.part
        # In-edge CSR -> edge_index (source, destination); one process, so every column is a node.
        edge_index = torch.stack([part.indices.long(), edge_rows(part.indptr)])
        dims = [part.x.shape[1]] + [cfg.hidden] * (cfg.layers - 1) + [part.num_classes]
        torch.manual_seed(cfg.seed)
        if cfg.model_name == "gcn":  # the graph has its self-loops; cache the normalisation, as users do
            convs = [GCNConv(dims[i], dims[i + 1], add_self_loops=False, cached=True) for i in range(cfg.layers)]
        else:
            convs = [SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(cfg.layers)]
        self.net = PygNet(torch.nn.ModuleList(convs), edge_index, cfg.dropout).to(ctx.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def train_epoch(self, epoch: int) -> torch.Tensor:
        self.straggle()
        self.net.train()
        part = self.ctx.part
        mask = part.train_mask
        loss = loss_share(self.net(part.x)[mask], part.y[mask], total=part.num_train_global)  # the mean: one process
        self.optimize(loss, sync=None, optimizer=self.optimizer)
        return loss.detach()

    def evaluation_model(self) -> torch.nn.Module:
        return self.net
