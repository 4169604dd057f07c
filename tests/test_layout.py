"""The layout's rules, held by reading the code: tools apart from the runtime, and no method's name
outside its plugin. The runtime (`benchmarks/` but its tools, `methods/`) imports no tool and no
plugin by name, and names no method (the oracle `single` aside); it imports nothing from `analysis/`,
which stands on it, except in the entry point `benchmarks/__main__.py`, the one module above both:
it hands the launcher the cost model's pre-flight memory check (`analysis.preflight`, called by
`runner.run` through its `preflight` argument). `benchmarks/base/traffic.py`, which plugins state their
traffic with, imports nothing from `analysis/` or `methods/` (nor torch); `python -m analysis` loads
no runtime module before a subcommand needs it; the report imports nothing from the runtime or the
plugins; the cost model, the projection, the advice and the pre-flight check name no registered
method or alias and reach plugins only through the registry; plugins and families read the typed
run config, never the raw dict."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.base.registry import method_names
from benchmarks.tools.imports import ROOMS, cycles, import_graph, room_graph, runtime, upward, walk
from benchmarks import PROJECT_ROOT

pytestmark = pytest.mark.fast

ROOT = PROJECT_ROOT
#: The runtime: the package's entry point and every room but the tools.
RUNTIME = ("benchmarks/*.py", *(f"benchmarks/{room}/*.py" for room in ROOMS if room not in ("tools", "__main__")))
#: Modules the report (records to tables, figures, notebooks) is built from.
REPORT = ("analysis/records.py", "analysis/report.py", "analysis/figures.py", "analysis/markdown.py",
          "analysis/paired.py", "analysis/reference.py", "analysis/studies/*.py")


def files(*patterns: str) -> list[Path]:
    found = [p for pattern in patterns for p in ROOT.glob(pattern)]
    assert found, patterns
    return found


def imports(path: Path, module_level: bool = False) -> list[str]:
    """The modules `path` imports, read from its syntax tree: every `import m` and `from m import n`
    (as `m`; a relative import as written, with its dots), anywhere, or at module level only (what
    importing the module runs: not a function's deferred import)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return found


def test_the_import_finder_reads_every_form_and_the_cycle_finder_finds_a_loop(tmp_path):
    code = "import a.b\nfrom c import d\nfrom . import e\ndef f():\n    import g\n"
    (tmp_path / "m.py").write_text(code)
    assert imports(tmp_path / "m.py") == ["a.b", "c", ".", "g"]
    assert imports(tmp_path / "m.py", module_level=True) == ["a.b", "c", "."]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    guarded = ast.parse("import a\nif __name__ == '__main__':\n    import b\nif TYPE_CHECKING:\n    import c\n")
    assert [n.names[0].name for n in walk(guarded, deferred=True) if isinstance(n, ast.Import)] == ["a"]


def test_the_runtime_has_no_import_cycle():
    """No runtime module comes back to itself through what it imports, a function's deferred import
    included (the command line and the sweep both compose through benchmarks/commands/composition.py; the
    command line imports the sweep, never the other way)."""
    graph = import_graph(runtime(), deferred=True)
    assert "benchmarks.commands.sweep" in graph["benchmarks.commands.cli"] and not cycles(graph), cycles(graph)
    assert not cycles(import_graph(runtime()))


def test_each_room_imports_only_the_rooms_below_it():
    """benchmarks/ is rooms (`base`, `core`, `run`, `families`, `commands`, then `tools` and the entry
    point): every module lives in one, and no import, deferred or not, points to a room at or above
    its own."""
    graph = import_graph(runtime(), deferred=True)
    rooms = room_graph(graph)
    assert set(rooms) <= set(ROOMS) and not upward(rooms), upward(rooms)
    assert not rooms.get("base") and rooms["core"] == {"base"}, rooms
    loose = [p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose, f"modules outside a room: {loose}"


def test_the_runtime_imports_no_plugin_and_names_no_method():
    names = [n for n in method_names() if n != "single"]  # the oracle is the runtime's reference
    for path in files(*RUNTIME):
        assert not [m for m in imports(path) if m.startswith("methods.")], path  # the registry imports on demand
        text = path.read_text()
        assert not [n for n in names if re.search(rf"[\"']{n}[\"']", text)], path


def test_the_report_imports_nothing_from_the_runtime_or_the_plugins():
    for path in files(*REPORT):
        assert not [m for m in imports(path) if m.split(".")[0] in ("benchmarks", "methods")], path


def test_the_cost_model_reaches_plugins_only_through_the_registry():
    for path in files("analysis/costmodel.py", "analysis/projection.py", "analysis/advise.py", "analysis/recommend.py",
                      "analysis/preflight.py"):
        assert not [m for m in imports(path) if m.split(".")[0] == "methods"], path


def raw_reads(tree: ast.AST) -> list[str]:
    """Where a configuration is read as a dict: `cfg[...]`, `cfg.get(...)` (or `config`), and any
    `....as_dict()[...]` / `....as_dict().get(...)`, by line."""
    def is_raw(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("cfg", "config")) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "as_dict")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_raw(node.value):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and is_raw(node.func.value):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_raw_read_finder_sees_every_form():
    code = "cfg['a']; config.get('b'); run.as_dict()['dataset']; run.as_dict().get('c'); run.dataset; d['e']"
    assert [f.split(": ", 1)[1] for f in raw_reads(ast.parse(code))] == [
        "cfg['a']", "config.get('b')", "run.as_dict()['dataset']", "run.as_dict().get('c')"]


def test_plugins_and_families_read_the_typed_config():
    for path in files("methods/*.py", "benchmarks/families/*.py", "benchmarks/run/train.py", "benchmarks/run/runner.py",
                      "benchmarks/run/method.py"):
        assert not raw_reads(ast.parse(path.read_text())), (path, raw_reads(ast.parse(path.read_text())))


#: The one module above both the runtime and analysis, and what it may take from analysis.
ENTRY_POINT, ENTRY_POINT_TAKES = ROOT / "benchmarks" / "__main__.py", ["analysis.preflight"]


def test_the_runtime_imports_nothing_from_analysis_but_the_entry_point_takes_the_preflight_check():
    for path in files(*RUNTIME, "methods/*.py"):
        taken = [m for m in imports(path) if m.split(".")[0] == "analysis"]
        assert taken == (ENTRY_POINT_TAKES if path == ENTRY_POINT else []), path


def test_the_runtime_imports_no_tool():
    for path in files(*RUNTIME, "methods/*.py"):
        assert not [m for m in imports(path) if m.startswith("benchmarks.tools")], path


def test_traffic_helpers_stand_alone():
    text = (ROOT / "benchmarks" / "base" / "traffic.py").read_text()
    assert not re.search(r"^\s*(from|import) (analysis|methods)\b", text, re.M)
    code = "import sys, benchmarks.base.traffic; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_analysis_command_loads_no_runtime_module_at_import():
    code = ("import sys, analysis.__main__; loaded = [m for m in sys.modules if m.split('.')[0] == 'benchmarks']; "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("module", ["costmodel.py", "projection.py", "advise.py", "recommend.py", "preflight.py"])
def test_the_cost_model_names_no_method(module):
    text = (ROOT / "analysis" / module).read_text()
    named = [name for name in method_names() if re.search(rf"[\"'`]{name}[\"'`]", text)]
    assert named == [], f"analysis/{module} names {named}: state it in the plugin's hooks"
