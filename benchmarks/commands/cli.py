"""`python -m benchmarks key=value ...` (console script `gnnbench`): compose with Hydra (checked first by
benchmarks/commands/composition.py, which also registers the plugins' configs), run, print where the record
went and a one-line summary. A `-m` sweep goes to benchmarks/commands/sweep.py, imported when asked for."""
from __future__ import annotations

import os
import signal
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from benchmarks.commands.composition import COMPOSED, check_composes, config_of
from benchmarks.base.errors import UserError
from benchmarks.commands.outcome import run_and_report
from benchmarks.base.registry import CONF


def _task(cfg: DictConfig, preflight=None) -> None:
    """Hydra's task: run the composed configuration (`preflight`: as `runner.run` takes it)."""
    run_and_report(OmegaConf.to_container(cfg, resolve=True), preflight)


MULTIRUN = ("-m", "--multirun")


def plain(argv: list[str]) -> bool:
    """A command line of run overrides only (`key=value`, `~key`): composed by `config_of` and run
    without Hydra's own entry point, which adds nothing to such a run (conf/config.yaml turns off its
    output folder, log file and chdir). Hydra's flags (`--cfg job`, `--help`, `-cn`) and `hydra.*`
    overrides go to `hydra.main`."""
    return all(not a.startswith("-") and not a.lstrip("~+").startswith(("hydra.", "hydra/")) for a in argv)


def main(preflight=None) -> None:
    """The command line. `preflight`: the check `python -m benchmarks` hands the launcher (the cost
    model's pre-flight memory check, from analysis/, which the runtime does not import)."""
    if any(a in MULTIRUN for a in sys.argv[1:]):
        # One sweep engine: a sweep's points run through benchmarks.commands.sweep, one process per run
        from benchmarks.commands.sweep import main as sweep_main

        sweep_main([a for a in sys.argv[1:] if a not in MULTIRUN], preflight=preflight)
        return
    argv = sys.argv[1:]
    try:  # the group choices were checked by benchmarks/__main__.py, before torch was imported
        if os.environ.get(COMPOSED) != "1":
            check_composes(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        if plain(argv):  # composed once (`config_of` keeps what check_composes composed), then run
            run_and_report(config_of(argv), preflight)
            return
        hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")(
            lambda cfg: _task(cfg, preflight))()
    except KeyboardInterrupt:  # Ctrl-C outside a run (composing, importing): nothing to record
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
