"""`python -m benchmarks key=value ...` (console script `gnnbench`): compose with Hydra, run, print
where the record went and a one-line summary.

Importing this module registers Hydra's `method/<name>` node of every plugin (its name and declared
option defaults), so anything that composes after importing it (`python -m benchmarks`, the sweep
driver, the tests) can choose a plugin that has no YAML."""
from __future__ import annotations

import signal
import sys

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from benchmarks.errors import Stopped, UserError, choose
from benchmarks.method import CONF, method_class, method_names, plugin_names
from benchmarks.options import defaults

GROUPS = ("method", "dataset", "model", "experiment")


def group_options(group: str) -> list[str]:
    """The choices of a config group: its YAMLs (and for `method`, every plugin and alias)."""
    if group == "method":
        return registered_methods()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def check_overrides(argv: list[str]) -> None:
    """Unknown config-group choices get the suite's one-line error before Hydra's longer one."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key in GROUPS:
            for choice in value.split(","):
                choose(key, choice, group_options(key))


def register_method_configs() -> None:
    """Hydra's `method/<plugin>` node, {name, **declared defaults}, for every plugin (methods/ and
    GNNBENCH_METHODS_PATH): `method=<plugin> method.<option>=<value>` then composes with no YAML, and
    an alias YAML pulls its plugin's node with `- <plugin>@_here_`. A YAML named like a plugin takes
    the node's place (Hydra would otherwise validate it against the node, a deprecated behaviour).
    Idempotent: call it again after changing GNNBENCH_METHODS_PATH."""
    yamls = {p.stem for p in (CONF / "method").glob("*.yaml")}
    for name in plugin_names():
        if name in yamls:
            continue
        try:
            options = method_class(name).Options
        except Exception as e:  # one broken plugin must not take every other method down with it
            print(f"warning: method plugin '{name}' does not import ({type(e).__name__}: {e}); it cannot be chosen",
                  file=sys.stderr)
            continue
        ConfigStore.instance().store(group="method", name=name, node={"name": name, **defaults(options)})


def summary_line(record: dict) -> str:
    head = f"{record['method']} {record['dataset']} {record['model']} workers={record['workers']}"
    if record["status"] != "ok":
        return f"{head}: FAILED: {record['error']}"
    s = record["summary"]
    gib = 1024 ** 3
    acc = (f"best val {s['best_val_acc']:.4f}, test {s['test_acc_at_best_val']:.4f}"
           if s["best_val_acc"] is not None else "no evaluation")
    return (f"{head}: epoch {s['epoch_time_s_median']:.4f} s (median), {acc}, "
            f"peak RSS {s['peak_rss_bytes_max'] / gib:.2f} GiB/rank (train +{s['train_mem_delta_bytes_max'] / gib:.3f}), "
            f"comm {s['comm_bytes_per_epoch'] / 1e6:.2f} MB/epoch")


def registered_methods() -> list[str]:
    """Methods that can run: every plugin (methods/, GNNBENCH_METHODS_PATH) and every alias."""
    return method_names()


register_method_configs()
# `${all_methods:}` in a preset's `hydra.sweeper.params` sweeps every registered method, including
# plugins added later (conf/experiment/quickstart.yaml).
OmegaConf.register_new_resolver("all_methods", lambda: ",".join(registered_methods()), replace=True)

_failures = []  # exit statuses of the jobs of a multirun that did not succeed


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from benchmarks.runner import run

    # In a sweep (-m) a failed job is recorded and the sweep goes on; main() exits non-zero at the end.
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        path, record = run(OmegaConf.to_container(cfg, resolve=True), log=lambda m: print(m, file=sys.stderr))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        _failures.append(2)
        return
    except Stopped as e:  # a stop ends a multirun too
        where = f"record {e.record} (failed)" if e.record else "no record (stopped before training)"
        print(f"{e}: {where}", file=sys.stderr)
        sys.exit(128 + e.signum)
    if record:  # torchrun ranks other than 0 have nothing to report
        print(f"record: {path}")
        print(summary_line(record), flush=True)
        if record["status"] != "ok":
            if not multirun:
                sys.exit(1)
            _failures.append(1)


def main() -> None:
    try:
        check_overrides(sys.argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        _hydra_main()
    except KeyboardInterrupt:  # Ctrl-C outside a run (composing, importing): nothing to record
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    if _failures:
        print(f"{len(_failures)} job(s) of the sweep failed (see their records)", file=sys.stderr)
        sys.exit(max(_failures))
