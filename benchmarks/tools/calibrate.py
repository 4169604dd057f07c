"""`python -m benchmarks.tools.calibrate [--name NAME] [--quick] [--out DIR]`: measure this machine and write
its hardware profile, `<DIR>/<NAME>.yaml` (default `conf/hardware/this-machine.yaml`; the schema is
`benchmarks/tools/hardware.py`'s, docs/measurement.md "Calibration" says what each value measures).

With the suite's own kernels where it has them: dense products (`torch.mm` of a layer's shapes),
the CSR SpMM every method aggregates with (`LocalAdjacency.spmm` and the transposed product its
backward runs) on the suite's synthetic graph, a streaming add, and the suite's point-to-point
exchange and all-reduce (`Comm`) between two gloo ranks started as the runner starts them
(forkserver, file store, loopback). Each value is the median of several runs after a warm-up, with
every core (`torch.set_num_threads(cores)`), and again with one thread (`single_thread`: what a
rank gets when ranks outnumber cores). Run it on an otherwise quiet machine; `--quick` (tiny sizes,
few runs) only checks that it works.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from benchmarks.tools import hardware
from benchmarks.core import native
from benchmarks.core.aggregation import LocalAdjacency
from benchmarks.core.comm import Comm
from benchmarks.core.datasets import synthetic
from benchmarks.base.errors import Stopped, UserError, stop_on_signals
from benchmarks.base.leftovers import die_with_launcher, temporary_prefix
from benchmarks.base.outputs import check_writable, writing
from benchmarks.core.probes import cores
from benchmarks.run import rank_server

KiB, MiB = 1 << 10, 1 << 20
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Sizes:
    gemm_rows: tuple[int, ...]  # rows x 256 @ 256 x 256 (and rows x 64 @ 64 x 64 at the largest)
    half_seconds: float  # bf16/fp16 rows are cut so one product takes about this long (slow on most CPUs)
    graph_nodes: int
    graph_degree: int  # average degree of the synthetic graph (self-loops come on top)
    widths: tuple[int, ...]
    stream: int  # elements of each of a, b, c in c = a + b
    message_bytes: tuple[int, ...]
    repeats: int  # timed runs per value (fewer, 3 at least, for those past `budget_s`)
    budget_s: float


NORMAL = Sizes(gemm_rows=(50_000, 200_000), half_seconds=0.3, graph_nodes=200_000, graph_degree=20,
               widths=(64, 256), stream=100_000_000, message_bytes=tuple(KiB * 4 ** i for i in range(9)),
               repeats=5, budget_s=3.0)
QUICK = Sizes(gemm_rows=(2_000,), half_seconds=0.02, graph_nodes=5_000, graph_degree=10, widths=(64,),
              stream=1_000_000, message_bytes=(KiB, 64 * KiB, MiB), repeats=2, budget_s=0.2)


def median_seconds(fn, sizes: Sizes, warm_up: bool = True) -> float:
    """Median wall time of `fn` over `sizes.repeats` runs after one untimed run; runs stop early
    (after 3) once they have taken `sizes.budget_s`."""
    if warm_up:
        fn()
    times = []
    while len(times) < sizes.repeats and (len(times) < 3 or sum(times) < sizes.budget_s):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --------------------------------------------------------------------------- compute
def gemm_flops(rows: int, width: int, dtype: torch.dtype, sizes: Sizes) -> float:
    """FLOP/s of (rows x width) @ (width x width): 2 rows width^2 FLOPs."""
    a, w = torch.randn(rows, width).to(dtype), torch.randn(width, width).to(dtype)
    return 2 * rows * width * width / median_seconds(lambda: torch.mm(a, w), sizes)


def half_rows(dtype: torch.dtype, sizes: Sizes, width: int = 256) -> int:
    """Rows for a bf16/fp16 product of about `sizes.half_seconds`, at most the largest fp32 rows:
    CPUs without native half-precision GEMMs run them tens of times slower than fp32."""
    probe = 512
    rate = gemm_flops(probe, width, dtype, dataclasses.replace(sizes, repeats=1))
    rows = int(rate * sizes.half_seconds / (2 * width * width))
    return max(probe, min(max(sizes.gemm_rows), rows // probe * probe))


def graph_of(nodes: int, degree: int):
    """The suite's synthetic graph (degree-corrected block model, skewed degrees) at this size."""
    return synthetic(nodes=nodes, avg_degree=degree, classes=8, features=1, homophily=0.8, feature_noise=6.0,
                     degree_skew=1.0, train_frac=0.1, val_frac=0.1, test_frac=0.1, seed=0)


def adjacency(graph, kernel: str) -> LocalAdjacency:
    """`graph` as the adjacency every method aggregates with, by `kernel`, its GCN matrices built
    once as in training."""
    deg = graph.in_degree()
    adj = LocalAdjacency(graph.indptr, graph.indices, deg, deg, kernel=kernel)
    adj.native_matrix("gcn") if kernel == "native" else adj.matrix("gcn")
    return adj


def aggregation_graph(sizes: Sizes) -> LocalAdjacency:
    """The synthetic graph's adjacency by the suite's default kernel on this machine (`native`, else
    `spmm`: `native.resolve`)."""
    return adjacency(graph_of(sizes.graph_nodes, sizes.graph_degree), native.resolve("native", "cpu"))


def gather_bandwidth(adj: LocalAdjacency, width: int, sizes: Sizes, warm_up: bool = True) -> float:
    """Bytes/s of one forward aggregation (A @ X) and its backward (A^T @ G), counted as
    edges x width x 4 bytes each."""
    x = torch.randn(adj.num_cols, width)
    forward = median_seconds(lambda: adj.spmm("gcn", x), sizes, warm_up)
    backward = median_seconds(lambda: adj.spmm_t("gcn", x), sizes, warm_up)
    return 2 * adj.nnz * width * 4 / (forward + backward)


def stream_bandwidth(sizes: Sizes) -> float:
    """Bytes/s of c = a + b in fp32: 3 x 4 bytes per element (two reads, one write)."""
    a, b, c = torch.ones(sizes.stream), torch.ones(sizes.stream), torch.empty(sizes.stream)
    return 3 * 4 * sizes.stream / median_seconds(lambda: torch.add(a, b, out=c), sizes)


def dropout_rate(sizes: Sizes) -> float:
    """Elements per second through the suite's dropout forward (`draws.Draws.dropout`: a hash per
    element of (key, node id, column), a comparison, the scale). A CPU's generator and the mixed-type
    multiply run far below the streaming bandwidth, and dropout of wide input features is a large
    share of a small graph's epoch."""
    from benchmarks.core.draws import Draws
    x = torch.ones(sizes.stream // 4 // 64, 64)  # rows of 64: the masks are keyed by row (node) and column
    draws = Draws(0, kernel=native.resolve("native", "cpu"))
    return x.numel() / median_seconds(lambda: draws.dropout(x, 0.5, True, ("input", 0)), sizes)


#: Channels per head at which GAT's attention is measured (4 heads); the model interpolates between them.
ATTENTION_CHANNELS = (16, 64)


def attention_rate(adj: LocalAdjacency, channels: int, sizes: Sizes, heads: int = 4) -> float:
    """Edge-heads per second through the suite's GAT aggregation (`LocalAdjacency.attention`:
    logits, edge softmax, weighted sum) forward and backward. Its per-edge gathers and scatters and
    per-head products run far below the SpMM's rate, so GAT layers are timed by this rate instead."""
    z = torch.randn(adj.num_rows, heads, channels, requires_grad=True)
    att_src, att_dst = (torch.randn(1, heads, channels, requires_grad=True) for _ in range(2))

    def step():
        adj.attention(z, z, att_src, att_dst, 0.2).sum().backward()
    return adj.nnz * heads / median_seconds(step, sizes)


SAMPLER_BATCH, SAMPLER_FANOUTS = 512, (15, 10, 5)
SUBGRAPH_SHARE = 0.25


def sampler_rate(sizes: Sizes, batches: int = 8) -> float:
    """The suite's neighbour sampler (`sampling.sample_blocks`: draws, relabelling, blocks) over a
    replicated store of the calibration graph: sampled edges per second, for batches of
    SAMPLER_BATCH seeds with fan-outs SAMPLER_FANOUTS, median of the batches' rates after a warm-up."""
    from benchmarks.core.sampling import NodeDraws, sample_blocks
    from benchmarks.core.stores import ReplicatedStore
    g = graph_of(sizes.graph_nodes, sizes.graph_degree)
    store = ReplicatedStore(g.indptr, g.indices, g.x)
    gen = torch.Generator().manual_seed(0)
    rates = []
    for i in range(batches + 1):
        seeds = torch.randperm(g.num_nodes, generator=gen)[:SAMPLER_BATCH]
        t0 = time.perf_counter()
        _, _, edges = sample_blocks(store, seeds, list(SAMPLER_FANOUTS), NodeDraws(i), "native")
        if i:  # the first is the warm-up
            rates.append(edges / (time.perf_counter() - t0))
    return statistics.median(rates)


def subgraph_rate(sizes: Sizes, batches: int = 8) -> float:
    """`sampling.induced_subgraph` (what Cluster-GCN and GraphSAINT build each step) on the
    calibration graph for random sets of SUBGRAPH_SHARE of its nodes: in-edges scanned per second (every
    in-edge of the chosen nodes), median of the batches' rates after a warm-up."""
    from benchmarks.core.sampling import induced_subgraph
    g = graph_of(sizes.graph_nodes, sizes.graph_degree)
    gen = torch.Generator().manual_seed(0)
    rates = []
    for i in range(batches + 1):
        nodes = torch.randperm(g.num_nodes, generator=gen)[:int(SUBGRAPH_SHARE * g.num_nodes)].sort().values
        t0 = time.perf_counter()
        induced_subgraph(g.indptr, g.indices, nodes)
        seconds = time.perf_counter() - t0
        if i:  # the first is the warm-up
            rates.append(int((g.indptr[nodes + 1] - g.indptr[nodes]).sum()) / seconds)
    return statistics.median(rates)


def compute_rates(threads: int, adj: LocalAdjacency, sizes: Sizes, warm_up: bool = True) -> dict:
    """Dense fp32, aggregation and streaming rates with `threads` threads (every core, then one)."""
    torch.set_num_threads(threads)
    # One warm-up for the aggregation (its first width): later calls find the kernel and its
    # threads ready, and allocate their outputs afresh each call, in training as here.
    return {"dense_flops_fp32": statistics.fmean(gemm_flops(r, 256, torch.float32, sizes) for r in sizes.gemm_rows),
            "gather": {w: gather_bandwidth(adj, w, sizes, warm_up and i == 0) for i, w in enumerate(sizes.widths)},
            "memory_bandwidth": stream_bandwidth(sizes), "dropout_rate": dropout_rate(sizes),
            "attention": {c: attention_rate(adj, c, sizes) for c in ATTENTION_CHANNELS},
            "sampler_rate": sampler_rate(sizes), "subgraph_rate": subgraph_rate(sizes)}


# --------------------------------------------------------------------------- communication
def _repeats(nbytes: int, sizes: Sizes) -> int:
    """Many runs of small messages (cheap, noisy), few of large ones; the same on both ranks."""
    return sizes.repeats * (6 if nbytes <= 64 * KiB else 2 if nbytes <= 4 * MiB else 1)


def _comm_rank(rank: int, store: str, sizes: Sizes, out: str) -> None:
    """One of the two ranks: for every message size, the median time of a point-to-point exchange
    with the peer (each rank sends and receives `nbytes` at once: `Comm.exchange`, what an
    all-to-all does with each peer) and of an all-reduce of `nbytes`. Rank 0 writes them to `out`.
    Started as the runner starts its ranks, it is owned the same way: a Ctrl-C or hang-up reaches
    the launcher (which ends the ranks), and a rank dies with its launcher, even a SIGKILLed one; a
    rank that fails leaves its traceback beside `out` for the launcher to report."""
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    die_with_launcher()
    try:
        _exchange(rank, store, sizes, out)
    except BaseException:  # the launcher reports it; a rank whose peer was stopped says nothing
        Path(out).with_name(f"rank{rank}.err").write_text(traceback.format_exc())
        os._exit(1)


def _exchange(rank: int, store: str, sizes: Sizes, out: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    comm, peer = Comm(rank, 2), 1 - rank
    times = {"exchange": {}, "all_reduce": {}}
    for nbytes in sizes.message_bytes:
        send, recv = torch.zeros(nbytes // 4), torch.empty(nbytes // 4)
        ops = {"exchange": lambda: comm.exchange(send, peer, recv, peer, "probe").wait(),
               "all_reduce": lambda: comm.all_reduce(send, "probe")}
        for op, fn in ops.items():
            fn()  # warm-up
            runs = []
            for _ in range(_repeats(nbytes, sizes)):
                dist.barrier()  # both ranks start together: the time is the transfer's, not a peer's lateness
                start = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - start)
            times[op][nbytes] = statistics.median(runs)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


def comm_times(sizes: Sizes) -> dict:
    """{"exchange"|"all_reduce": {bytes: seconds}} between two ranks on this machine."""
    # The fork server imports torch and the suite's communication layer once for both ranks (as the
    # runner's does); each rank then imports this module as its __main__, which costs nothing more.
    ctx = rank_server.context(preload=["benchmarks.core.comm"])
    tmp = scratch_folder()
    try:
        out = tmp / "times.json"
        procs = [ctx.Process(target=_comm_rank, args=(r, str(Path(tmp) / "store"), sizes, str(out)),
                             name=f"calibrate-rank{r}") for r in range(2)]
        deadline = time.monotonic() + 300
        try:
            for p in procs:
                p.start()
            # Until both are done, one fails (its peer would wait for the collective timeout) or time is up.
            while (any(p.is_alive() for p in procs) and all(p.exitcode in (None, 0) for p in procs)
                   and time.monotonic() < deadline):
                mp.connection.wait([p.sentinel for p in procs if p.is_alive()], timeout=1.0)
        finally:
            for p in procs:
                if p.pid is not None and p.is_alive():
                    p.kill()
            for p in procs:
                if p.pid is not None:
                    p.join()
        if any(p.exitcode != 0 for p in procs) or not out.exists():
            errors = sorted(tmp.glob("rank*.err"), key=lambda f: f.stat().st_mtime)
            raise RuntimeError(f"the communication ranks failed (exit codes {[p.exitcode for p in procs]})"
                               + (f"; {errors[0].stem}:\n{errors[0].read_text()}" if errors else ""))
        return {op: {int(k): v for k, v in t.items()} for op, t in json.loads(out.read_text()).items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scratch_folder() -> Path:
    """A new folder for the exchange's file store and times, named with this process's owner tag
    (`leftovers`); those of a calibrate killed before it could remove them are removed first."""
    return Path(tempfile.mkdtemp(prefix=temporary_prefix("calibrate-")))


def fit_link(times: dict[int, float]) -> tuple[float, float]:
    """(latency, bandwidth) of t = latency + bytes / bandwidth, least squares in relative error (each
    size weighs alike, so the small messages fix the latency and the large ones the bandwidth). A fit
    whose latency is not positive takes the smallest message's time as the latency; one whose time per
    byte is not positive (a loaded machine's noise larger than the sizes' effect) takes the largest
    message's bytes over its time as the bandwidth, and the smallest message's time as the latency."""
    w = {n: 1 / t ** 2 for n, t in times.items()}
    sw, sn, snn = sum(w.values()), sum(w[n] * n for n in times), sum(w[n] * n * n for n in times)
    st, snt = sum(w[n] * t for n, t in times.items()), sum(w[n] * n * t for n, t in times.items())
    per_byte = (sw * snt - sn * st) / (sw * snn - sn * sn)
    if per_byte <= 0:
        largest = max(times)
        return times[min(times)], largest / times[largest]
    latency = (st - per_byte * sn) / sw
    if latency <= 0:
        latency = times[min(times)]
    return latency, 1 / per_byte


def size_text(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // KiB} KiB"


# --------------------------------------------------------------------------- the profile
def memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def measure(name: str, sizes: Sizes, log=print) -> dict:
    """This machine's profile as a dict (hardware.py's schema)."""
    n, start, load = cores(), time.perf_counter(), os.getloadavg()[0]
    if load > 0.5:
        log(f"warning: the machine is busy (1-minute load average {load:.1f}): the rates will be low")

    def done(what: str) -> None:
        log(f"{time.perf_counter() - start:5.1f} s  {what}", flush=True)

    adj = aggregation_graph(sizes)
    done(f"graph: {adj.num_rows} nodes, {adj.nnz} edges")
    node = compute_rates(n, adj, sizes)
    done(f"dense fp32, aggregation, stream: {n} threads")
    rows = {p: half_rows(dtype, sizes) for p, dtype in HALF.items()}
    half = {p: gemm_flops(rows[p], 256, dtype, sizes) for p, dtype in HALF.items()}
    narrow = gemm_flops(max(sizes.gemm_rows), 64, torch.float32, sizes)
    done(f"dense bf16, fp16, fp32 64 wide: {n} threads")
    one = compute_rates(1, adj, sizes, warm_up=False)  # the kernels ran above: nothing left to warm up
    torch.set_num_threads(n)
    done("dense fp32, aggregation, stream: 1 thread")
    comm = comm_times(sizes)
    done("exchange / all-reduce between 2 gloo ranks, median ms: " + ", ".join(
        f"{size_text(b)} {t * 1e3:.2f} / {comm['all_reduce'][b] * 1e3:.2f}" for b, t in comm["exchange"].items()))
    latency, bandwidth = fit_link(comm["exchange"])
    ar_latency, ar_bandwidth = fit_link(comm["all_reduce"])
    big = max(sizes.message_bytes)
    ring = 2 * latency + big / bandwidth  # ring all-reduce of 2 ranks: 2 steps of half the tensor each way
    gather = statistics.fmean(node["gather"].values())
    graph = f"the suite's synthetic graph ({sizes.graph_nodes} nodes, {adj.nnz} edges with self-loops)"
    rows_text = " and ".join(f"{r}" for r in sizes.gemm_rows)
    sizes_text = f"{size_text(min(sizes.message_bytes))} to {size_text(big)}"
    link = {"bandwidth": bandwidth, "latency": latency}
    return {
        "name": name,
        "description": f"{cpu_model()}, {n} cores, {memory_bytes() / 2 ** 30:.1f} GiB, measured "
                       f"{datetime.date.today().isoformat()} by python -m benchmarks.tools.calibrate"
                       f"{' --quick' if sizes is QUICK else ''} (torch {torch.__version__}; 1-minute load "
                       f"average {load:.1f} at the start)",
        "device": "cpu",
        "units_per_node": 1,
        "ranks_per_node": 1024,
        "memory_bytes": memory_bytes(),
        "memory_bandwidth": node["memory_bandwidth"],
        "dropout_rate": node["dropout_rate"],
        "attention_rate": node["attention"],
        "gather_bandwidth": gather,
        "sampler_rate": node["sampler_rate"],
        "subgraph_rate": node["subgraph_rate"],
        "dense_flops": {"fp32": node["dense_flops_fp32"], **half},
        "dense_width_efficiency": {64: narrow / node["dense_flops_fp32"], 256: 1.0},
        "intra_node": link,
        "inter_node": dict(link),
        "sources": {
            "memory_bytes": "MemTotal of /proc/meminfo",
            "memory_bandwidth": f"torch.add(a, b, out=c), {sizes.stream} fp32 elements each, 12 bytes an element; "
                                f"median of up to {sizes.repeats} runs after a warm-up, {n} threads",
            "attention_rate": f"LocalAdjacency.attention (kernel={adj.kernel}) forward and backward, 4 heads of 16 "
                              "and 64 channels, on "
                              f"{graph}: edges x heads per second; median of up to {sizes.repeats} runs, {n} threads",
            "dropout_rate": f"benchmarks.core.draws.Draws.dropout(x, 0.5, training) (kernel={adj.kernel}) forward on "
                            f"{sizes.stream // 4} fp32 "
                            f"elements; median of up to {sizes.repeats} runs after a warm-up, {n} threads",
            "gather_bandwidth": f"LocalAdjacency.spmm (kernel={adj.kernel}) forward and spmm_t (its backward, A^T @ G) "
                                f"on {graph}, counted as 2 x edges x width x 4 bytes over both; mean of widths "
                                + ", ".join(f"{w} ({r / 1e9:.2f} GB/s)" for w, r in node["gather"].items())
                                + f"; {n} threads",
            "dense_flops.fp32": f"torch.mm of (rows x 256) @ (256 x 256), rows {rows_text}, mean of their rates; "
                                f"(rows x 64) @ (64 x 64) at {max(sizes.gemm_rows)} rows ran at {narrow / 1e9:.1f} "
                                f"GFLOP/s; {n} threads",
            "dense_flops.bf16": f"torch.mm of ({rows['bf16']} x 256) @ (256 x 256) in bf16 (rows cut to about "
                                f"{sizes.half_seconds} s a product); {n} threads",
            "dense_flops.fp16": f"torch.mm of ({rows['fp16']} x 256) @ (256 x 256) in fp16 (rows cut to about "
                                f"{sizes.half_seconds} s a product); {n} threads",
            "intra_node": f"Comm.exchange between 2 gloo ranks on loopback (forkserver, file store, 1 thread "
                          f"each), both sending at once, {sizes_text}: t = latency + bytes / bandwidth, "
                          f"least squares in relative error over the medians; all_reduce of the same sizes "
                          f"fits {ar_latency * 1e6:.0f} us + bytes / {ar_bandwidth / 1e9:.2f} GB/s "
                          f"({comm['all_reduce'][big] * 1e3:.1f} ms at {size_text(big)} against "
                          f"{ring * 1e3:.1f} ms for the ring model 2 latency + bytes / bandwidth)",
            "inter_node": "this machine is one node: intra_node's values",
            "sampler_rate": SAMPLER_TEXT.format(graph=graph, threads=n),
            "subgraph_rate": SUBGRAPH_TEXT.format(graph=graph, threads=n),
            "dense_width_efficiency": "the 64-wide product's rate (dense_flops.fp32's source) over the 256-wide one's",
            "ranks_per_node": "every rank of a run on this machine is on this node",
            "cores": "benchmarks.core.probes.cores() (the cores this process may run on)",
            "single_thread": "the same measurements as memory_bandwidth, dropout_rate, attention_rate, "
                             "gather_bandwidth and dense_flops.fp32 "
                             "with torch.set_num_threads(1)",
        },
        "cores": n,
        "single_thread": {"dense_flops_fp32": one["dense_flops_fp32"],
                          "gather_bandwidth": statistics.fmean(one["gather"].values()),
                          "memory_bandwidth": one["memory_bandwidth"], "dropout_rate": one["dropout_rate"],
                          "attention_rate": one["attention"], "sampler_rate": one["sampler_rate"],
                          "subgraph_rate": one["subgraph_rate"]},
    }


SAMPLER_TEXT = ("benchmarks.core.sampling.sample_blocks over a replicated store of {graph}, batches of "
                f"{SAMPLER_BATCH} random seeds, fan-outs {list(SAMPLER_FANOUTS)}: sampled edges per second, "
                "median of 8 batches after a warm-up, {threads} threads")
SUBGRAPH_TEXT = ("benchmarks.core.sampling.induced_subgraph on {graph} for random sets of "
                 f"{SUBGRAPH_SHARE:.0%} of its nodes: in-edges of the chosen nodes scanned per second, median of 8 "
                 "sets after a warm-up, {threads} threads")


def update_sampler(path: Path, sizes: Sizes) -> dict:
    """`--sampler`: the samplers' rates alone (neighbour sampling and induced subgraphs; every core,
    then one thread), written into the profile at `path` beside what it holds."""
    values = yaml.safe_load(path.read_text())
    n = cores()
    graph = f"the suite's synthetic graph ({sizes.graph_nodes} nodes, average degree {sizes.graph_degree})"
    for name, measure, text in (("sampler_rate", sampler_rate, SAMPLER_TEXT),
                                ("subgraph_rate", subgraph_rate, SUBGRAPH_TEXT)):
        torch.set_num_threads(1)
        values.setdefault("single_thread", {})[name] = measure(sizes)
        torch.set_num_threads(n)
        values[name] = measure(sizes)
        values["sources"][name] = text.format(graph=graph, threads=n) + " (--sampler)"
    return values


class _Dumper(yaml.SafeDumper):
    """Floats with 4 significant digits, as 1.234e+10 (read back as numbers by OmegaConf and PyYAML)."""


_Dumper.add_representer(float, lambda d, v: d.represent_scalar("tag:yaml.org,2002:float", f"{v:.3e}"))


def write_profile(values: dict, folder: Path) -> Path:
    """Validate `values` as a profile and write `<folder>/<name>.yaml`; returns the path."""
    hardware.from_dict(values, f"the measured profile {values.get('name')}")
    path = folder / f"{values['name']}.yaml"
    with writing("the hardware profile", path):  # a full disk: one line (main prints the profile)
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(profile_text(values))
    hardware.load_profile(str(path))
    return path


def profile_text(values: dict) -> str:
    header = f"# {values['description']}\n# Written by python -m benchmarks.tools.calibrate; see docs/measurement.md.\n"
    return header + yaml.dump(values, Dumper=_Dumper, sort_keys=False, width=120)


def table(values: dict) -> str:
    """What was measured, every core against one thread."""
    one, flops, link = values["single_thread"], values["dense_flops"], values["intra_node"]

    def row(what: str, node: str, single: str = "") -> str:
        return f"{what:22s} {node:>22s}  {single}".rstrip()

    return "\n".join([
        row("", f"{values['cores']} threads", "1 thread"),
        row("dense fp32", f"{flops['fp32'] / 1e9:.1f} GFLOP/s", f"{one['dense_flops_fp32'] / 1e9:.1f} GFLOP/s"),
        row("dense bf16 / fp16", f"{flops['bf16'] / 1e9:.2f} / {flops['fp16'] / 1e9:.2f} GFLOP/s"),
        row("gather (CSR SpMM)", f"{values['gather_bandwidth'] / 1e9:.2f} GB/s",
            f"{one['gather_bandwidth'] / 1e9:.2f} GB/s"),
        row("memory (stream add)", f"{values['memory_bandwidth'] / 1e9:.2f} GB/s",
            f"{one['memory_bandwidth'] / 1e9:.2f} GB/s"),
        row("dropout forward", f"{values['dropout_rate'] / 1e6:.0f} M elements/s",
            f"{one['dropout_rate'] / 1e6:.0f} M elements/s"),
        *[row(f"GAT attention, {c} ch", f"{values['attention_rate'][c] / 1e6:.1f} M edge-heads/s",
              f"{one['attention_rate'][c] / 1e6:.1f} M edge-heads/s") for c in values["attention_rate"]],
        row("p2p between 2 ranks", f"{link['latency'] * 1e6:.0f} us + B / {link['bandwidth'] / 1e9:.2f} GB/s"),
        row("memory", f"{values['memory_bytes'] / 2 ** 30:.1f} GiB")])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--name", default="this-machine", help="the profile's name (its file's stem)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few runs: checks that it works (< 15 s)")
    p.add_argument("--out", default=str(hardware.FOLDER), help="folder to write <name>.yaml into")
    p.add_argument("--sampler", action="store_true",
                   help="measure the samplers' rates alone (neighbour draws, induced subgraphs) and write them "
                        "into the existing <name>.yaml")
    args = p.parse_args(argv)
    if not args.name or Path(args.name).name != args.name or args.name.startswith("."):
        print(f"error: --name {args.name!r} must be a plain file name", file=sys.stderr)
        sys.exit(2)
    try:  # found now, not after minutes of measuring
        check_writable("--out", args.out)
        rank_server.check_temporary_folder()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    start = time.perf_counter()
    if args.sampler:
        path = Path(args.out) / f"{args.name}.yaml"
        values = update_sampler(path, QUICK if args.quick else NORMAL)
        write_profile(values, Path(args.out))
        one = values["single_thread"]
        print(f"sampler: {values['sampler_rate'] / 1e6:.2f} M edges/s ({one['sampler_rate'] / 1e6:.2f}"
              f" one thread); induced subgraphs: {values['subgraph_rate'] / 1e6:.2f} M in-edges/s "
              f"({one['subgraph_rate'] / 1e6:.2f} one thread); wrote {path}")
        return
    try:
        with stop_on_signals():  # the ranks of the exchange are ended and its folder removed on the way out
            values = measure(args.name, QUICK if args.quick else NORMAL)
    except Stopped as e:
        print(f"{e}: nothing written", file=sys.stderr)
        sys.exit(128 + e.signum)
    try:
        path = write_profile(values, Path(args.out))
    except UserError as e:  # the measurement is not lost: the profile goes to stdout instead
        print(f"error: {e}; the measured profile follows on stdout", file=sys.stderr)
        print(profile_text(values), end="")
        sys.exit(2)
    print(table(values))
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
