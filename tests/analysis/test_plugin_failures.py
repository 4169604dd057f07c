"""One plugin's failure stays its own: a plugin whose `Cost` hooks raise, or that fails to import, is
left out of `python -m analysis advise`, `project`, the report and `python -m benchmarks --methods`
with one line naming it (its file, the error, what was asked of it, where it raised), the other
methods go on, and the command ends with status 1. Out-of-tree plugins (`write_plugins`,
GNNBENCH_METHODS_PATH); in-process calls of the CLIs' `main`."""
from __future__ import annotations

import json

import pytest

from analysis import costmodel
from analysis.__main__ import main
from benchmarks.base.registry import method_names
from tests.analysis.handmade import record, write
from tests.analysis.test_advise import CITESEER

pytestmark = pytest.mark.fast

#: A full-graph plugin whose cost-model hooks raise (it trains as its family does).
RAISES = '''
from benchmarks.families.full_graph import FullGraphMethod


class Method(FullGraphMethod):
    class Cost(FullGraphMethod.Cost):
        @classmethod
        def traffic(cls, options, model, rank):
            raise RuntimeError("this hook is broken")

        @classmethod
        def shape(cls, options, model, rank):
            raise RuntimeError("this hook is broken")
'''
#: A plugin that fails to import.
BROKEN = "import a_module_that_is_not_there\n"


def failures_named(err: str) -> dict[str, str]:
    """The `error: ` lines on stderr, by the method each names."""
    lines = [line for line in err.splitlines() if line.startswith("error: method ")]
    return {line.split()[2].rstrip(":"): line for line in lines}


def test_a_plugin_whose_cost_hooks_raise_leaves_advise_working_for_every_other_method(write_plugins, capsys,
                                                                                     tmp_path):
    folder = write_plugins({"zz_raises": RAISES, "zz_broken": BROKEN})
    others = [n for n in method_names() if not n.startswith("zz_")]
    with pytest.raises(SystemExit) as end:
        main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "2", "--hidden", "16",
              "--out", str(tmp_path / "advice")])
    assert end.value.code == 1, "a plugin failed: advise must end with status 1 once it has written the rest"
    err = capsys.readouterr().err
    failed = failures_named(err)
    assert set(failed) == {"zz_raises", "zz_broken"}, err
    assert str(folder / "zz_raises.py") in failed["zz_raises"]
    assert "RuntimeError: this hook is broken" in failed["zz_raises"]
    assert "its Cost." in failed["zz_raises"] and "zz_raises.py:" in failed["zz_raises"]
    assert "ModuleNotFoundError" in failed["zz_broken"] and "its import" in failed["zz_broken"]
    result = json.loads((tmp_path / "advice" / "advise.json").read_text())
    projected = {r["method"] for r in result["rows"]}
    left_out = {r["method"]: r["why"] for r in result["left_out"]}
    # every other method is projected, or left out for its own reason, as without the failing plugins
    assert {n for n in others if not costmodel.why_not_modelled(n)} == projected
    assert left_out["zz_raises"] == failed["zz_raises"].removeprefix("error: ")
    assert left_out["zz_broken"] == failed["zz_broken"].removeprefix("error: ")
    text = (tmp_path / "advice" / "advise.md").read_text()
    assert any(line.startswith("| zz_raises ") and "this hook is broken" in line for line in text.splitlines())


def test_a_plugin_whose_cost_hooks_raise_leaves_the_report_and_project_working(write_plugins, capsys, tmp_path):
    write_plugins({"zz_raises": RAISES})
    partition = {"nodes_per_rank": [10, 10], "edges_per_rank": [30, 30], "halo_nodes_per_rank": [5, 5],
                 "peers_per_rank": [1, 1]}
    runs = []
    for method in ("zz_raises", "full_halo"):
        r = record(method, dataset="cora", comm=10 ** 6, extra={"study": "families", "dropout": 0.0, "kernel": "spmm"},
                   layers=2, hidden=8)
        r.update(graph={"nodes": 20, "features": 4, "classes": 2}, partition=partition)
        runs.append(r)
    runs.append(record("single", workers=1, dataset="cora", extra={"study": "families"}))
    folder = write(tmp_path / "records", runs)
    with pytest.raises(SystemExit) as end:
        main(["report", str(folder), "--out", str(tmp_path / "report")])
    assert end.value.code == 1
    out, err = capsys.readouterr()
    assert (tmp_path / "report" / "report.md").exists() and "report:" in out
    assert list(failures_named(err)) == ["zz_raises"] and "this hook is broken" in err
    with pytest.raises(SystemExit) as end:
        main(["project", str(folder), "--hardware", "a100-dgx", "--out", str(tmp_path / "projection")])
    assert end.value.code == 1
    assert list(failures_named(capsys.readouterr().err)) == ["zz_raises"]
    projection = json.loads((tmp_path / "projection" / "projection.json").read_text())
    assert [r["method"] for r in projection["rows"]] == ["full_halo"]
    assert any("zz_raises" in why and "this hook is broken" in why for _, why in projection["skipped"])


def test_methods_lists_every_other_method_and_a_row_for_a_plugin_that_fails(write_plugins):
    from benchmarks.run.methods_table import describe
    folder = write_plugins({"zz_broken": BROKEN})
    failures = []
    page = describe(failures)
    (line,) = failures
    assert line.startswith(f"method zz_broken: plugin {folder / 'zz_broken.py'} raised ModuleNotFoundError")
    assert f"| `zz_broken` | `zz_broken` | failed: {line} |" in page
    assert all(f"| `{name}` |" in page for name in method_names())
