"""The models are the textbook layers: with the same weights, our GCN, SAGE and GAT compute what
PyTorch Geometric's GCNConv, SAGEConv and GATConv compute on the same graph, forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.core.aggregation import HaloAggregator
from benchmarks.core.datasets import load_dataset
from benchmarks.core.models import build_model
from benchmarks.core.partition import build_parts
from benchmarks.run.train import make_context


def run_config(*overrides: str):
    """The typed run config these overrides compose to (what a rank's context is built from)."""
    from benchmarks.commands.composition import config_of
    from benchmarks.run.config import check

    return check(config_of(list(overrides)))

pytestmark = pytest.mark.fast


class PygModel(torch.nn.Module):
    def __init__(self, convs, activation):
        super().__init__()
        self.convs, self.activation = torch.nn.ModuleList(convs), activation

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.activation(x)
        return x


def pyg_twin(name, ours):
    """A PyG model holding our model's weights (the graph already has its self-loops)."""
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv  # here, not at collection: PyG takes ~2.5 s to import

    convs = []
    for layer in ours.layers:
        if name == "gcn":
            conv = GCNConv(layer.weight.shape[1], layer.weight.shape[0], add_self_loops=False)
            conv.lin.weight.data.copy_(layer.weight.data)
        elif name == "sage":
            conv = SAGEConv(layer.lin_l.in_features, layer.lin_l.out_features, aggr="mean")
            conv.lin_l.load_state_dict(layer.lin_l.state_dict())
            conv.lin_r.load_state_dict(layer.lin_r.state_dict())
        else:
            conv = GATConv(layer.weight.shape[1], layer.out_per_head, heads=layer.heads, concat=layer.concat,
                           add_self_loops=False)
            conv.lin.weight.data.copy_(layer.weight.data)
            conv.att_src.data.copy_(layer.att_src.data)
            conv.att_dst.data.copy_(layer.att_dst.data)
        if name != "sage":  # SAGE's bias lives in lin_l
            conv.bias.data.copy_(layer.bias.data)
        convs.append(conv)
    return PygModel(convs, F.elu if name == "gat" else F.relu)


@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_layers_compute_what_pyg_computes(data_root, name):
    graph = load_dataset({"name": "citeseer"}, data_root)
    cfg = run_config(f"model={name}", "++model.heads=4", "hidden=32", "layers=3", "dropout=0.0", "seed=1", "lr=0.01",
                     "weight_decay=0.0")
    ctx = make_context(cfg, 0, 1, build_parts(graph, torch.tensor([0, graph.num_nodes]))[0], torch.device("cpu"))
    ours = ctx.model
    twin = pyg_twin(name, ours)

    out = ours(graph.x, HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute))
    ref = twin(graph.x, graph.edge_index())
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)

    out.square().sum().backward()
    ref.square().sum().backward()
    first_ours = ours.layers[0].weight.grad if name != "sage" else ours.layers[0].lin_l.weight.grad
    first_ref = twin.convs[0].lin.weight.grad if name != "sage" else twin.convs[0].lin_l.weight.grad
    torch.testing.assert_close(first_ours, first_ref, rtol=1e-3, atol=1e-4)


def test_initial_parameters_depend_only_on_the_seed():
    a = build_model("gat", 10, 8, 3, 3, 0.0, seed=5, heads=2)
    b = build_model("gat", 10, 8, 3, 3, 0.0, seed=5, heads=2)
    c = build_model("gat", 10, 8, 3, 3, 0.0, seed=6, heads=2)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_gat_heads_averaged_is_dgl_gatconv_with_mean(data_root):
    """`model.heads_concat=false` is SAR's GAT (DGL GATConv(d_in, d_out, heads), then the heads'
    mean, after every layer): each layer has `heads` heads of the full width, averaged, which is
    PyG's GATConv(concat=False)."""
    graph = load_dataset({"name": "citeseer"}, data_root)
    # 30: not divisible by 4, which only concatenation needs
    cfg = run_config("model=gat", "model.heads=4", "++model.heads_concat=false", "hidden=30", "layers=3",
                     "dropout=0.0", "seed=1", "lr=0.01", "weight_decay=0.0")
    ctx = make_context(cfg, 0, 1, build_parts(graph, torch.tensor([0, graph.num_nodes]))[0], torch.device("cpu"))
    ours = ctx.model
    assert [(m.heads, m.out_per_head, m.concat) for m in ours.layers] == [(4, 30, False), (4, 30, False),
                                                                           (4, graph.num_classes, False)]
    assert [w for w, _ in ours.exchanges()] == [120, 120, 4 * graph.num_classes]
    twin = pyg_twin("gat", ours)
    out = ours(graph.x, HaloAggregator(ctx.adj, ctx.plan, ctx.comm, recompute=ctx.recompute))
    torch.testing.assert_close(out, twin(graph.x, graph.edge_index()), rtol=1e-4, atol=1e-5)
    concat = build_model("gat", 10, 8, 3, 3, 0.0, seed=5, heads=2)
    assert [(m.heads, m.out_per_head, m.concat) for m in concat.layers] == [(2, 4, True), (2, 4, True), (1, 3, False)]
