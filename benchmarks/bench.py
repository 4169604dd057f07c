"""Helpers for benchmark scripts: run one configuration in its own process through the CLI (so
each run's memory is its own) and read back its record."""
from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.datasets import PROJECT_ROOT


def run_cli(overrides: list[str], check: bool = True) -> dict:
    """`python -m benchmarks <overrides>` in a fresh process; returns the record it wrote."""
    out = subprocess.run([sys.executable, "-m", "benchmarks", *overrides], cwd=PROJECT_ROOT, capture_output=True,
                         text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("record: ")]
    if not lines:
        raise SystemExit(f"run wrote no record: {' '.join(overrides)}\n{out.stderr[-3000:]}")
    record = json.loads((PROJECT_ROOT / lines[-1].split(" ", 1)[1]).read_text())
    if check and record["status"] != "ok":
        raise SystemExit(f"run failed: {' '.join(overrides)}: {record['error']}")
    return record


def label(record: dict) -> str:
    """method, plus its mode where it has one (sar/sa/one_shot)."""
    mode = record["config"]["method"].get("mode") if "config" in record else None
    return f"{record['method']}:{mode}" if mode else record["method"]
