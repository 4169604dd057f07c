"""Hostile input to `python -m analysis project` and `report` (review-reliability-2026-12, D8-D12,
D18, D21): bad arguments, hand-edited records and statistics, unwritable or full output folders each
end in one line (status 2), or a skipped record named in one line while the rest is reported; never
a traceback, never half a report. In-process calls of the CLI's `main`, on hand-made records."""
from __future__ import annotations

import errno
import os
import json
from pathlib import Path

import pytest

from analysis import PROJECT_ROOT
from analysis import records as rec
from analysis.__main__ import main
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast


def projectable(seed=0, **edits) -> dict:
    """A hand-made full_halo record with what the projection reads: its graph and partition."""
    r = {**record("full_halo", 2, seed=seed, comm=1000),
         "graph": {"name": "synthetic", "nodes": 20, "edges": 60, "features": 4, "classes": 2},
         "partition": {"nodes_per_rank": [10, 10], "edges_per_rank": [30, 30], "halo_nodes_per_rank": [5, 5]}}
    r.update(edits)
    return r


def one_line_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.fixture
def folder(tmp_path) -> Path:
    return write(tmp_path / "records", [projectable()])


def project(folder, *args) -> list[str]:
    return ["project", str(folder), "--hardware", "a100-dgx", *args]


def test_d8_hidden_width_below_one_is_refused_in_one_line(folder, tmp_path, capsys):
    for hidden in ("-5", "0", "wide"):
        err = one_line_error(capsys, project(folder, "--workers", "16", "--graph", "ogbn-products",
                                             "--hidden", hidden, "--out", str(tmp_path / "p")))
        assert f"--hidden takes whole numbers of at least 1 (got '{hidden}')" in err
    assert "give those too" in one_line_error(capsys, project(folder, "--hidden", "64"))  # nothing to widen
    assert not (tmp_path / "p").exists()


def test_d9_a_statistics_file_of_the_wrong_shape_is_named_in_one_line(folder, tmp_path, capsys):
    for i, stats in enumerate(({"graph": 5}, {"graph": {"name": "g", "nodes": 9, "features": 4, "classes": 2}},
                               {"graph": {"name": "g", "nodes": 9, "features": 4, "classes": 2},
                                "by_workers": {"2": {"nodes_per_rank": "many"}}})):
        path = tmp_path / f"s{i}.json"
        path.write_text(json.dumps(stats))
        err = one_line_error(capsys, project(folder, "--workers", "2", "--graph", str(path)))
        assert f"--graph {path}: not a partition-statistics file (" in err


def test_d10_a_record_the_projection_cannot_use_is_skipped_by_name_and_the_rest_projected(folder, tmp_path, capsys):
    bad = {"no_partition": projectable(1), "no_features": projectable(2), "transformer": projectable(3)}
    del bad["no_partition"]["partition"]
    del bad["no_features"]["graph"]["features"]
    bad["transformer"]["config"]["model"]["name"] = bad["transformer"]["model"] = "transformer"
    for name, r in bad.items():
        (folder / f"{name}.json").write_text(json.dumps(r))
    main(project(folder, "--out", str(tmp_path / "p")))
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert out.out.startswith("projection: ") and len(lines) == 3, out.err
    for name, why in (("no_partition", "missing field 'partition'"), ("no_features", "missing field 'graph.features'"),
                      ("transformer", "unknown model 'transformer'")):
        assert any(line.startswith("skipping record ") and f"{name}.json" in line and why in line for line in lines), (
            name, lines)
    rows = json.loads((tmp_path / "p" / "projection.json").read_text())["rows"]
    assert [(r["method"], r["seed"]) for r in rows] == [("full_halo", 0)]


def test_d11_more_workers_than_the_graph_has_nodes_is_refused(folder, tmp_path, capsys):
    err = one_line_error(capsys, project(folder, "--workers", "100000000", "--graph", "ogbn-products"))
    assert "--workers 100000000 exceeds the 2449029 nodes of ogbn-products; use at most 2449029" in err
    stats = PROJECT_ROOT / "data" / "partition_stats" / "citeseer-metis.json"
    assert "exceeds the 3327 nodes of citeseer" in one_line_error(
        capsys, project(folder, "--workers", "8,4000", "--graph", str(stats)))
    for workers in ("0", "-2", "abc"):
        assert "--workers takes positive integers" in one_line_error(
            capsys, project(folder, "--workers", workers, "--graph", "ogbn-products"))
    assert not (tmp_path / "records" / "projection.md").exists()


def test_d12_an_output_that_is_not_a_writable_folder_is_refused_before_any_work(folder, tmp_path, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("records read before --out was checked")
    monkeypatch.setattr(rec, "load", no_work)
    afile = tmp_path / "afile"
    afile.write_text("")
    for argv in (["report", str(folder), "--out", str(afile)], project(folder, "--out", str(afile))):
        assert f"--out={afile} is a file, not a folder" in one_line_error(capsys, argv)
    assert "--out=/proc/x_rep is not a writable folder" in one_line_error(
        capsys, ["report", str(folder), "--out", "/proc/x_rep"])


def test_d18_a_record_with_a_field_of_the_wrong_kind_is_skipped_and_the_report_made(folder, tmp_path, capsys):
    for name, edit in (("variant_null", {"variant": None}), ("dataset_123", {"dataset": 123}),
                       ("workers_text", {"workers": "2"}), ("error_list", {"error": ["x"]}),
                       ("no_setting", {"setting": ""}), ("history_text", {"history": ["x"]})):
        (folder / f"{name}.json").write_text(json.dumps({**projectable(seed=len(name)), **edit}))
    main(["report", str(folder), "--out", str(tmp_path / "rep")])
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert out.out.startswith("report: ") and (tmp_path / "rep" / "report.md").exists()
    assert len([line for line in lines if line.startswith("skipping record ")]) == 6, lines
    for name, why in (("variant_null", "field 'variant' is None, not a name"),
                      ("dataset_123", "field 'dataset' is 123, not a name"),
                      ("workers_text", "field 'workers' is '2', not a whole number")):
        assert any(f"{name}.json: {why}" in line for line in lines), (name, lines)


@pytest.mark.parametrize("edit", [{"variant": None}, {"dataset": 123}, {"model": ["sage"]}, {"seed": True},
                                  {"workers": 0}, {"config": None}, {"setting_config": "x"}, {"env": "x"},
                                  {"summary": 5}, {"history": [3]}])
def test_d18_check_names_the_field_of_the_wrong_kind(edit):
    with pytest.raises(rec.BadRecord, match=f"'{next(iter(edit))}'"):
        rec.check({**record(), **edit})
    rec.check(record())


def enospc(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("fails", ["a figure", "report.md"])
def test_d21_a_full_disk_ends_the_report_in_one_line_and_leaves_no_half_report(folder, tmp_path, capsys,
                                                                               monkeypatch, fails):
    """The disk fills up while the figures are saved (the second one) or while report.md is written:
    one line naming the report and where, and the folder as it was (an earlier report kept whole)."""
    import matplotlib.figure
    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.md").write_text("the earlier report")
    if fails == "a figure":
        calls, savefig = [], matplotlib.figure.Figure.savefig

        def filling(self, *a, **k):
            calls.append(1)
            return enospc() if len(calls) > 2 else savefig(self, *a, **k)
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", filling)
    else:
        write_text = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: enospc() if self.name == "report.md"
                            else write_text(self, *a, **k))
    err = one_line_error(capsys, ["report", str(folder), "--out", str(out)])
    assert err == f"error: could not write the report to {out} (No space left on device)"
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]
    assert (out / "report.md").read_text() == "the earlier report"


# Round three (review-reliability-r3.md, issue 50): publishing next to the records (D1).

def test_r3_d1_publish_refuses_a_page_whose_figure_folder_is_not_its_own_and_deletes_nothing(folder, tmp_path,
                                                                                              capsys):
    """A8: the page `records.md` beside the records folder `records/` would put its figures in the
    records; A9: `pub/notes.md` beside someone's `pub/notes/`. Each is refused in one line before
    anything is written, and both folders keep every file (they were deleted whole)."""
    from analysis.report import publish
    records = sorted(p.name for p in folder.iterdir())
    page = folder.parent / f"{folder.name}.md"
    err = one_line_error(capsys, ["report", str(folder), "--publish", str(page)])
    assert f"--publish {page} would put its figures in {folder}, which exists and is not a previous publication" in err
    assert sorted(p.name for p in folder.iterdir()) == records and not page.exists()
    notes = tmp_path / "pub" / "notes"
    notes.mkdir(parents=True)
    (notes / "important.txt").write_text("keep me")
    assert f"in {notes}, which exists" in one_line_error(
        capsys, ["report", str(folder), "--publish", str(tmp_path / "pub" / "notes.md")])
    assert [p.name for p in (tmp_path / "pub").iterdir()] == ["notes"]
    assert [p.name for p in notes.iterdir()] == ["important.txt"] and (notes / "important.txt").read_text() == "keep me"
    with pytest.raises(FileExistsError, match="is not a previous publication"):  # the library call refuses too
        publish(folder, page)
    assert sorted(p.name for p in folder.iterdir()) == records


def test_r3_d1_a_page_published_again_replaces_its_own_figure_folder_whole(folder, tmp_path, capsys, monkeypatch):
    """Publishing a page again replaces the folder its previous publication marked (a stale figure
    goes); when putting the new folder in place fails, the previous one is back and the page as it was."""
    from analysis.report import MARK
    page = tmp_path / "pub" / "quick.md"
    main(["report", str(folder), "--publish", str(page)])
    figures = page.parent / "quick"
    assert (figures / MARK).is_file() and list((figures / "figures").glob("*.png"))
    (figures / "figures" / "stale.png").write_text("a figure the page no longer has")
    main(["report", str(folder), "--publish", str(page)])
    assert (figures / MARK).is_file() and not (figures / "figures" / "stale.png").exists()
    assert sorted(p.name for p in page.parent.iterdir()) == ["quick", "quick.md"]  # nothing staged is left
    (figures / "figures" / "stale.png").write_text("kept: the new folder could not be put in place")
    (page).write_text("the earlier page")
    rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: enospc() if Path(b) == figures and ".previous" not in str(a)
                        else rename(a, b))
    err = one_line_error(capsys, ["report", str(folder), "--publish", str(page)])
    assert err == f"error: could not write the results page to {page} (No space left on device)"
    assert (figures / "figures" / "stale.png").is_file() and (figures / MARK).is_file()
    assert page.read_text() == "the earlier page" and sorted(p.name for p in page.parent.iterdir()) == ["quick",
                                                                                                          "quick.md"]


# Round three (review-reliability-r3.md, issue 50): a malformed partition-statistics file (D9).

SHIPPED_STATS = sorted((PROJECT_ROOT / "data" / "partition_stats").glob("*.json"))


def _cut_entry(entry):
    for key in ("edge_cut", "fractions", "summary"):
        del entry[key]


def _empty_lists(entry):
    for key in ("nodes_per_rank", "edges_per_rank", "halo_nodes_per_rank", "peers_per_rank", "train_nodes_per_rank"):
        entry[key] = []


@pytest.mark.parametrize("case, edit, why", [
    ("S1", lambda s: s["graph"].pop("edges"), "no key graph.edges"),
    ("S2", lambda s: s["by_workers"].update(abc=s["by_workers"]["4"]), "by_workers key 'abc' is not a worker count"),
    ("S3", lambda s: _cut_entry(s["by_workers"]["4"]), "by_workers.4 states no edge cut"),
    ("S4", lambda s: _empty_lists(s["by_workers"]["4"]), "by_workers.4.nodes_per_rank is not a list of 4 counts"),
    ("S5", lambda s: s["graph"].update(degree_histogram="x"), "graph.degree_histogram is not a list of [degree, "),
    ("S6", lambda s: (_cut_entry(s["by_workers"]["4"]), s["by_workers"]["4"].update(edge_cut="many")),
     "by_workers.4.edge_cut is 'many', not a count"),
    ("S7", lambda s: s["by_workers"]["4"].update(nodes_per_rank=[5]), "by_workers.4.nodes_per_rank is not a list of 4"),
    ("S8", lambda s: s["by_workers"].update({"0": s["by_workers"]["1"]}), "by_workers key '0' is not a worker count"),
    ("empty_rank", lambda s: s["by_workers"]["4"].update(nodes_per_rank=[0, 1, 1, 1]),
     "by_workers.4.nodes_per_rank is not a list of 4 counts of at least 1"),  # the cost model divides by it
], ids=[*(f"S{i}" for i in range(1, 9)), "empty_rank"])
def test_r3_d9_a_malformed_statistics_file_is_named_by_key_in_one_line(folder, tmp_path, capsys, case, edit, why):
    """review-reliability-r3 S1-S8, P2, P3: each malformed copy of a shipped statistics file ends
    `advise` and `project` in one line naming the key (they were tracebacks: KeyError, ValueError)."""
    stats = json.loads((PROJECT_ROOT / "data" / "partition_stats" / "citeseer-metis.json").read_text())
    edit(stats)
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(stats))
    for argv in (["advise", "--graph", str(path), "--hardware", "a100-dgx", "--workers", "4",
                  "--out", str(tmp_path / "advice")], project(folder, "--workers", "4", "--graph", str(path))):
        err = one_line_error(capsys, argv)
        assert err.startswith(f"error: --graph {path}: not a partition-statistics file (") and why in err, err
    assert not (tmp_path / "advice").exists()


@pytest.mark.parametrize("path", SHIPPED_STATS, ids=lambda p: p.name)
def test_r3_d9_every_shipped_statistics_file_and_proxy_is_of_the_schema(path):
    from analysis import projection
    projection.check_stats(json.loads(path.read_text()))
    for graph in projection.TOTALS:  # the proxies built from the shipped files: the same shape
        projection.check_stats(projection.load_stats(graph, [1, 4, 256]))
