"""Study `findings` and the results pages: the table's arithmetic on hand-made records with known
answers, and a page regenerated from a small folder of records equal to the committed one."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import publish
from benchmarks.run.methods_table import about
from analysis.studies import findings
from tests.analysis.handmade import record, write

pytestmark = pytest.mark.fast
PAGE = Path(__file__).parent / "data" / "findings_page.md"
STUDY = {"study": "findings", "results_dir": "results/findings"}
# test accuracy at the best validation epoch is the best val - 0.01 (handmade.record)
ACC = {"single": (0.80, 0.82, 0.81), "full_halo": (0.81, 0.81, 0.81), "bns_gcn": (0.79, 0.80, 0.78),
       "bns_gcn boundary_fraction=1.0": (0.80, 0.81, 0.80), "neighbor_sampling": (0.77, 0.78, 0.76)}


@pytest.fixture(autouse=True)
def scaling_table(tmp_path, monkeypatch):
    """The scaling study's published table, hand-made: `bns_gcn` at P=8, 10 pairs."""
    path = tmp_path / "scaling.csv"
    path.write_text("method,dataset,model,partitioner,workers,control,pairs,effect_pt,effect_low_pt,effect_high_pt\n"
                    "bns_gcn,cora,sage,metis,4,c,10,-0.5,-0.9,-0.1\nbns_gcn,cora,sage,metis,8,c,10,-1.5,-2.0,-1.0\n")
    monkeypatch.setattr(findings, "SCALING", path)


def _records() -> list[dict]:
    out = []
    for seed in range(3):
        def run(method, options=None, control=None, workers=2, mem=100, comm=10 ** 6):
            name = " ".join([method, *(f"{k}={v}" for k, v in (options or {}).items())])
            r = record(method, workers=workers, seed=seed, train_mem=mem, comm=comm, options=options,
                       dataset="cora", extra=STUDY, val=(0.3, ACC[name][seed] + 0.01))
            r["control"] = control
            r["about"] = about(method)
            r["finished_at"] = f"2026-12-0{1 + seed}T10:00:00+0000"
            out.append(r)
        run("single", workers=1, mem=200, comm=0)
        run("full_halo")
        run("bns_gcn", control="bns_gcn boundary_fraction=1.0", comm=10 ** 5)  # at its defaults
        run("bns_gcn", {"boundary_fraction": 1.0})
        run("neighbor_sampling", control="single", comm=4 * 10 ** 6, mem=50)  # a sampler's control: single
    return out


def test_each_method_is_set_against_its_control_or_single_with_paired_intervals():
    t = findings.table(_records()).set_index("method")
    assert list(t.index) == ["bns_gcn", "full_halo", "neighbor_sampling", "single"]  # the control is no row
    bns = t.loc["bns_gcn"]
    assert bns["exactness"] == "approximate" and bns["reference"] == "bns_gcn boundary_fraction=1.0"
    assert bns["effect"].n == 3 and bns["effect"].mean == pytest.approx(-0.0133, abs=1e-3)  # -1, -1, -2 points
    assert bns["bytes_vs_reference"] == pytest.approx(0.1) and bns["ws_vs_single"] == pytest.approx(0.5)
    ns = t.loc["neighbor_sampling"]
    assert ns["exactness"] == "approximate" and ns["reference"] == "single"  # paired with single across workers
    assert ns["effect"].mean == pytest.approx(-0.04, abs=1e-9) and ns["bytes_vs_reference"] == pytest.approx(4.0)
    assert bns["at_largest_p"] == "-1.5 [-2.0, -1.0] (10) at P=8" and ns["at_largest_p"] == "not measured"
    assert t.loc["single"]["effect"] is None and t.loc["full_halo"]["effect"].n == 3
    csv = findings.csv(_records()).set_index("method")
    assert csv.loc["bns_gcn", "effect_pt"] == pytest.approx(-1.33) and pd.isna(csv.loc["single", "effect_pt"])


def test_a_page_regenerated_from_its_records_equals_the_committed_one(tmp_path):
    """The committed page (data/findings_page.md) is this function's output: a change to the page's
    format shows here, and `GNNBENCH_UPDATE_PAGES=1 pytest <this file>` rewrites it after review."""
    folder = write(tmp_path / "records", _records())
    page = publish(folder, tmp_path / "docs" / "findings.md")
    text = page.read_text().replace(str(folder), "<records>").replace(str(page), "<page>")
    if os.environ.get("GNNBENCH_UPDATE_PAGES"):
        PAGE.write_text(text)
    assert text == PAGE.read_text()
    assert (page.parent / "findings.csv").is_file()
    assert (page.parent / "findings" / "figures" / "findings" / "effect_vs_bytes.png").is_file()
    again = publish(folder, page)  # the same records give the same page, and its old figures are replaced
    assert again.read_text().replace(str(folder), "<records>").replace(str(page), "<page>") == text


def test_the_findings_table_of_docs_findings_is_the_published_pages():
    """docs/findings.md's findings table is copied from docs/results/findings.md (regenerated from records);
    a row edited by hand, or a page republished without docs/findings.md, fails here."""
    root = Path(__file__).resolve().parents[3]
    text = (root / "docs" / "findings.md").read_text()
    block = text.split("<!-- findings:start -->")[1].split("<!-- findings:end -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    page = (root / "docs" / "results" / "findings.md").read_text().splitlines()
    assert len(rows) > 2 and all(row in page for row in rows)
