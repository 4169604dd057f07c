"""Tools apart from the runtime, and no method's name outside its plugin: the runtime
(`benchmarks/*.py`, its families, `methods/`) imports no tool; `benchmarks/traffic.py`, which
plugins state their traffic with, imports nothing from `analysis/` or `methods/` (nor torch);
`python -m analysis` loads no runtime module before a subcommand needs it; and the cost model and
the projection name no registered method or alias."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.registry import method_names

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[3]


def test_the_runtime_imports_no_tool():
    runtime = [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/families/*.py"), *ROOT.glob("methods/*.py")]
    assert runtime
    for path in runtime:
        assert "benchmarks.tools" not in path.read_text(), path


def test_traffic_helpers_stand_alone():
    text = (ROOT / "benchmarks" / "traffic.py").read_text()
    assert not re.search(r"^\s*(from|import) (analysis|methods)\b", text, re.M)
    code = "import sys, benchmarks.traffic; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_analysis_command_loads_no_runtime_module_at_import():
    code = ("import sys, analysis.__main__; loaded = [m for m in sys.modules if m.split('.')[0] == 'benchmarks']; "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("module", ["costmodel.py", "projection.py"])
def test_the_cost_model_names_no_method(module):
    text = (ROOT / "analysis" / module).read_text()
    named = [name for name in method_names() if re.search(rf"[\"'`]{name}[\"'`]", text)]
    assert named == [], f"analysis/{module} names {named}: state it in the plugin's hooks"
