"""Which names a run can choose, found without importing torch or any plugin (so a misspelt choice,
`method=sra`, is refused in a fraction of a second): method plugins (modules in methods/ and
GNNBENCH_METHODS_PATH), the aliases in conf/method/, each config group's YAMLs.
`benchmarks.run.method.method_class` is what imports the plugin a name runs, and only that one. What was
found is cached, keyed by the plugin folders, so a run looks once."""
from __future__ import annotations

import copy
import functools
import os
import pkgutil
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks import PROJECT_ROOT
from benchmarks.base.errors import choose

CONF = PROJECT_ROOT / "conf"
#: Config groups a command line chooses from (`method=...`), and what each chooses (the option
#: reference, `python -m benchmarks --options`, prints it beside the choices).
GROUPS = {
    "method": "the training method: every plugin in methods/ or GNNBENCH_METHODS_PATH and every alias in "
              "conf/method/; its options are `method.<option>=<value>` (`python -m benchmarks --methods` lists "
              "each method's family, exact control and options)",
    "dataset": "`synthetic`: a degree-corrected stochastic block model whose blocks are the classes, no download "
               "(its options below); `synthetic-products`: the same generator at ogbn-products' size (2.45M nodes, "
               "62M edges, 100 features, 47 classes; `name: synthetic`); `cora-full`, `citeseer-full`, `pubmed-full`: "
               "the Planetoid graph with the full split (every node outside the public validation and test sets "
               "trains, PyG's `split=\"full\"`); the others are read from `data_root` (Cora and CiteSeer ship in "
               "data/; PubMed, Reddit, Flickr and the OGB datasets are downloaded "
               "there when online)",
    "model": "`gcn`, `sage` (mean), `gat` (`model.heads`; `model.heads_concat=false`: every layer has `heads` "
             "full-width heads, averaged, as DGL's GATConv in SAR's examples), `mlp` (features only)",
    "experiment": "a preset from conf/experiment/ (e.g. `experiment=sar_memory`): a study's or a paper table's "
                  "configuration and sweep",
}


def plugin_path() -> tuple[str, ...]:
    """The folders plugins are found in: the `methods` package, plus folders in GNNBENCH_METHODS_PATH
    (out-of-tree plugins; spawned ranks inherit the variable, so they find the same plugins). It
    follows the variable as it is now, and `methods.__path__` with it, so `methods.<name>` imports
    from these folders; what was discovered is cached per path."""
    import methods

    extra = filter(None, os.environ.get("GNNBENCH_METHODS_PATH", "").split(os.pathsep))
    path = (str(Path(methods.__file__).parent), *extra)
    methods.__path__[:] = path
    return path


def plugin_names() -> list[str]:
    """The plugin modules (methods/ and GNNBENCH_METHODS_PATH), found without importing any."""
    return list(_discover(plugin_path())[0])


def yaml_names() -> set[str]:
    """The methods with a YAML of their own in conf/method/ (aliases, and plugins that keep one)."""
    return set(_discover(plugin_path())[2])


def aliases() -> dict[str, dict]:
    """conf/method/<alias>.yaml files that name a `plugin`: {alias: its YAML as a dict}. Aliases of a
    plugin that does not exist here are left out."""
    return copy.deepcopy(_discover(plugin_path())[1])


def alias_of(name: str) -> dict | None:
    """Alias `name`'s YAML as a dict (a copy), or None where `name` is no alias."""
    found = _discover(plugin_path())[1].get(name)
    return copy.deepcopy(found) if found is not None else None


def plugin_of(name: str) -> str:
    """The plugin `method=<name>` runs: an alias's plugin, else the name itself."""
    return _discover(plugin_path())[1].get(name, {}).get("plugin", name)


@functools.cache
def _discover(path: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, dict], tuple[str, ...]]:
    """(plugins, aliases, every YAML's name in conf/method/), read once per plugin path."""
    plugins = tuple(sorted(m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_")))
    found, yamls = {}, []
    for yaml_path in sorted((CONF / "method").glob("*.yaml")):
        yamls.append(yaml_path.stem)
        yaml = OmegaConf.to_container(OmegaConf.load(yaml_path))
        if isinstance(yaml, dict) and yaml.get("plugin") in plugins:
            found[yaml_path.stem] = yaml
    return plugins, found, tuple(yamls)


def method_names() -> list[str]:
    """Every name `method=` accepts: plugins and aliases."""
    plugins, found, _ = _discover(plugin_path())
    return sorted(set(plugins) | set(found))


def group_options(group: str) -> list[str]:
    """The choices of a config group: its YAMLs (and for `method`, every plugin and alias)."""
    if group == "method":
        return method_names()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def check_overrides(argv: list[str]) -> None:
    """Unknown config-group choices get the suite's one-line error before Hydra's longer one."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key in GROUPS:
            for choice in value.split(","):
                choose(key, choice, group_options(key))
