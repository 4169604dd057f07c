"""The CUDA paths CI cannot run: `make gpu-check` (or `python -m benchmarks.tools.gpu_check`) on a machine
with GPUs, one rank per GPU (NCCL does not share a GPU between ranks). Never part of `make test`.

Each check is a real run through `benchmarks.run.runner.run` on `device=cuda` (NCCL when there are 2 or
more GPUs) and holds what CPU tests hold on gloo: exact methods give the same losses as the
single-process oracle, the savers change only what they should (checkpointing and offloading: the
same losses; bf16, fp16 with loss scaling, quantised messages over NCCL: close to fp32), and every
record carries CUDA peak memory. Prints one line per check and exits
1 if any failed, so a short device session reads the whole answer from its tail.
    python -m benchmarks.tools.gpu_check [--results DIR] [--nodes N]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.base.registry import CONF
from benchmarks.run.runner import run


def config(results: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"results_dir={results}", f"cache_dir={results}/cache", "log_every=0",
                                           "device=cuda", "resume=false", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def losses(record: dict) -> list[float]:
    return [h["train_loss"] for h in record["history"]]


def close(a: list[float], b: list[float], rel: float) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rel, abs_tol=1e-6) for x, y in zip(a, b))


def main(argv=None) -> int:
    import torch

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--results", default=None, help="records folder (default: a temporary one)")
    args.add_argument("--nodes", type=int, default=50000, help="synthetic graph size")
    a = args.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is false)")
        return 2
    gpus = torch.cuda.device_count()
    results = a.results or tempfile.mkdtemp(prefix="gpu-check-")
    common = ["dataset=synthetic", f"dataset.nodes={a.nodes}", "epochs=5", "warmup_epochs=1", "dropout=0"]
    failures = []

    def check(name: str, ok: bool, detail: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if not ok:
            failures.append(name)

    def go(*overrides: str) -> dict:
        start = time.perf_counter()
        _, record = run(config(results, *common, *overrides))
        summary = record.get("summary") or {}
        peak = max((r.get("cuda_train_max_allocated_bytes") or 0 for r in summary.get("per_rank", [])), default=0)
        print(f"     {record['variant']} workers={record['workers']} model={record['model']}: {record['status']}"
              f" {record.get('error') or ''} epoch {summary.get('epoch_time_s_median', float('nan')):.4f} s, "
              f"CUDA peak allocated in training {peak / 2 ** 30:.2f} GiB/rank, {time.perf_counter() - start:.0f} s",
              flush=True)
        return record

    print(f"gpu-check: {gpus} GPU(s) ({torch.cuda.get_device_name(0)}), torch {torch.__version__}, "
          f"records in {results}")
    for model in ("sage", "gat"):
        oracle = go("method=single", f"model={model}")
        check(f"single {model}", oracle["status"] == "ok", "runs on cuda")
        for method in ("full_halo", "sar"):
            rec = go(f"method={method}", f"model={model}", f"workers={gpus}")
            check(f"{method} {model} = single", rec["status"] == "ok" and close(losses(rec), losses(oracle), 1e-4),
                  f"losses {losses(rec)[-1:]} vs {losses(oracle)[-1:]}")
        for saver in ("memory.checkpoint=layer", "memory.checkpoint=all"):
            rec = go("method=full_halo", f"model={model}", f"workers={gpus}", saver)
            check(f"full_halo {model} {saver}", rec["status"] == "ok" and close(losses(rec), losses(oracle), 1e-4),
                  "same losses as without")
        rec = go("method=full_halo", f"model={model}", f"workers={gpus}", "memory.offload=activations")
        check(f"full_halo {model} memory.offload=activations",
              rec["status"] == "ok" and close(losses(rec), losses(oracle), 1e-4), "same losses as without")
        for precision in ("bf16", "fp16"):  # fp16 with loss scaling
            rec = go("method=full_halo", f"model={model}", f"workers={gpus}", f"precision={precision}")
            check(f"full_halo {model} precision={precision}",
                  rec["status"] == "ok" and close(losses(rec), losses(oracle), 0.05),
                  f"losses {losses(rec)[-1:]} vs fp32 {losses(oracle)[-1:]}")
        for method in ("full_halo", "sar"):  # quantised rows over NCCL (gradients too)
            rec = go(f"method={method}", f"model={model}", f"workers={gpus}", "comm.quantize=int8",
                     "comm.quantize_grads=true")
            check(f"{method} {model} comm.quantize=int8",
                  rec["status"] == "ok" and close(losses(rec), losses(oracle), 0.05),
                  f"losses {losses(rec)[-1:]} vs fp32 {losses(oracle)[-1:]}")
    rec = go("method=digest", f"workers={gpus}", "precision=bf16", "memory.checkpoint=layer",
             "method.offload_stale=true", "comm.quantize=int4")
    check("digest bf16 + checkpoint + stale tables on the host + int4 syncs", rec["status"] == "ok", "runs")
    print(f"gpu-check: {len(failures)} failed" + (f": {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
