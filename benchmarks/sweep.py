"""`python -m benchmarks.sweep experiment=<preset> [key=value | key=a,b ...] [--dry-run]`: run a
preset's sweep, each run in its own process (so each run's memory is its own), resuming.

The sweep's axes are the preset's `hydra.sweeper.params` (the same ones `python -m benchmarks -m
experiment=<preset>` uses), with comma lists on this command line added or replacing them. A
preset sweeps every registered method with `method: ${all_methods:}`, so plugins added later are
picked up with no change. A run whose `ok` record exists is skipped (`resume=false` reruns it); a
failed run is recorded and the sweep goes on; a method the preset names but this checkout does
not have (a paper table's method not written yet) is skipped with a message. `--dry-run` prints the
command of each run still missing, for `torchrun` or a cluster scheduler.
"""
from __future__ import annotations

import itertools
import shlex
import subprocess
import sys

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from benchmarks.cli import CONF, check_overrides, registered_methods
from benchmarks.errors import UserError


def _values(override) -> list[str]:
    """A sweep's values (`a,b,c`), or the one value of a plain `key=value`."""
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [override.input_line.split("=", 1)[1]]


def expand(argv: list[str]) -> tuple[list[list[str]], list[str]]:
    """The runs (override lists) of a sweep, and the methods it names that do not exist here."""
    parsed = OverridesParser.create().parse_overrides(argv)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
    axes = {o.key_or_group: _values(o) for o in OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()])}
    for o in parsed:  # the command line wins over the preset
        axes.pop(o.key_or_group, None)
        if o.is_sweep_override():
            axes[o.key_or_group] = _values(o)
    from benchmarks.method import method_class

    available = registered_methods()

    runs, missing, seen = [], [], set()
    for values in itertools.product(*axes.values()):
        job = dict(zip(axes, values))
        method = job.get("method", cfg.method.name)
        if method not in available:
            missing.append(method)
            continue
        if method_class(method).single_process:  # it ignores `workers`: one run, not one per count
            job.pop("workers", None)
        overrides = fixed + [f"{k}={v}" for k, v in job.items()]
        if tuple(overrides) not in seen:
            seen.add(tuple(overrides))
            runs.append(overrides)
    return runs, sorted(set(missing))


def existing(overrides: list[str]) -> bool:
    """Whether this run's `ok` record exists already (and resume is on)."""
    from benchmarks.record import ok_record, record_path
    from benchmarks.runner import ranks

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    return bool(cfg["resume"]) and ok_record(record_path(cfg, ranks(cfg))) is not None


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        check_overrides(argv)
        runs, missing = expand(argv)
    except UserError as e:
        sys.exit(f"error: {e}")
    for name in missing:
        print(f"skip: method '{name}' is not available in this checkout (methods: "
              f"{', '.join(registered_methods())})", flush=True)
    counts = {"ok": 0, "kept": 0, "failed": 0}
    for i, overrides in enumerate(runs, 1):
        head = f"[{i}/{len(runs)}] {' '.join(overrides)}"
        if existing(overrides):
            counts["kept"] += 1
            print(f"{head}: kept (ok record exists)", flush=True)
            continue
        if dry_run:
            print(f"python -m benchmarks {shlex.join(overrides)}")
            continue
        print(head, flush=True)
        out = subprocess.run([sys.executable, "-m", "benchmarks", *overrides], capture_output=True,
                             text=True)
        lines = out.stdout.strip().splitlines() or out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        print(f"  {lines[-1]}", flush=True)
        counts["ok" if out.returncode == 0 else "failed"] += 1
    if not dry_run:
        print(f"sweep: {len(runs)} runs: {counts['ok']} ran, {counts['kept']} kept, {counts['failed']} failed"
              + (f"; {len(missing)} method(s) not available: {', '.join(missing)}" if missing else ""), flush=True)
    if counts["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
