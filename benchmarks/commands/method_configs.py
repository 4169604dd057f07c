"""Hydra's `method/<plugin>` configs, made from each plugin's declared options when Hydra asks for
one, so that `method=<plugin> method.<option>=<value>` composes with no YAML and only the chosen
plugin's module is imported (a plugin folder's other files never are).

Hydra looks configs up through its config sources; `PluginConfigs` is one more, reached through
the search path entry `gnnbench://methods` in conf/config.yaml. It answers for the plugins that
have no YAML of their own (a YAML named like a plugin wins); an alias YAML pulls its plugin's
config with `- <plugin>@_here_`. Which plugins exist is the registry's (`benchmarks.base.registry`),
so plugins in GNNBENCH_METHODS_PATH are found as they are today.
"""
from __future__ import annotations

from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from omegaconf import OmegaConf

from benchmarks.base.registry import plugin_names, yaml_names


def _without_yaml() -> list[str]:
    yamls = yaml_names()  # the registry's scan, cached: Hydra asks this source many times per compose
    return [name for name in plugin_names() if name not in yamls]


class PluginConfigs(ConfigSource):
    """Hydra's config source for `method/<plugin>`: {name, every declared option's default}."""

    @staticmethod
    def scheme() -> str:
        return "gnnbench"

    def load_config(self, config_path: str) -> ConfigResult:
        from benchmarks.run.method import method_class
        from benchmarks.base.options import defaults

        name = self._normalize_file_name(config_path)[len("method/"):-len(".yaml")]
        node = {"name": name, **defaults(method_class(name).Options)}  # imports this plugin, and no other
        return ConfigResult(config=OmegaConf.create(node), path=f"{self.scheme()}://{self.path}",
                            provider="gnnbench method plugins", header={"package": None})

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") == "method"

    def is_config(self, config_path: str) -> bool:
        group, _, name = config_path.strip("/").removesuffix(".yaml").partition("/")
        return group == "method" and name in _without_yaml()

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        if not self.is_group(config_path) or results_filter == ObjectType.GROUP:
            return []
        return _without_yaml()


SourcesRegistry.instance().register(PluginConfigs)
