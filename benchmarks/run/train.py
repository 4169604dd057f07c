"""The shared per-rank loop: build the model, run the method's epochs, evaluate, probe.

Epoch time is measured per rank around `train_epoch` only (evaluation, logging and the probes'
own reductions excluded) and reduced with MAX over ranks; the first `warmup_epochs` are dropped
from the median and are the epochs the memory probe measures. Evaluation is the same exact
full-graph inference for every method. The record is built from what `run_rank` returns
(`benchmarks.run.record.RecordBuilder`). The time left that progress lines print is another clock: rank
0's wall time since training began, evaluation included, since the user waits for it too.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from benchmarks.core.aggregation import HaloAggregator, HaloPlan, LocalAdjacency
from benchmarks.core.comm import Comm
from benchmarks.run.config import RunConfig
from benchmarks.core.draws import Draws
from benchmarks.run.method import RankContext
from benchmarks.core.models import GNN, build_model, decay_groups
from benchmarks.core.partition import Part
from benchmarks.core.probes import MemoryProbe, Timer
from benchmarks.base.progress import time_left
from benchmarks.core.recompute import Recompute
from benchmarks.run.stopping import Stopper
from benchmarks.run.record import warmup_dropped


def make_context(cfg: RunConfig, rank: int, world: int, part: Part, device: torch.device,
                 partition_folder: Path | None = None, *, local_rank: int | None = None,
                 local_world: int | None = None) -> RankContext:
    """The rank's context. `local_rank`/`local_world` (this rank's place on its machine) default to
    rank/world: every rank on one machine."""
    for name, value in vars(part).items():
        if isinstance(value, torch.Tensor) and name not in ("recv_counts", "send_counts", "offsets"):
            setattr(part, name, value.to(device))
    memory = cfg.memory
    recompute = Recompute(None if memory.checkpoint == "none" else memory.checkpoint_halo)
    draws = Draws(cfg.seed, part.node_ids[:part.num_local], cfg.draws, rank, cfg.kernel)
    comm = Comm(rank, world, cfg.comm.quantize, cfg.comm.quantize_grads, cfg.seed, device, recompute, draws)
    adj = LocalAdjacency(part.indptr, part.indices, part.deg[:part.num_local], part.deg, kernel=cfg.kernel,
                         col_ids=part.node_ids)
    plan = HaloPlan(part.send_idx, part.send_counts.tolist(), part.recv_counts.tolist())
    model = optimizer = None
    if cfg.method_cls.builds_model:
        model = model_for(cfg, part.x.shape[1], part.num_classes, recompute).to(device)
        # Every rank built the same weights from the seed; the broadcast makes it a guarantee.
        for t in [*model.parameters(), *model.buffers()]:
            comm.broadcast(t.data, 0, "setup")
        optimizer = torch.optim.Adam(decay_groups(model, cfg.weight_decay, cfg.weight_decay_layers), lr=cfg.lr)
    return RankContext(cfg, rank, world, device, comm, part, adj, plan, model, optimizer, partition_folder,
                       local_rank=rank if local_rank is None else local_rank,
                       local_world=world if local_world is None else local_world, recompute=recompute)


def model_for(run: RunConfig, features: int, classes: int, recompute: Recompute | None = None) -> GNN:
    """The model `run` trains, on a graph of `features` and `classes`: the one place a run's
    configuration becomes a model (the pre-flight check projects this same model,
    `analysis.projection.run_inputs`)."""
    return build_model(run.model_name, features, run.hidden, classes, run.layers, run.dropout, run.seed,
                       heads=run.model.heads, batch_norm=run.batch_norm, checkpoint=run.memory.checkpoint,
                       precision=run.precision, offload=run.memory.offload, heads_concat=run.model.heads_concat,
                       attention_dropout=run.model.attention_dropout, recompute=recompute)


@torch.no_grad()
def evaluate(ctx: RankContext, agg, model: torch.nn.Module) -> dict[str, float]:
    """Exact full-graph inference (halo exchange, no gradient); accuracy over the global splits."""
    model.eval()
    logits = model(ctx.part.x, agg)
    correct = logits.argmax(-1) == ctx.part.y
    masks = (ctx.part.train_mask, ctx.part.val_mask, ctx.part.test_mask)
    val = ctx.part.val_mask
    val_loss = torch.nn.functional.cross_entropy(logits[val], ctx.part.y[val], reduction="sum")
    counts = torch.stack([*(v for m in masks for v in ((correct & m).sum(), m.sum())), val_loss]).double()
    ctx.comm.all_reduce(counts, "eval")
    accs = [(counts[2 * i] / counts[2 * i + 1]).item() if counts[2 * i + 1] else float("nan") for i in range(3)]
    val_loss = (counts[6] / counts[3]).item() if counts[3] else float("nan")
    return {**dict(zip(("train_acc", "val_acc", "test_acc"), accs)), "val_loss": val_loss}


def decay_penalty(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """0.5 x weight_decay x the squared norm of the parameters that decay: the weight-decay term of the
    loss Adam's `weight_decay` is the gradient of (tf.nn.l2_loss), which `stopping=window` adds to the
    validation loss as tkipf/gcn's `model.loss` does."""
    return sum(0.5 * g["weight_decay"] * float(sum((p.detach().float() ** 2).sum() for p in g["params"]))
               for g in optimizer.param_groups if g["weight_decay"])


def run_rank(cfg: RunConfig, rank: int, world: int, part: Part, device: torch.device, on_epoch=None,
             partition_folder: Path | None = None, *, local_rank: int | None = None,
             local_world: int | None = None, timeline: dict | None = None) -> dict:
    """Train and evaluate; every rank returns the gathered history and per-rank probes (identical on
    all ranks) and, with `probe_grads`, epoch 0's synchronised gradients. `timeline`: the launcher's
    moments of this rank so far (`runner._rank_main`), completed here into the probe `timeline`."""
    timeline = dict(timeline or {})
    epochs = cfg.epochs
    memory = MemoryProbe(device, probe_epochs=warmup_dropped(epochs, cfg.warmup_epochs) or epochs,
                         switch_allocator=cfg.malloc_mmap_threshold is not None and device.type == "cpu")
    # Every draw of training is keyed (benchmarks/core/draws.py); torch's own stream, which nothing of the
    # suite's training reads, is seeded alike on every rank so that a stray draw is not per rank either.
    torch.manual_seed(cfg.seed)
    ctx = make_context(cfg, rank, world, part, device, partition_folder, local_rank=local_rank,
                       local_world=local_world)
    method = cfg.method_cls(ctx)
    eval_agg = HaloAggregator(ctx.adj, ctx.plan, ctx.comm, categories=("eval", "eval"), recompute=ctx.recompute)
    timeline["ready"], eval_s = time.time(), 0.0
    eval_every = cfg.eval_every
    history, window, grads = [], [], None
    stopper = Stopper(cfg.stopping, cfg.patience)

    memory.start_training()
    started = time.perf_counter()
    for epoch in range(epochs):
        before = ctx.comm.training_bytes()
        ctx.draws.at(epoch)  # a method taking several steps an epoch moves `step` itself
        method.between_epochs(epoch)  # untimed; its traffic counts toward the epoch
        with Timer(device) as timer:
            loss = method.train_epoch(epoch)
        if epoch == 0 and cfg.probe_grads:
            grads = {n: p.grad.detach().cpu().clone() for n, p in method.evaluation_model().named_parameters()
                     if p.grad is not None}
        window.append((timer.seconds, float(loss), float(ctx.comm.training_bytes() - before)))
        evaluate_now = (epoch + 1) % eval_every == 0 or epoch == epochs - 1
        # Synchronous methods reduce their probes every epoch; asynchronous ones only where the
        # evaluation makes every rank meet anyway, so the probes add no barrier.
        if method.synchronous or evaluate_now:
            memory.pause()
            entries = reduce_window(ctx, window, epoch, per_epoch_max=method.synchronous)
            window = []
            if evaluate_now:
                t0 = time.perf_counter()
                entries[-1].update(evaluate(ctx, eval_agg, method.evaluation_model()))
                eval_s += time.perf_counter() - t0
            # left as of now: an asynchronous method's entries of several epochs arrive together
            left = time_left(epoch + 1, epochs - epoch - 1, time.perf_counter() - started)
            for entry in entries:
                history.append(entry)
                if on_epoch is not None:
                    on_epoch(entry, left)
            if not cfg.allow_nonfinite:
                check_finite(entries)
            memory.resume()
        memory.epoch_done(epoch)
        if cfg.stopping != "none" and should_stop(ctx, method, stopper, history[-1]):
            break
    ctx.comm.drain()  # transfers a method posted and nothing waited for (its last pipelined posts)
    timeline.update(trained=time.time(), eval_s=eval_s)

    per_rank = {"rank": rank, **memory.result(), "comm_bytes_by_category": ctx.comm.by_category(),
                "comm_blocked_s_by_category": ctx.comm.blocked_by_category(),
                "comm_calls_by_category": ctx.comm.calls_by_category(),
                "comm_messages_by_category": ctx.comm.messages_by_category(),
                "comm_bytes_by_layer": ctx.comm.by_layer(), "nodes": part.num_local, "halo_nodes": part.num_halo,
                "peers": int((part.recv_counts > 0).sum()),  # ranks this one receives halo rows from
                # the suite model's counted work (the cost model's input); none for a method with its own network
                "work_per_layer": ctx.model.work(part.num_local, part.indices.numel()) if ctx.model else None,
                "threads": torch.get_num_threads(), "timeline": timeline, **method.probes()}
    return {"history": history, "per_rank": ctx.comm.all_gather_object(per_rank), "grads": grads}


def should_stop(ctx: RankContext, method, stopper: Stopper, entry: dict) -> bool:
    """The stopping rule's verdict after `entry` (evaluated: `stopping` needs eval_every=1), rank 0's
    for every rank: the inputs are reduced over ranks, but a method with a parameter server may hold
    parameters that differ by rank, and every rank must leave the loop together."""
    val_loss = entry["val_loss"]
    if stopper.rule == "window":
        optimizer = ctx.optimizer if ctx.optimizer is not None else getattr(method, "optimizer", None)
        val_loss += decay_penalty(method.evaluation_model(), optimizer) if optimizer is not None else 0.0
    verdict = torch.tensor([float(stopper.stop(val_loss, entry["val_acc"]))], device=ctx.device)
    ctx.comm.broadcast(verdict, 0, "eval")
    return bool(verdict.item())


class Diverged(Exception):
    """A loss or metric became NaN or infinite: the run ends `failed` rather than report a number."""


def check_finite(entries: list[dict]) -> None:
    """Raise `Diverged` at the first non-finite loss or accuracy. The entries are reduced over ranks,
    so every rank raises at the same epoch and none is left waiting in a collective."""
    for entry in entries:
        for key in ("train_loss", "train_acc", "val_acc", "test_acc"):
            value = entry[key]
            if value is not None and not math.isfinite(value):
                what = "NaN" if value != value else "infinite"
                raise Diverged(f"{key.replace('_', ' ')} became {what} at epoch {entry['epoch'] + 1} "
                               "(allow_nonfinite=true trains on)")


def reduce_window(ctx: RankContext, window: list[tuple[float, float, float]], last_epoch: int,
                  per_epoch_max: bool) -> list[dict]:
    """History entries for the epochs in `window` (this rank's seconds, loss share, bytes sent).
    Loss and bytes are summed over ranks. Time is the slowest rank's epoch time; for asynchronous
    methods, whose ranks do not finish an epoch together, the slowest rank's time for the whole
    window is spread evenly over its epochs."""
    device, f64 = ctx.device, torch.float64
    seconds = torch.tensor([w[0] for w in window], dtype=f64, device=device)
    if not per_epoch_max:
        seconds = seconds.sum().expand(len(window)) / len(window)
    seconds = ctx.comm.all_reduce(seconds.contiguous(), "probe", op=torch.distributed.ReduceOp.MAX)
    sums = ctx.comm.all_reduce(torch.tensor([w[1:] for w in window], dtype=f64, device=device), "probe")
    first = last_epoch - len(window) + 1
    return [{"epoch": first + i, "train_loss": sums[i, 0].item(), "val_acc": None, "test_acc": None, "val_loss": None,
             "train_acc": None, "epoch_time_s": seconds[i].item(), "comm_bytes": int(sums[i, 1].item())}
            for i in range(len(window))]
