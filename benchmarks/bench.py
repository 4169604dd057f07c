"""Helpers for benchmark scripts: run one configuration in its own process through the CLI (so
each run's memory is its own) and read back its record."""
from __future__ import annotations

import functools
import json
import subprocess
import sys

from benchmarks.datasets import PROJECT_ROOT
from benchmarks.options import RESERVED


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


@functools.lru_cache(maxsize=None)  # resolved once per method, not once per record
def method_defaults(name: str) -> dict:
    """The options a method has when none is given on the command line (`benchmarks.method.
    method_defaults`); {} for a method this checkout does not have."""
    from benchmarks.method import method_defaults, method_names

    return method_defaults(name) if name in method_names() else {}


def label(record: dict) -> str:
    """The method, plus the options that differ from its defaults, which tell variants apart
    (`sar`, `sar mode=sa`, `digest sync_every=4`); new methods and options need no change here."""
    options = {k: v for k, v in record.get("config", {}).get("method", {}).items() if k not in RESERVED}
    defaults = method_defaults(record["method"])
    extra = [f"{k}={v}" for k, v in sorted(options.items()) if k not in defaults or defaults[k] != v]
    return " ".join([record["method"], *extra])
