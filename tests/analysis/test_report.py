"""`python -m analysis report` on a fresh sweep: every table and every figure."""
from __future__ import annotations


from benchmarks.base.registry import method_names
from tests import commands
from tests.analysis.test_figures import FIGURES


def analysis_cli(*args):
    return commands.run("analysis", *args)


def test_report_on_a_fresh_sweep_has_every_table_and_figure(quickstart, tmp_path):
    out = analysis_cli("report", str(quickstart), "--out", str(tmp_path / "rep"), "--target-acc", "0.3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"report: {tmp_path / 'rep' / 'report.md'}"
    text = (tmp_path / "rep" / "report.md").read_text()
    for section in ("## Runs", "## Speedup", "## Memory per rank", "## Accuracy against time", "## Communication",
                    "## Memory against time", "## Published numbers"):
        assert section in text
    for name in FIGURES:
        assert f"(figures/{name}.png)" in text
        assert (tmp_path / "rep" / "figures" / f"{name}.png").exists()
        assert (tmp_path / "rep" / "figures" / f"{name}.pdf").exists()
    runs = [line for line in text.split("## Speedup")[0].splitlines() if line.startswith("| synthetic |")]
    shown = sorted(line.split(" | ")[2] for line in runs)
    assert shown == method_names(), (  # every registered method
        f"methods {sorted(set(method_names()) - set(shown))} have no row in the quickstart's report: their runs "
        "failed (see each record's `error`)")


def test_table_prints_the_runs_and_an_empty_folder_gets_one_line(quickstart, tmp_path):
    out = analysis_cli("table", str(quickstart))
    assert out.returncode == 0 and out.stdout.startswith("| dataset | model | method |")
    out = analysis_cli("report", str(tmp_path / "nothing"))
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: no records in {tmp_path / 'nothing'}; run ") and out.stderr.count("\n") == 1


def test_the_published_numbers_section_says_what_each_comparison_is(tmp_path):
    """Hand-made records: a stand-in dataset shows shapes (never LLCG's absolute accuracy), a per-round
    row says `not comparable`, a differing key is listed, and an uncertain source is flagged."""
    from analysis import report
    from tests.analysis.handmade import record, write
    from tests.analysis.test_reference import llcg_runs

    records = [*llcg_runs("citeseer"),
               record("single", 1, dataset="cora", model="gat", epochs=300),  # GAT paper: recalled
               record("single", 1, dataset="cora", model="gcn", hidden=64, layers=2, epochs=200,
                      extra={"dropout": 0.5, "lr": 0.01, "weight_decay": 0.0005})]
    text = report.build(write(tmp_path / "records", records), tmp_path / "out").read_text()
    section = text.split("## Published numbers")[1]
    rows = [line for line in section.splitlines() if line.startswith("| llcg_table1 |")]
    assert rows and all("| shape:" in r or "| not comparable:" in r for r in rows)
    assert "| +2.14 pp vs PSGD-PA |" in section and "| 49.1 % |" not in section  # shape, not Flickr's value
    assert "not comparable: unit: paper per round" in section
    assert "scaled-down: hidden 64≠16" in section
    assert "recalled, unverified" in section and "Uncertain published values here: " in section


def test_the_published_numbers_carry_a_verdict_and_a_time_slicing_row_is_not_a_finding(tmp_path):
    """SAR's papers100M rows against a stand-in at 1, 2, 4 workers on 2 cores: every row has a verdict;
    epoch-time scaling to 4 ranks is `not a finding here`, its value blanked as the runs table blanks it."""
    from analysis import report
    from tests.analysis.handmade import record, write

    records = [record(m, w, peak=int(1e9 * f / w), train_mem=int(1e8 * f / w), epoch_time=8.0 / w,
                      reproduces="sar_papers", hidden=256, layers=3, batch_norm=True)
               for m, f in (("sar", 1.0), ("full_halo", 2.0)) for w in (1, 2, 4)]
    text = report.build(write(tmp_path / "records", records), tmp_path / "out").read_text()
    section = text.split("## Published numbers")[1]
    assert "| reproduction | verdict |" in section
    rows = [line for line in section.splitlines() if line.startswith("| sar_papers |")]
    assert rows and all(any(f"| {v}: " in r for v in ("agrees", "same direction, smaller", "disagrees",
                                                       "not a finding here")) for r in rows)
    sliced = [r for r in rows if "runtime_scaling" in r and "| 32->128 |" in r]
    assert sliced and all("| – |" in r and "| not a finding here: 4 ranks on 2 cores" in r for r in sliced)
