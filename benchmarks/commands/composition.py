"""Composing a run's configuration with Hydra, once a process for each command line, and Hydra's
errors as the suite's one line: what `python -m benchmarks` (benchmarks/commands/cli.py), the sweep driver
(benchmarks/commands/sweep.py), the tools and the tests compose with. Both the command line and the sweep
import this module; neither imports the other at module level.

Importing this module registers the config source that gives Hydra `method/<plugin>` for a plugin
with no YAML (benchmarks/commands/method_configs.py), so anything that composes after importing it can choose
any plugin."""
from __future__ import annotations

import copy
import itertools
import os

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from benchmarks.commands import method_configs# noqa: F401 (Hydra's source of method/<plugin> configs, registered)
from benchmarks.base.errors import UserError
from benchmarks.base.registry import CONF, method_names

#: Set by the sweep for a run it composed and checked before starting it (`sweep.run_one`): the run's
#: own command line does not compose it a second time.
COMPOSED = "GNNBENCH_SWEEP_COMPOSED"

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
            from benchmarks.run.config import check

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
