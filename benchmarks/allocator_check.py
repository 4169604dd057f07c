"""Does the memory probe cost the timed epochs anything? `python -m benchmarks.allocator_check`

Runs one configuration (default: `method=single dataset=citeseer model=sage hidden=256 layers=3`)
with the default `malloc_mmap_threshold` (fixed during the memory-probe epochs only) and with
`malloc_mmap_threshold=null` (glibc's default throughout), interleaved, `--repeats` times each, every
run in its own process, and prints the best median epoch time of each and their ratio, with each
one's training working set. Extra `key=value` arguments are passed to every run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.datasets import PROJECT_ROOT

DEFAULT = ["method=single", "dataset=citeseer", "model=sage", "hidden=256", "layers=3"]
SETTINGS = {"default": [], "glibc": ["malloc_mmap_threshold=null"]}


def run(overrides: list[str], results: Path) -> dict:
    subprocess.run([sys.executable, "-m", "benchmarks", *overrides, f"results_dir={results}", "resume=false",
                    "log_every=0"], cwd=PROJECT_ROOT, check=True, capture_output=True)
    (path,) = results.glob("*.json")  # one record per fresh folder
    return json.loads(path.read_text())["summary"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("overrides", nargs="*", help="key=value for every run (default: %s)" % " ".join(DEFAULT))
    args = p.parse_args(argv)
    base = args.overrides or DEFAULT
    best = {name: None for name in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name, extra in SETTINGS.items():
                s = run([*base, *extra], Path(tmp) / f"{name}-{i}")
                print(f"{name:8s} run {i}: epoch {s['epoch_time_s_median']:.4f} s, "
                      f"train working set {s['train_mem_delta_bytes_max'] / 2**20:.1f} MiB", flush=True)
                if best[name] is None or s["epoch_time_s_median"] < best[name]["epoch_time_s_median"]:
                    best[name] = s
    d, g = best["default"], best["glibc"]
    print(f"best of {args.repeats}: default {d['epoch_time_s_median']:.4f} s vs glibc {g['epoch_time_s_median']:.4f} s "
          f"= {d['epoch_time_s_median'] / g['epoch_time_s_median']:.3f}x; train working set default "
          f"{d['train_mem_delta_bytes_max'] / 2**20:.1f} MiB, glibc {g['train_mem_delta_bytes_max'] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
