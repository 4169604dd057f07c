"""docs/adding-a-method.md's family snippets are true: each whole plugin (a block opening with
`# methods/<name>.py`) is written to a plugin folder (GNNBENCH_METHODS_PATH), listed by `--methods`
as its family, and each whole test (`# tests/methods/test_<name>.py`) is run against it as written."""
from __future__ import annotations

import re

import pytest

from analysis import costmodel
from benchmarks import PROJECT_ROOT
from benchmarks.run.method import method_class
from benchmarks.run.methods_table import family

PAGE = PROJECT_ROOT / "docs" / "adding-a-method.md"


def snippets(prefix: str) -> dict[str, str]:
    """The page's Python blocks whose first line is `# <prefix><name>.py`, by name."""
    blocks = re.findall(r"```python\n(# " + re.escape(prefix) + r"(\w+)\.py\n.*?)```", PAGE.read_text(), re.S)
    return {name: code for code, name in blocks}


PLUGINS, TESTS = snippets("methods/"), snippets("tests/methods/test_")
FAMILIES = {"my_sampler": "MiniBatchMethod", "my_subgraph": "SubgraphMethod", "my_rounds": "LocalRounds"}


def test_the_page_has_a_plugin_and_its_test_for_every_family():
    assert set(FAMILIES) <= set(PLUGINS) and set(FAMILIES) <= set(TESTS), (sorted(PLUGINS), sorted(TESTS))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_snippet_is_a_plugin_that_passes_its_documented_test(name, write_plugins, make_cfg):
    write_plugins({name: PLUGINS[name]})
    cls = method_class(name)
    assert family(cls) == FAMILIES[name], f"{name}: the page's plugin is no {FAMILIES[name]}"
    stated = getattr(cls.Cost, "not_modelled", None) if "not_modelled" in vars(cls.Cost) else None
    if stated:  # the one-line opt-out holds whatever the family's traffic
        assert costmodel.why_not_modelled(name) == f"{name} is not modelled: {stated}"
    namespace: dict = {}
    exec(compile(TESTS[name], f"{PAGE}:{name}", "exec"), namespace)
    tests = [f for key, f in namespace.items() if key.startswith("test_")]
    assert tests, f"{name}: its documented test defines no test_ function"
    for test in tests:
        test(make_cfg)
