"""`python -m benchmarks key=value ...` (console script `gnnbench`): compose with Hydra, run, print
where the record went and a one-line summary.

Importing this module registers the config source that gives Hydra `method/<plugin>` for a plugin
with no YAML (benchmarks/method_configs.py), so anything that composes after importing it
(`python -m benchmarks`, the sweep driver, the tests) can choose any plugin."""
from __future__ import annotations

import copy
import itertools
import os
import signal
import sys

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from benchmarks import method_configs  # noqa: F401 (Hydra's source of method/<plugin> configs, registered)
from benchmarks.errors import MemoryChecked, Stopped, UserError
from benchmarks.registry import CONF, method_names


def summary_line(record: dict) -> str:
    head = f"{record['method']} {record['dataset']} {record['model']} workers={record['workers']}"
    if record["status"] != "ok":
        return f"{head}: FAILED: {record['error']}"
    s = record["summary"]
    gib = 1024 ** 3
    if s["best_val_acc"] is None:
        acc = "no evaluation"
    elif s.get("selected_epoch", s["best_epoch"]) != s["best_epoch"]:  # a stopping rule chose another model
        acc = (f"stopped at epoch {record['history'][-1]['epoch'] + 1}, model of epoch {s['selected_epoch'] + 1}: "
               f"val {s['val_acc_selected']:.4f}, test {s['test_acc_selected']:.4f}")
    else:
        acc = f"best val {s['best_val_acc']:.4f}, test {s['test_acc_at_best_val']:.4f}"
    return (f"{head}: epoch {s['epoch_time_s_median']:.4f} s (median), {acc}, "
            f"peak RSS {s['peak_rss_bytes_max'] / gib:.2f} GiB/rank (train +{s['train_mem_delta_bytes_max'] / gib:.3f}), "
            f"comm {s['comm_bytes_per_epoch'] / 1e6:.2f} MB/epoch")


# `${all_methods:}` in a preset's `hydra.sweeper.params` sweeps every registered method, including
# plugins added later (conf/experiment/quickstart.yaml).
OmegaConf.register_new_resolver("all_methods", lambda: ",".join(method_names()), replace=True)


# --------------------------------------------------------------------------- Hydra's errors, one line
def composition_error(e: Exception, overrides: list[str]) -> UserError:
    """Hydra's error for overrides it cannot apply (several lines) as the suite's one line. A key the
    config lacks (`epoch=5`, `method.unknown=1`) gets the message the schema gives `+epoch=5`:
    `unknown key epoch; valid keys are: ...`."""
    key = getattr(e.__cause__, "full_key", None)  # OmegaConf names the key it has no place for
    if isinstance(e.__cause__, (ConfigAttributeError, ConfigKeyError)) and key:
        added = [f"+{o}" if o.split("=", 1)[0] == key else o for o in overrides]
        try:
            from benchmarks.config import check

            check(config_of(added))
        except UserError as schema:
            return schema
        except Exception:  # noqa: BLE001 (the generic line below says what Hydra said)
            pass
    cause = str(e.__cause__).strip().splitlines()[0] if e.__cause__ is not None and str(e.__cause__).strip() else ""
    said = " ".join(line.strip() for line in str(e).strip().splitlines()[:2])
    return UserError(said + (f" ({cause})" if cause else ""))


def config_of(overrides: list[str]) -> dict:
    """The run configuration these overrides compose to, resolved (Hydra's errors raised as they are).
    Composed once per process for each distinct command line and plugin path (`_CONFIGS`: about 0.1 s a
    compose; a sweep checks every run before the first starts, a test session composes the same few
    configurations again and again); each caller gets a copy of its own."""
    key = (tuple(overrides), os.environ.get("GNNBENCH_METHODS_PATH", ""))
    if key not in _CONFIGS:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            _CONFIGS[key] = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    return copy.deepcopy(_CONFIGS[key])


#: (overrides, plugin path) -> the resolved configuration: the YAML under conf/ and the plugins' own are
#: read as they are when first composed (a process that edits them while it runs composes what it first read).
_CONFIGS: dict[tuple, dict] = {}


def check_composes(argv: list[str]) -> None:
    """Compose the command line's configuration (every point of a `-m` sweep on it) before Hydra
    does, so an override Hydra cannot apply is one line (UserError), not Hydra's paragraph. A command
    line that names another config (`--config-name`...) or a sweep this cannot expand is left to Hydra."""
    if any(a.startswith(("-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir")) for a in argv):
        return
    overrides = [a for a in argv if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    parsed = []
    for override in overrides:
        try:
            parsed += OverridesParser.create().parse_overrides([override])
        except HydraException as e:
            reason = next((line for line in str(e).splitlines() if line.strip() and not line.startswith("See ")), "")
            raise UserError(f"cannot parse the override {override!r}: {reason.strip()} (the grammar: "
                            "https://hydra.cc/docs/advanced/override_grammar/basic)") from None
    try:
        values = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                  else [o.input_line] for o in parsed]
    except Exception:  # noqa: BLE001 (an interval or glob sweep: Hydra expands it)
        return
    for point in itertools.product(*values):
        try:
            config_of(list(point))
        except (HydraException, OmegaConfBaseException) as e:
            raise composition_error(e, list(point)) from None


def _task(cfg: DictConfig, preflight=None) -> None:
    """Hydra's task: run the composed configuration (`preflight`: as `runner.run` takes it)."""
    run_and_report(OmegaConf.to_container(cfg, resolve=True), preflight)


def run_and_report(config: dict, preflight=None) -> None:
    """Run a composed configuration and print where its record went and its summary line; exits 2 on
    bad input, 1 on a failed run, 128 + signal on a stop (what `python -m benchmarks` exits with; a
    sweep's forked run calls this too)."""
    from benchmarks.runner import run

    try:
        path, record = run(config, log=lambda m: print(m, file=sys.stderr), preflight=preflight)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except MemoryChecked as e:  # --check-memory: the answer, nothing run
        print(e, flush=True)
        sys.exit(0 if e.fits else 2)
    except Stopped as e:  # a stop ends a multirun too
        where = f"record {e.record} (failed)" if e.record else "no record (stopped before training)"
        print(f"{e}: {where}", file=sys.stderr)
        sys.exit(128 + e.signum)
    if record:  # torchrun ranks other than 0 have nothing to report
        print(f"record: {path}")
        print(summary_line(record), flush=True)
        if record["status"] != "ok":
            sys.exit(1)


MULTIRUN = ("-m", "--multirun")
#: Set by the sweep for a run it composed and checked before starting it (`sweep.run_one`).
COMPOSED = "GNNBENCH_SWEEP_COMPOSED"


def main(preflight=None) -> None:
    """The command line. `preflight`: the check `python -m benchmarks` hands the launcher (the cost
    model's pre-flight memory check, from analysis/, which the runtime does not import)."""
    if any(a in MULTIRUN for a in sys.argv[1:]):
        # One sweep engine: a sweep's points run through benchmarks.sweep, one process per run
        from benchmarks.sweep import main as sweep_main

        sweep_main([a for a in sys.argv[1:] if a not in MULTIRUN])
        return
    try:  # the group choices were checked by benchmarks/__main__.py, before torch was imported
        if os.environ.get(COMPOSED) != "1":
            check_composes(sys.argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")(
            lambda cfg: _task(cfg, preflight))()
    except KeyboardInterrupt:  # Ctrl-C outside a run (composing, importing): nothing to record
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
