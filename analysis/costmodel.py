"""The cost model: a method's epoch time and per-rank training memory on a hardware profile, from
counts alone. Nothing here is fitted to the times or memory it is checked against: the inputs are
per-layer work (`benchmarks.core.models.GNN.work`), what each method moves per epoch as its plugin states it
(the cost-model hooks of `benchmarks.run.method.Method`: `traffic`, `layer0_mode`, `kept_halo_rows`,
`stale_table_bytes`, counted with `benchmarks.base.traffic`), partition statistics per rank and a
profile's rates (`benchmarks.tools.hardware`). No method is named here: plugins are reached through the
registry (`benchmarks.run.method.method_class`, which resolves an alias to its plugin).

Time of one rank's training epoch, each term named as in `projection.json`:

    dense       = forward + backward GEMM FLOPs / dense_flops        (backward = 2 x forward, 1 x in layer 0),
                  each product at the rate of its inner width (`gemm_time_factor`)
    aggregate   = edges x width x 4 bytes / gather_bandwidth         (again in backward where gradients flow)
    attention   = GAT layers: edges x heads / attention_rate (the suite's kernel calibrated, forward and
                  backward, at the layer's channels per head); without it, GAT layers are priced as
                  `aggregate` plus per-edge passes in `elementwise`
    elementwise = bytes of dropout, bias, activation, [local | halo] copies, edge softmax / memory_bandwidth
    dropout     = elements through dropout's forward / dropout_rate (calibrated: a CPU's generator and
                  mixed-type multiply are far below the streaming bandwidth); backward is elementwise
    optimizer_step = Adam's bytes per parameter / memory_bandwidth
    exchange    = per operation: messages x latency + bytes / bandwidth (intra- or inter-node by the share
                  of peers on other nodes)
    allreduce   = ring: 2 (P - 1) latency + 2 (P - 1) / P x gradient bytes / bandwidth
    hidden_exchange = the traffic a method overlaps with compute (PipeGCN, DIGEST's posted syncs,
                  SAR's prefetched rounds, AdaQP's central aggregation), priced like `exchange`
    overlap     = - min(hidden_exchange, the compute terms above): what compute hides of it

Compute rates are a unit's (a GPU, or a CPU node's pooled cores) divided by the ranks sharing it; on a
CPU node loopback transfers are copies by those same cores, so bandwidth is shared the same way. The
epoch takes the slowest rank's time.

Memory of one rank's training working set (what training adds to a loaded rank's data, the records'
`train_data_delta_bytes`: their RSS delta less the library code first run in training): activations
kept for backward per layer, the halo rows each layer keeps (`kept_halo_rows`), the largest layer's
backward transient, the tables of earlier epochs' rows (`stale_table_bytes`), gradients and Adam's two
moments. `static` (graph structure, features, parameters) is added for comparisons with a published
peak per machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from benchmarks.base.traffic import FLOAT, INDEX, Rank, Shape, Transfer, in_width, out_width, parameters

#: Bytes moved per element by the elementwise steps of a layer (fp32 4, mask 1), counted from the
#: suite's code: dropout (`aggregation.dropout`: compare the draws, multiply by the mask, then by
#: 1 / (1 - p)) forward 4 + 5 + 9 + 8 (where `dropout_rate` is not calibrated) and backward (mask,
#: scale) 9 + 8; bias and activation forward 8 + 8, backward 12 + 4; the [local | halo] copy of the
#: sources, read and written.
DROPOUT_FORWARD, DROPOUT_BACKWARD = 26, 17
OUTPUT_FORWARD, OUTPUT_BACKWARD = 16, 16
COPY = 8
#: Adam's step per parameter (torch.optim.Adam, one tensor at a time): weight decay, the two moments'
#: lerp / mul / addcmul, sqrt, div, add, addcdiv: 88 bytes read and written.
ADAM_STEP = 88
#: Per edge and head, GAT's forward touches the source and target logits, the LeakyReLU, the exp,
#: the normaliser and the weight (six fp32 passes); backward twice that.
EDGE_PASSES = 6

@dataclass
class Projection:
    time_terms: dict = field(default_factory=dict)    # seconds per term, the slowest rank's
    memory_terms: dict = field(default_factory=dict)  # bytes per term, the largest rank's
    traffic: list = field(default_factory=list)       # the slowest rank's Transfers

    @property
    def epoch_s(self) -> float:
        return sum(self.time_terms.values())

    @property
    def train_mem_bytes(self) -> float:
        return sum(v for k, v in self.memory_terms.items() if k not in ("static", "host"))


# ---------------------------------------------------------------- the plugins' hooks

#: The first failure of each plugin this process met (`PluginFailed`), by method: `python -m analysis`
#: goes on with the other methods and ends with status 1 when there is any. Commands empty it.
FAILED: dict[str, str] = {}


class PluginFailed(Exception):
    """A plugin raised, importing it or in one of its hooks: one line naming the method, its plugin's
    file, the error and where (`benchmarks.run.method.plugin_failure`), kept in `FAILED`. Callers that
    go over many methods catch it and set the line in that method's row; any other error stays the
    suite's own."""

    def __init__(self, name: str, error: BaseException, asked: str):
        from benchmarks.run.method import plugin_failure
        super().__init__(plugin_failure(name, error, asked))
        FAILED.setdefault(name, str(self))


def asking(name: str, asked: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, a question to the plugin of method `name` (`asked`: which, for the line):
    whatever it raises becomes `PluginFailed`, but a `UserError` (an option value it refuses)."""
    from benchmarks.base.errors import UserError
    try:
        return fn(*args, **kwargs)
    except (UserError, PluginFailed):
        raise
    except Exception as e:  # the plugin's own failure: reported as its, never as everyone's
        raise PluginFailed(name, e, asked) from e


def plugin(method):
    """The plugin class of `method`: a registered name (an alias resolves to its plugin, through the
    registry: `benchmarks.run.method.method_class`) or the class itself. `PluginFailed` where the
    plugin fails to import."""
    if isinstance(method, str):
        from benchmarks.run.method import method_class
        return asking(method, "its import", method_class, method)
    return method


def hooks(cls) -> "_Hooks":
    """The `Cost` hooks of plugin class `cls`, each call guarded (`asking`): `hooks(cls).traffic(...)`."""
    return _Hooks(cls)


class _Hooks:
    def __init__(self, cls):
        self.cls = cls

    def __getattr__(self, hook: str):
        value = getattr(self.cls.Cost, hook)
        if not callable(value):
            return value
        name = self.cls.__module__.rpartition(".")[2]
        return lambda *args, **kwargs: asking(name, f"its Cost.{hook}", value, *args, **kwargs)


def typed_options(cls, values):
    """A record's `config.method` (or any dict of option values) as `cls`'s validated `Options`: keys
    the plugin does not declare (its name, an alias's plugin, options since removed) are dropped,
    and options a row does not state take the plugin's defaults. Typed options pass through.
    UserError for a value the plugin refuses."""
    if not isinstance(values, dict):
        return values
    import dataclasses

    from benchmarks.base.options import validate
    declared = {f.name for f in dataclasses.fields(cls.Options)}
    return asking(cls.__module__.rpartition(".")[2], "its Options", validate, cls.Options,
                  {k: v for k, v in values.items() if k in declared})


def why_not_modelled(method: str) -> str | None:
    """Why the model leaves `method` out (no plugin of that name, a plugin that fails to import or to
    answer, or one that states no traffic: `Method.Cost.states_traffic`), or None."""
    from benchmarks.base.errors import UserError
    try:
        cls = plugin(method)
        if hooks(cls).states_traffic():
            return None
    except UserError:
        return f"no plugin or alias named {method}"
    except PluginFailed as e:  # left out with its failure, and counted in FAILED
        return str(e)
    return f"{method} is not modelled: {cls.Cost.not_modelled}"


def traffic(method, options, model, rank: Rank) -> list[Transfer]:
    """What `method` (a name or plugin class) moves for one rank per epoch with `options` (a dict
    of option values or the plugin's typed `Options`): its plugin's `traffic` hook. Halo rows are
    counted where they arrive (a rank's halo), so summed over ranks they equal the bytes the records
    count where they are sent."""
    cls = plugin(method)
    moved = hooks(cls).traffic(typed_options(cls, options), model, rank) if hooks(cls).states_traffic() else None
    if moved is None:
        raise ValueError(f"the cost model has no traffic for {getattr(cls, '__module__', cls)}: "
                         f"{cls.Cost.not_modelled}")
    return moved


# ---------------------------------------------------------------- the profile's rates at P ranks

def ranks_per_unit(profile, workers: int) -> float:
    """Ranks sharing one compute unit: a GPU per rank, or a CPU node's cores pooled by its ranks."""
    on_node = min(workers, profile.ranks_per_node)
    return max(1.0, on_node / profile.units_per_node)


RATES = {"dense": ("dense_flops", "dense_flops_fp32"), "aggregate": ("gather_bandwidth", "gather_bandwidth"),
         "elementwise": ("memory_bandwidth", "memory_bandwidth"), "dropout": ("dropout_rate", "dropout_rate"),
         "attention": ("attention_rate", "attention_rate"), "sampling": ("sampler_rate", "sampler_rate"),
         "subgraph": ("subgraph_rate", "subgraph_rate")}
#: The compute terms (what overlapped traffic can hide behind).
COMPUTE = ("dense", "aggregate", "attention", "elementwise", "dropout", "optimizer_step", "sampling")


def width_efficiency(profile, width: int) -> float:
    """A GEMM's rate at this inner width (the dimension it sums over) relative to `dense_flops` (the
    profile's calibrated `dense_width_efficiency`, interpolated on log2 width and held at its ends; 1
    without one). Measured on this machine, the inner width sets a narrow product's rate and the
    output width hardly does: 200000 rows of 128 into 64 columns run at 90 GFLOP/s, of 64 into 64 at
    67, of 64 into 256 at 70, of 3703 into 64 at 123 (`python -m benchmarks.tools.kernels --gemm`;
    docs/projection.md, "The GEMM's rate")."""
    table = sorted((int(w), float(e)) for w, e in (getattr(profile, "dense_width_efficiency", None) or {}).items())
    if not table:
        return 1.0
    if width <= table[0][0]:
        return table[0][1]
    for (w0, e0), (w1, e1) in zip(table, table[1:]):
        if width <= w1:
            t = math.log2(width / w0) / math.log2(w1 / w0)
            return e0 + t * (e1 - e0)
    return table[-1][1]


def gemm_time_factor(profile, d_in: int, d_out: int, rows: int, input_gradient: bool) -> float:
    """A layer's forward GEMM FLOPs times this is its forward and backward GEMMs' FLOPs at the rate of
    `dense_flops`: the forward sums over the input width, the weight's gradient over the rows, the
    input's gradient (past layer 0) over the output width, each at its inner width's rate
    (`width_efficiency`)."""
    factor = 1 / width_efficiency(profile, d_in) + 1 / width_efficiency(profile, rows)
    return factor + (1 / width_efficiency(profile, d_out) if input_gradient else 0.0)


def rank_rate(profile, workers: int, term: str, channels: int | None = None) -> float:
    """The rate one rank computes `term` at. A GPU rank has its unit's rate (divided if ranks share
    a unit). On a CPU node with a `single_thread` calibration, each of P ranks runs cores // P
    threads (at least 1, as the launcher sets them) and ranks beyond the cores time-share them;
    without one, the node's rate is split evenly. `attention` is read at `channels` per head."""
    unit_key, thread_key = RATES[term]
    if getattr(profile, unit_key, None) is None:
        from benchmarks.base.errors import UserError
        raise UserError(f"hardware profile {profile.name} has no {unit_key}, which the sampled families need "
                        "(python -m benchmarks.tools.calibrate --sampler measures this machine's)")
    rate = profile.dense_flops["fp32"] if term == "dense" else getattr(profile, unit_key)
    single = getattr(profile, "single_thread", None)
    on_node = min(workers, profile.ranks_per_node)
    cores = getattr(profile, "cores", None)
    if profile.device != "cpu" or on_node == 1 or not (single and cores and single.get(thread_key)):
        return _at(rate, channels) / ranks_per_unit(profile, workers)
    threads = max(1, cores // on_node)
    return _at(single[thread_key], channels) * threads * min(1.0, cores / (on_node * threads))


def _at(rate, channels: int | None) -> float:
    """A rate, or a table of rates by channels per head read at `channels`: time per edge-head is
    taken as linear in the channels between the measured ones, held at the narrowest."""
    if not isinstance(rate, dict):
        return rate
    table = sorted((int(c), float(r)) for c, r in rate.items())
    if channels <= table[0][0] or len(table) == 1:
        return table[0][1]
    (c0, r0), (c1, r1) = table[0], table[-1]
    seconds = 1 / r0 + (channels - c0) * (1 / r1 - 1 / r0) / (c1 - c0)
    return 1 / seconds


class Links:
    """Transfers of one rank among `workers`: peers on its node go over `intra_node`, the others over
    `inter_node` (the share of peers on other nodes, traffic spread evenly over peers), both links
    at once. On a CPU node loopback transfers are copies by the cores, so ranks beyond the cores
    slow them down in proportion."""

    def __init__(self, profile, workers: int):
        self.workers = workers
        on_node = min(workers, profile.ranks_per_node)
        self.remote = 0.0 if workers <= 1 else (workers - on_node) / (workers - 1)
        self.intra, self.inter = profile.intra_node, profile.inter_node
        cores = getattr(profile, "cores", None) or 1
        self.slowdown = max(1.0, min(workers, profile.ranks_per_node) / cores) if profile.device == "cpu" else 1.0

    def transfer(self, nbytes: float, messages: float) -> float:
        r = self.remote
        latency = messages * ((1 - r) * self.intra["latency"] + r * self.inter["latency"])
        streaming = max((1 - r) * nbytes / self.intra["bandwidth"], r * nbytes / self.inter["bandwidth"])
        return latency + streaming * self.slowdown

    def ring_allreduce(self, nbytes: float) -> float:
        """Ring all-reduce: 2 (P - 1) steps, each moving 1/P of the tensor over the slowest link."""
        p = self.workers
        if p == 1:
            return 0.0
        link = self.inter if self.remote else self.intra
        return 2 * (p - 1) * link["latency"] + 2 * (p - 1) / p * nbytes / link["bandwidth"] * self.slowdown


# ---------------------------------------------------------------- time and memory of one rank

def rank_terms(method, options, model, rank: Rank, workers: int, profile) -> Projection:
    """Epoch time and training memory of one rank. `method`: a name or plugin class; `options`: a
    dict of option values or the plugin's typed `Options`; `model`: a built `benchmarks.core.models.GNN`
    (its layers' `work`, `exchanges` and parameters are the model's counts). A plugin that states a
    step `Shape` (the sampled families) is priced step by step: its layers on the step's rows and
    edges, times the steps of an epoch, with the sampler's edges and, on a GPU, the input rows
    copied from host memory."""
    cls = plugin(method)
    options = typed_options(cls, options)
    stepped = step_shape(cls, options, model, rank, workers)
    shape, precomputed, batch = stepped
    halo = 0.0 if batch else rank.halo  # the halo rows a layer concatenates to its own (none in a batch)
    exchanges = model.exchanges()

    dense = aggregate = elementwise = dropped = attention = 0.0
    for layer, (width, grad) in enumerate(exchanges):
        m = model.layers[layer]
        edges = 0 if precomputed and layer == 0 else shape.edges[layer]
        w = m.work(shape.rows[layer], edges, targets=shape.out[layer]) if hasattr(m, "lin_r") else \
            m.work(shape.rows[layer], edges)
        n = shape.out[layer]
        dense += w["dense_flops"] * gemm_time_factor(profile, in_width(model, layer), out_width(model, layer), n,
                                                     input_gradient=layer > 0)
        heads = getattr(model.layers[layer], "heads", None)
        if heads and getattr(profile, "attention_rate", None):
            # GAT's logits, edge softmax and weighted sum, forward and backward: the suite's kernel, calibrated
            attention += w["edges"] * heads / rank_rate(profile, workers, "attention", width // heads)
        else:
            aggregate += w["edges"] * w["aggregate_width"] * FLOAT * (2 if grad else 1)
            elementwise += w["edge_ops"] * FLOAT * EDGE_PASSES * 3
        d_in, d_out = in_width(model, layer), out_width(model, layer)
        if model.dropout:
            dropped += shape.rows[layer] * d_in
            elementwise += n * d_in * (DROPOUT_BACKWARD if layer else 0)
        elementwise += n * d_out * (OUTPUT_FORWARD + OUTPUT_BACKWARD)
        elementwise += (n + halo) * width * COPY * (2 if grad else 1)
    if precomputed and model.dropout:
        dropped += shape.out[0] * in_width(model, 0)  # a second mask in layer 0: on A x, beside the model's on x
    if shape.gathered:  # the step's input rows gathered into one tensor
        elementwise += shape.rows[0] * in_width(model, 0) * COPY
    params = parameters(model)
    dropout_rate = getattr(profile, "dropout_rate", None)
    steps = shape.steps
    time_terms = {"dense": steps * dense / rank_rate(profile, workers, "dense"),
                  "aggregate": steps * aggregate / rank_rate(profile, workers, "aggregate"),
                  "attention": steps * attention,
                  "elementwise": steps * elementwise / rank_rate(profile, workers, "elementwise"),
                  # dropout's forward: calibrated on a CPU (its generator is compute-bound); elsewhere
                  # the bytes it reads and writes
                  "dropout": steps * (dropped / rank_rate(profile, workers, "dropout") if dropout_rate
                                      else dropped * DROPOUT_FORWARD / rank_rate(profile, workers, "elementwise")),
                  "optimizer_step": steps * params * ADAM_STEP / rank_rate(profile, workers, "elementwise"),
                  # the sampler's draws and the induced subgraphs' scans, on the host's cores (calibrated:
                  # `sampler_rate` and `subgraph_rate`, edges a second)
                  "sampling": steps * ((shape.sampled_edges / rank_rate(profile, workers, "sampling")
                                        if shape.sampled_edges else 0.0)
                                       + (shape.subgraph_edges / rank_rate(profile, workers, "subgraph")
                                          if shape.subgraph_edges else 0.0))}

    moved = traffic(cls, options, model, rank) if workers > 1 or cls.single_process else []
    links = Links(profile, workers)
    exchange = hidden = allreduce = 0.0
    host = steps * shape.host_rows * in_width(model, 0) * FLOAT if shape.on_host else 0.0
    host_seconds = 0.0
    for t in moved:
        if t.collective:
            allreduce += t.calls * links.ring_allreduce(t.bytes / t.calls) if t.calls else 0.0
            continue
        if t.host:
            host_seconds += host_link(profile, t.bytes, t.calls)
            continue
        seconds = links.transfer(t.bytes, t.messages)
        exchange += 0 if t.hidden else seconds
        hidden += seconds if t.hidden else 0
    # a GPU's inputs and host tables cross the host link; a CPU rank's are already in its memory
    time_terms["host_copy"] = host_seconds + (host_link(profile, host, steps) if profile.device != "cpu" else 0.0)
    time_terms["exchange"], time_terms["allreduce"] = exchange, allreduce
    compute = sum(time_terms[t] for t in COMPUTE)
    # hidden traffic costs what the compute cannot cover
    time_terms["hidden_exchange"] = hidden
    time_terms["overlap"] = -min(hidden, compute)

    return Projection(time_terms, _memory(cls, options, model, rank, workers, stepped)[0], moved)


def host_link(profile, nbytes: float, calls: float) -> float:
    """Seconds to move `nbytes` between host memory and a rank's device in `calls` copies: the
    profile's `host_link` (PCIe, NVLink-C2C); a CPU rank's copies run at its memory bandwidth."""
    link = getattr(profile, "host_link", None) or {"bandwidth": profile.memory_bandwidth, "latency": 0.0}
    return calls * link["latency"] + nbytes / link["bandwidth"]


def step_shape(cls, options, model, rank: Rank, workers: int) -> tuple[Shape, bool, bool]:
    """One step of the rank's epoch: its plugin's `shape`, or the whole part once an epoch, after
    layer 0's treatment (`layer0_mode`): the halo's inputs transformed here too where they are
    fetched once, no aggregation where A x is precomputed (GAT's `precomputed` is `cached`). With
    whether it is, and whether the plugin stated the step (a batch)."""
    shape = hooks(cls).shape(options, model, rank)
    if shape is not None:
        return shape, False, True
    layers = len(model.layers)
    rows = [rank.nodes] * layers
    mode = hooks(cls).layer0_mode(options)
    precomputed = mode == "precomputed" and not hasattr(model.layers[0], "heads")
    if mode != "exchanged" and not precomputed and workers > 1:
        rows[0] = rank.nodes + rank.halo
    return (Shape(1, tuple(rows), (rank.edges,) * layers, (rank.nodes,) * layers, on_host=False, gathered=False),
            precomputed, False)


def memory_terms(method, options, model, rank: Rank, workers: int) -> dict:
    """One rank's memory, in bytes per term: its training working set (what the records call
    `train_data_delta_bytes`), `static`, what the loaded rank holds on its device before training, and
    `host`, what it holds in host memory (a sampled family's graph, features, cache and tables, kept
    there as DistDGL and GAS keep them). Needs no profile (`method` and `options` as `rank_terms`
    takes them)."""
    return _memory(method, options, model, rank, workers)[0]


def _memory(method, options, model, rank: Rank, workers: int, stepped: tuple | None = None
            ) -> tuple[dict, list[float], list[float]]:
    """`memory_terms`, with what autograd keeps of each layer and the rows each layer holds
    (`stepped`: the rank's `step_shape`, where the caller has it)."""
    cls = plugin(method)
    options = typed_options(cls, options)
    shape, _, batch = stepped or step_shape(cls, options, model, rank, workers)
    shape = shape.largest or shape
    rows = list(shape.rows)
    exchanges = model.exchanges()
    layers = len(exchanges)
    structure = hooks(cls).held_structure(options, rank)
    # rows a layer keeps beyond its outputs: the halo (`kept_halo_rows`), or a block's other sources
    kept = [rows[layer] - shape.out[layer] if batch else hooks(cls).kept_halo_rows(options, rank)
            for layer in range(layers)]
    # the edges a rank aggregates over are those it holds: GAT's per-edge softmax terms scale with them
    # (tensor parallelism runs the softmax over every edge of the graph on every rank)
    edges = list(shape.edges) if batch else [structure[1]] * layers
    retained = [_kept_for_backward(model, layer, rows[layer], kept[layer], edges[layer],
                                   shape.out[layer] if batch else None) for layer in range(layers)]
    kernel = kernel_of(model)
    # the peak is the larger of: a forward dropout's draw on top of the earlier layers' activations
    # (`spmm`: uniform draws, mask and product, 9 bytes an element; `native`: the product alone; wide
    # input features set it), or backward's first step on top of them all: the gradients of the
    # layer's output, its input and its [local | kept halo] sources; `messages` adds a linear
    # aggregation's gathered and scaled E x width messages to either (freed after the layer)
    draw = 0 if not model.dropout else FLOAT if kernel == "native" else FLOAT + 1 + FLOAT
    forward = max(sum(retained[:layer]) + rows[layer] * in_width(model, layer) * draw
                  + _messages(model, layer, shape.edges[layer]) for layer in range(layers))
    backward = max(shape.out[layer] * (out_width(model, layer) + (in_width(model, layer) if layer else 0)) * FLOAT
                   + (shape.out[layer] + kept[layer]) * exchanges[layer][0] * FLOAT
                   + _messages(model, layer, shape.edges[layer]) for layer in range(layers))
    activations = sum(retained)
    transient = max(forward - activations, backward)
    stale = hooks(cls).stale_table_bytes(options, model, rank)  # earlier epochs' rows (and gradients) kept
    params = parameters(model)
    terms = {"activations": activations, "backward_transient": transient, "stale_tables": stale,
             "optimizer": 3 * params * FLOAT}  # gradients and Adam's two moments
    if batch:
        # the step's gathered input rows and its blocks (CSR columns, weights, row pointers)
        terms["batch"] = ((rows[0] * in_width(model, 0) * FLOAT if shape.gathered else 0)
                          + sum(e * (INDEX + FLOAT) + (o + 1) * INDEX for e, o in zip(shape.edges, shape.out)))
    static = _static_bytes(model, rank, params, structure)
    if batch and shape.on_host:
        terms["static"], terms["host"] = params * FLOAT, static - params * FLOAT + shape.host_bytes
    else:
        terms["static"] = static + shape.host_bytes
    return terms, retained, rows


def kernel_of(model) -> str:
    """The aggregation kernel a model's run uses (`projection` sets `model.kernel` from the record's
    config; `spmm`, torch's, where nothing says: records from before `native`, and CUDA runs)."""
    return getattr(model, "kernel", "spmm")


def _kept_for_backward(model, layer: int, rows: float, halo: float, edges: float, out: float | None = None) -> float:
    """Bytes autograd keeps of `layer` until backward (counted with saved-tensor hooks on the suite's
    layers): the dropped-out input (a linear layer's weight gradient needs it; without dropout it is
    the previous layer's output or the features, no new tensor) and, past layer 0, dropout's one-byte
    mask (not under `native`, which re-derives it); SAGE aggregating before
    projecting keeps the aggregate; every layer but the last keeps its activation's output. GAT keeps
    its projected sources, local and the kept halo, and per edge and head four floats (`spmm`: logits,
    LeakyReLU input, softmax weights, normaliser view), one (`native`'s fused softmax: the weights) or,
    under `messages`, also the gathered E x H x C source rows. A linear aggregation (GCN, SAGE) keeps
    no sources: its gradient needs only the adjacency. `out`: the rows it writes (`rows` unless a
    sampled block's destinations are fewer than its sources)."""
    m = model.layers[layer]
    out = rows if out is None else out
    kernel = kernel_of(model)
    d_in, d_out, width = in_width(model, layer), out_width(model, layer), m.exchange_width
    # without dropout the layer's input is the previous layer's activation (kept below) or the
    # features (static): the same tensor, not another
    kept = rows * d_in * FLOAT + (rows * d_in if layer and kernel != "native" else 0) if model.dropout else 0
    if getattr(m, "project_first", True) is False:
        kept += rows * width * FLOAT
    if layer < len(model.layers) - 1:
        kept += out * d_out * FLOAT
    if hasattr(m, "heads"):
        kept += (out + halo) * width * FLOAT + (1 if kernel == "native" else 4) * edges * m.heads * FLOAT
        if kernel == "messages":
            kept += edges * width * FLOAT
    return kept


def _messages(model, layer: int, edges: float) -> float:
    """`messages`' transient in a linear aggregation (GCN, SAGE): every edge's gathered source row and
    its scaled copy, E x width floats each, alive until the scatter-add ends (in forward, and again
    for the gradient in backward). Other kernels and attention (whose messages are kept) add none."""
    m = model.layers[layer]
    if kernel_of(model) != "messages" or hasattr(m, "heads"):
        return 0.0
    return 2 * edges * m.exchange_width * FLOAT


def _static_bytes(model, rank: Rank, params: int, structure: tuple[float, float] | None = None) -> float:
    """What a loaded rank holds before training: the structure it holds (`Method.held_structure`, its
    part's by default: CSR row pointers and int64 columns), features of its rows and halo, degrees,
    labels and masks, and the parameters."""
    features = in_width(model, 0)
    nodes, edges = structure or (rank.nodes, rank.edges)
    return ((nodes + 1) * INDEX + edges * INDEX + (rank.nodes + rank.halo) * (features * FLOAT + INDEX)
            + rank.nodes * (INDEX + 3) + params * FLOAT)


#: A CPU rank process's own memory beyond the data the model counts, in PSS bytes: the interpreter with
#: torch and the runtime imported, the process group, autograd's and Adam's fixed allocations.
#: `spawned`: a rank forked from the fork server, which shares those imports with its siblings;
#: `in_process`: one rank in the launching process (or a torchrun worker), which imported them itself,
#: with the dataset's reader. Measured, not fitted: a run on a graph of next to no data, less its
#: projected data (`summary.process_peak_pss_bytes_max` less `process_peak_terms`' other terms), this
#: machine, torch 2.13 (CPU), 2026-12: `python -m benchmarks method=full_halo workers=2
#: dataset=synthetic dataset.nodes=1000 hidden=16 epochs=4 warmup_epochs=2 eval_every=2` (93 MiB);
#: `method=single workers=1 dataset=cora` and the same options (390 MiB: the Planetoid reader imports
#: PyG; 320 MiB on the synthetic graph, which imports no reader).
PROCESS_BYTES = {"spawned": 95 * 2 ** 20, "in_process": 400 * 2 ** 20}


def process_peak_terms(method, options, model, rank: Rank, workers: int, in_process: bool) -> dict:
    """A CPU rank process's projected peak over a whole run (PSS), by term: its `memory_terms`
    (working set and `static`), `allocator` and the process's own (`process`, `PROCESS_BYTES`).
    Their sum is what the pre-flight memory check compares with the memory a rank has
    (analysis/preflight.py); validated against the records' `process_peak_pss_bytes_max`
    (docs/measurement.md, "Pre-flight memory check").

    `allocator`: in the timed epochs glibc runs as the runtime sets it (`probes.timed_allocator`:
    blocks below its 32 MiB mmap threshold come from the heap, which keeps them when they are freed),
    and the heap then holds up to about one more copy of what an epoch frees in such blocks: a layer's
    activations where its widest rows are below the threshold, and the transient and stale tables
    where any layer's are. Measured: a 50k-node graph's process peaks at 1.4-2.1 times its live
    working set and static data with 128-wide layers (blocks of 13 MB), 0.86-0.93 times with 512-wide
    ones (51 MB, returned to the system when freed)."""
    from benchmarks.core.probes import TIMED_MMAP_THRESHOLD
    terms, retained, rows = _memory(method, options, model, rank, workers)
    small = [rows[layer] * max(in_width(model, layer), out_width(model, layer)) * FLOAT < TIMED_MMAP_THRESHOLD
             for layer in range(len(retained))]
    kept = sum(r for r, s in zip(retained, small) if s)
    if any(small):
        kept += terms["backward_transient"] + terms["stale_tables"]
    return {**terms, "allocator": kept, "process": PROCESS_BYTES["in_process" if in_process else "spawned"]}


def process_peak(method, options, model, ranks: list[Rank], workers: int, in_process: bool) -> float:
    """The projected peak of the largest of `ranks`' processes (`process_peak_terms`, summed)."""
    return max(sum(process_peak_terms(method, options, model, r, workers, in_process).values()) for r in ranks)


def rank_memory(profile, workers: int) -> float:
    """The memory one rank has: a GPU's, or its share of a CPU node's RAM (the ranks on it share it)."""
    return profile.memory_bytes / ranks_per_unit(profile, workers)


def fits(profile, workers: int, peak_bytes: float, host_bytes: float = 0.0) -> bool:
    """Whether a rank's projected peak fits the memory it has (`rank_memory`), and what it keeps in
    host memory its share of the node's (`host_memory_bytes` over the ranks of a node; not checked
    where the profile does not state it)."""
    host = getattr(profile, "host_memory_bytes", None)
    return peak_bytes <= rank_memory(profile, workers) and (
        not host or host_bytes <= host / min(workers, profile.ranks_per_node))


def peaks(profile, memory_terms: dict, train_bytes: float) -> tuple[float, float]:
    """(a rank's device peak, what it keeps in host memory): on a CPU node one memory holds both."""
    host = memory_terms.get("host", 0.0)
    device = train_bytes + memory_terms["static"]
    return (device + host, host) if profile.device == "cpu" else (device, host)


def project(method, options, model, ranks: list[Rank], workers: int, profile) -> Projection:
    """The epoch: the slowest rank's time terms, the largest rank's memory terms (`method` and
    `options` as `rank_terms` takes them)."""
    cls = plugin(method)
    method, options = cls, typed_options(cls, options)
    per_rank = [rank_terms(method, options, model, r, workers, profile) for r in ranks]
    slowest = max(per_rank, key=lambda p: p.epoch_s)
    largest = max(per_rank, key=lambda p: p.train_mem_bytes + p.memory_terms["static"])
    return Projection(slowest.time_terms, largest.memory_terms, slowest.traffic)
