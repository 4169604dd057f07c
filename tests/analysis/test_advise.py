"""`python -m analysis advise` (analysis/advise.py): every registered method projected for a cluster
with no records, ranked by projected epoch time among those that fit, the rest listed against the
memory a rank has, methods off the model named with their reason, measured accuracy effects read
from a findings CSV, bad arguments refused in one line. In-process calls of the CLI's `main` on the
measured CiteSeer statistics (per-rank lists: small and quick)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import advise, costmodel, recommend
from analysis.__main__ import main
from benchmarks.base.registry import method_names
from tests.analysis.test_hostile_input import one_line_error
from analysis import PROJECT_ROOT

pytestmark = pytest.mark.fast

ROOT = PROJECT_ROOT
CITESEER = str(ROOT / "data" / "partition_stats" / "citeseer-metis.json")
#: Every modelled method: a one-process one (single, gas) as its one-device row in every table
PROJECTED = [n for n in method_names() if not costmodel.why_not_modelled(n)]


def csv_file(path: Path, columns: tuple, rows: list[dict]) -> Path:
    path.write_text("\n".join([",".join(columns), *(",".join(str(r.get(c, "")) for c in columns) for r in rows)])
                    + "\n")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("advise")
    measured = {"method": PROJECTED[0], "family": "f", "exactness": "approximate", "reference": "its control x=1",
                "dataset": "cora", "model": "sage", "workers": 2, "seeds": 5, "test_acc": 0.8, "effect_pt": -0.4,
                "effect_low_pt": -1.6, "effect_high_pt": 0.9}
    # the partition statistic of each measured P near CiteSeer's own (0.0156 halo rows/node at P=2, 0.0394 at
    # P=4), so that the effects are carried to it; the findings row's from another method's row at its P
    at_four = {"method": PROJECTED[0], "dataset": "cora", "model": "sage", "partitioner": "metis", "workers": 4,
               "control": "its control x=1", "pairs": 10, "effect_pt": 0.7, "effect_low_pt": 0.2,
               "effect_high_pt": 1.2, "halo_rows_per_node": 0.04}
    at_two = {**at_four, "method": "another_method", "workers": 2, "halo_rows_per_node": 0.016}
    # the same method on random parts, at CiteSeer's statistic too: another partitioner, never carried to a
    # graph whose statistics were measured on METIS parts
    on_random = {**at_four, "partitioner": "random", "effect_pt": -5.5, "effect_low_pt": -6.5, "effect_high_pt": -4.5}
    return {"findings": csv_file(folder / "findings.csv", advise.FINDINGS_COLUMNS, [measured]),
            "scaling": csv_file(folder / "scaling.csv", advise.SCALING_COLUMNS, [at_four, at_two, on_random]),
            "validation": csv_file(folder / "projection.csv", advise.VALIDATION_COLUMNS,
                                   [{"quantity": "epoch_time", "median_error": 0.2, "largest_error": 0.6, "runs": 10,
                                     "hardware": "this-machine", "source": "a test"}]),
            "folder": folder}


def run(capsys, files, out: Path, *args: str) -> str:
    main(["advise", "--graph", CITESEER, "--workers", "2,4", "--hidden", "16", "--out", str(out),
          "--findings", str(files["findings"]), "--scaling", str(files["scaling"]),
          "--validation", str(files["validation"]), *args])
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def advised(files) -> tuple[str, dict, Path]:
    """One run on a100-dgx: its advise.md (what it printed), advise.json and its folder."""
    out = files["folder"] / "a100"
    main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "2,4", "--hidden", "16",
          "--out", str(out), "--findings", str(files["findings"]), "--scaling", str(files["scaling"]),
          "--validation", str(files["validation"])])
    return (out / "advise.md").read_text(), json.loads((out / "advise.json").read_text()), out


def table_order(text: str, heading: str, until: str) -> list[str]:
    """The methods of the first table after `heading`, in printed order, up to the line `until`."""
    section = text.split(heading, 1)[1].split(until, 1)[0]
    return [line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]


def test_the_methods_that_fit_are_ranked_by_projected_epoch_time(advised):
    text, result, _ = advised
    for p in (2, 4):
        fit = sorted((r for r in result["rows"] if r["workers"] == p and r["fits"]),
                     key=lambda r: r["projected_epoch_s"])
        assert fit and table_order(text, f"## {p} workers", "##") == [r["variant"] for r in fit]
    assert {r["method"] for r in result["rows"]} == set(PROJECTED)  # every modelled method, no records needed


def test_a_method_that_does_not_fit_is_listed_against_the_memory_a_rank_has(advised, capsys, files, tmp_path):
    """A device between the methods' peaks at P=2: those above it are listed as not fitting (with
    their memory and the device's), the rest ranked."""
    peaks = sorted({r["projected_peak_mem_bytes"] for r in advised[1]["rows"] if r["workers"] == 2})
    assert len(peaks) > 1, "every method has the same peak: nothing to split"
    device = (peaks[0] + peaks[-1]) / 2
    path = tmp_path / "half.yaml"
    path.write_text((ROOT / "conf" / "hardware" / "a100-dgx.yaml").read_text()
                    .replace("name: a100-dgx", "name: half")
                    .replace("memory_bytes: 80.0e+9", f"memory_bytes: {device}"))
    text = run(capsys, files, tmp_path / "out", "--hardware", str(path))
    result = json.loads((tmp_path / "out" / "advise.json").read_text())
    rows = [r for r in result["rows"] if r["workers"] == 2]
    over = {r["method"] for r in rows if r["projected_peak_mem_bytes"] > device}
    assert over and {r["method"] for r in rows if not r["fits"]} == over
    section = text.split("## 2 workers", 1)[1].split("##", 1)[0]
    fit, out = section.split("Do not fit in")
    over_variants = {r["variant"] for r in rows if r["projected_peak_mem_bytes"] > device}
    assert (sorted(table_order(fit, "fastest epoch first", "Do not fit"))
            == sorted({r["variant"] for r in rows} - over_variants))
    has = f"| {advise.number(device / advise.GB)} "
    for name in over:
        assert any(line.startswith(f"| {name} ") and has in line for line in out.splitlines()), name


def test_a_method_off_the_model_says_why(advised):
    """Every method off the model is listed as `<name> is not modelled: <its Cost.not_modelled>`
    (docs/method-reference.md, "The cost model's hooks"), whatever its family's hooks."""
    text, result, _ = advised
    off = [n for n in method_names() if costmodel.why_not_modelled(n)]
    assert off, "every method is modelled: nothing to check"
    section = text.split("## Not projected", 1)[1]
    for name in off:
        phrase = costmodel.plugin(name).Cost.not_modelled
        assert any(line.startswith(f"| {name} ") and f"{name} is not modelled: {phrase}" in line
                   for line in section.splitlines()), (
            f"method {name}: advise lists it under 'Not projected' without `{name} is not modelled: {phrase}`; "
            "its plugin's Cost.not_modelled must be a one-line reason (docs/method-reference.md)")
        assert phrase and "\n" not in phrase and not phrase.lower().startswith("not modelled"), (
            f"method {name}: Cost.not_modelled = {phrase!r}; give the reason alone, one line, without 'not "
            "modelled' (the suite prefixes `<name> is not modelled: `)")
    assert {r["method"] for r in result["left_out"]} >= set(off)


def test_a_plugin_that_states_not_modelled_is_not_modelled_whatever_its_family(write_plugins):
    """The one-line opt-out under a family whose `traffic` is its own (MiniBatchMethod's): not
    modelled, in `--methods` and the cost model alike; a sampler that states no `shape` is not
    modelled either (its family's `traffic` needs one), and one that states it is."""
    from benchmarks.run.methods_table import describe
    base = "from benchmarks.families.minibatch import MiniBatchMethod\n\n\nclass Method(MiniBatchMethod):\n"
    write_plugins({
        "zz_opts_out": base + '    class Cost(MiniBatchMethod.Cost):\n        not_modelled = "its sample is its own"\n',
        "zz_no_shape": base + "    pass\n",
        "zz_shape": base + "    class Cost(MiniBatchMethod.Cost):\n        @classmethod\n"
                           "        def shape(cls, options, model, rank):\n            return None\n"})
    assert costmodel.why_not_modelled("zz_opts_out") == "zz_opts_out is not modelled: its sample is its own"
    assert costmodel.why_not_modelled("zz_no_shape").startswith("zz_no_shape is not modelled: ")
    assert costmodel.why_not_modelled("zz_shape") is None
    page = describe()
    for name, modelled in (("zz_opts_out", "not modelled"), ("zz_no_shape", "not modelled"), ("zz_shape", "modelled")):
        (row,) = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
        assert row.split("|")[5].strip() == modelled, row


def test_the_accuracy_effect_is_read_from_the_findings_and_not_measured_elsewhere(advised):
    text, result, _ = advised
    section = text.split("## Accuracy effect", 1)[1].split("##", 1)[0]
    lines = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| ")}
    assert "-0.4 pt [-1.6, +0.9] vs its control x=1, cora · sage, P=2, 5 seeds" in lines[PROJECTED[0]]
    assert "+0.7 pt [+0.2, +1.2] vs its control x=1, cora · sage, P=4, 10 seeds" in lines[PROJECTED[0]]
    assert all("not measured" in lines[name] for name in PROJECTED[1:])
    # the graph's statistics were measured on METIS parts: the random parts' row is another regime
    assert "-5.5" not in text and "on metis parts, as this graph's statistics were partitioned" in text
    # each worker count's ranking names the effect measured at the P nearest it
    for p, want in ((2, "-0.4 pt [-1.6, +0.9] at P=2"), (4, "+0.7 pt [+0.2, +1.2] at P=4")):
        ranked = text.split(f"## {p} workers", 1)[1].split("##", 1)[0]
        assert any(f"| {PROJECTED[0]} " in line and want in line for line in ranked.splitlines()), p
    assert "Validated on this-machine (10 runs): epoch time within 20 % median (60 % largest); on a100-dgx" in text


def test_a_graph_partitioned_at_random_is_advised_from_the_rows_measured_on_random_parts(files, tmp_path):
    """The same statistics file named `partitioner: random`: the random parts' row is carried (its -5.5), the
    METIS rows are not; tables without the regime's optional columns are still read (None)."""
    stats = json.loads(Path(CITESEER).read_text())
    stats["partitioner"] = "random"
    graph = tmp_path / "citeseer-random.json"
    graph.write_text(json.dumps(stats))
    main(["advise", "--graph", str(graph), "--hardware", "a100-dgx", "--workers", "2,4", "--hidden", "16",
          "--out", str(tmp_path / "out"), "--findings", str(files["findings"]), "--scaling", str(files["scaling"]),
          "--validation", str(files["validation"])])
    text = (tmp_path / "out" / "advise.md").read_text()
    assert "-5.5 pt [-6.5, -4.5] vs its control x=1, cora · sage, P=4" in text and "+0.7 pt" not in text
    assert "on random parts, as this graph's statistics were partitioned (an effect" in text
    rows = advise.measured(files["findings"], [files["scaling"]])
    assert {r["partitioner"] for r in rows} == {"metis", "random"} and all(r["label_skew_mean"] is None for r in rows)


def test_every_graphs_scaling_table_is_read(capsys, files, tmp_path):
    """`--scaling` takes one table a graph: a row measured on a second graph, inside this graph's regime where
    the first's are not, is carried, and the page and advise.json name both tables."""
    far = {"method": PROJECTED[0], "dataset": "cora", "model": "sage", "partitioner": "metis", "workers": 4,
           "control": "its control x=1", "pairs": 10, "effect_pt": 0.7, "effect_low_pt": 0.2, "effect_high_pt": 1.2,
           "halo_rows_per_node": 0.4}  # ten times CiteSeer's own at P=4: outside its regime
    near = {**far, "dataset": "citeseer", "effect_pt": -2.5, "effect_low_pt": -3.0, "effect_high_pt": -2.0,
            "halo_rows_per_node": 0.04}
    tables = [csv_file(tmp_path / "scaling.csv", advise.SCALING_COLUMNS, [far]),
              csv_file(tmp_path / "scaling_citeseer.csv", advise.SCALING_COLUMNS, [near])]
    out = tmp_path / "out"
    main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "4", "--hidden", "16",
          "--out", str(out), "--findings", str(files["findings"]), "--scaling", ",".join(map(str, tables)),
          "--validation", str(files["validation"])])
    text, result = (out / "advise.md").read_text(), json.loads((out / "advise.json").read_text())
    assert "-2.5 pt [-3.0, -2.0] vs its control x=1, citeseer · sage, P=4" in text
    assert result["measured"]["scaling"] == [str(path) for path in tables]
    assert all(f"`{path}`" in text for path in tables)
    assert [r["dataset"] for r in advise.measured(files["findings"], tables)][-2:] == ["cora", "citeseer"]
    # a row measured with another model is another regime: not carried, not listed
    csv_file(tables[1], advise.SCALING_COLUMNS, [{**near, "model": "gcn"}])
    main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "4", "--hidden", "16",
          "--out", str(out), "--findings", str(files["findings"]), "--scaling", ",".join(map(str, tables)),
          "--validation", str(files["validation"])])
    assert "-2.5 pt" not in (out / "advise.md").read_text()
    # ... and carried to that model's advice, where a method measured with SAGE alone says so
    csv_file(tables[0], advise.SCALING_COLUMNS, [far, {**far, "method": PROJECTED[1]}])
    main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "4", "--hidden", "16",
          "--model", "gcn", "--out", str(out), "--findings", str(files["findings"]), "--scaling",
          ",".join(map(str, tables)), "--validation", str(files["validation"])])
    text = (out / "advise.md").read_text()
    assert "-2.5 pt [-3.0, -2.0] vs its control x=1, citeseer · gcn, P=4" in text
    assert f"| {PROJECTED[1]} " in text and "not measured with gcn (measured with sage only)" in text
    assert "sage, P=" not in text


def test_the_regime_statistic_of_a_handmade_statistics_file():
    """Halo rows per node at P: every rank's halo summed over the graph's nodes where the file lists them,
    the mean rank's × P where it states only a summary (a proxy); 0 at P=1; none where it has no entry."""
    stats = {"graph": {"nodes": 1000}, "by_workers": {
        "4": {"halo_nodes_per_rank": [10, 20, 30, 40], "summary": {"halo_mean": 99.0}},
        "16": {"summary": {"halo_mean": 50.0}, "fractions": {"edge_cut_frac": 0.3}}}}
    assert advise.statistic_here(stats, 4) == pytest.approx(0.1)  # the lists, not the summary
    assert advise.statistic_here(stats, 16) == pytest.approx(0.8)
    assert advise.statistic_here(stats, 1) == 0.0
    assert advise.statistic_here(stats, 8) is None
    # a file measured with the partition's regime statistics states it itself
    stats["by_workers"]["8"] = {"halo_rows_per_node": 0.29, "halo_nodes_per_rank": [1] * 8, "label_skew_mean": 0.5}
    assert advise.statistic_here(stats, 8) == 0.29
    # what is not checked is named, with what this file lacks too
    assert advise.not_checked(stats) == ("cut fraction, training nodes per part: the scaling page states them beside "
                                         "each P, but an effect is carried by the partitioner, halo rows/node and "
                                         "label skew alone; this graph's statistics file has no training nodes per "
                                         "part either")
    assert advise.skew_here(stats, 8) == 0.5 and advise.skew_here(stats, 4) is None and advise.skew_here(stats, 1) == 0
    del stats["by_workers"]["8"]["label_skew_mean"]  # a file without it: the skew is not checked, and said so
    assert advise.not_checked(stats).endswith(", nor label skew, which is therefore not checked either (a graph whose "
                                              "parts hold a near-global label mix may fare otherwise than Cora's)")
    # the same statistic the scaling page states of its own runs (CiteSeer's measured file at P=2: 52 of 3,327)
    citeseer = json.loads(Path(CITESEER).read_text())
    assert advise.statistic_here(citeseer, 2) == pytest.approx(52 / 3327)


def measured_rows() -> list[dict]:
    return [{"method": "m", "dataset": "cora", "model": "sage", "workers": w, "effect_pt": e, "effect_low_pt": e - 1,
             "effect_high_pt": e + 1, "reference": "ctl", "seeds": 10, "test_acc": None, "halo_rows_per_node": x}
            for w, e, x in ((2, 0.1, 0.1), (4, -0.3, 0.17), (8, -0.5, 0.29))]


def test_an_effect_inside_its_regime_is_carried_and_one_outside_says_not_measured_in_this_regime():
    rows = measured_rows()
    # inside: the row of the nearest statistic, named with both figures
    assert advise.nearest(rows, 4, 0.18) == (rows[1], "at P=4, halo rows/node 0.17 (here 0.18)")
    assert advise.nearest(rows, 8, 0.29 * (1 + advise.REGIME_TOLERANCE / 2))[0] is rows[2]  # within the tolerance
    assert advise.nearest(rows, 2, 0.1 * (1 - advise.REGIME_TOLERANCE / 2))[0] is rows[0]
    # outside: by the statistic, by P, or both; no effect, the measured regime and this graph's figure
    for p, here in ((4, 0.29 * (1 + 2 * advise.REGIME_TOLERANCE)), (4, 0.05), (16, 0.2), (16, 4.85), (1, 0.0)):
        found, where = advise.nearest(rows, p, here)
        assert recommend.effect_status(found) == recommend.NOT_IN_REGIME and where == "", (p, here)
        text = advise.effect(found)
        assert text == (f"not measured in this regime (measured: cora, P=2..8, halo rows/node 0.1-0.29; here: "
                        f"{advise.number(here)} at P={p})") and " pt" not in text
    # a row no page states the statistic of is carried nowhere; nothing measured: nothing said
    # another partitioner's rows are another regime: the gap between the two ranges is measured by neither
    both = [{**r, "partitioner": "metis"} for r in rows] + [
        {**r, "partitioner": "random", "halo_rows_per_node": 4 * r["halo_rows_per_node"]} for r in rows]
    assert advise.nearest(both, 4, 0.7)[0] is both[4]  # random's P=4: 0.68
    found, _ = advise.nearest(both, 4, 0.34)  # between metis's 0.29 x 1.1 and random's 0.4 x 0.9: neither
    assert found["not_in_regime"] == ("measured: cora metis, P=2..8, halo rows/node 0.1-0.29; cora random, P=2..8, "
                                      "halo rows/node 0.4-1.16; here: 0.34 at P=4")
    # the label skew, where both the rows and the graph's file state it: a near-global mix is another regime
    skewed = [{**r, "label_skew_mean": k} for r, k in zip(rows, (0.32, 0.46, 0.55))]
    assert advise.nearest(skewed, 4, 0.18, 0.44) == (skewed[1], "at P=4, halo rows/node 0.17 (here 0.18), label skew "
                                                                "0.46 (here 0.44)")
    found, _ = advise.nearest(skewed, 4, 0.18, 0.05)
    assert found["not_in_regime"] == ("measured: cora, P=2..8, halo rows/node 0.1-0.29, label skew 0.32-0.55; here: "
                                      "0.18, label skew 0.05 at P=4")
    assert advise.nearest(skewed, 4, 0.18)[0] is skewed[1]  # the graph's file states no skew: not checked
    assert advise.nearest(rows, 4, 0.18, 0.05)[0] is rows[1]  # nor where the rows state none
    # two splits of one graph share its parts and so the statistic: the row of the nearer skew is carried
    splits = skewed + [{**r, "dataset": "cora-full", "label_skew_mean": k} for r, k in zip(rows, (0.30, 0.40, 0.50))]
    assert advise.nearest(splits, 4, 0.17, 0.41)[0] is splits[4] and advise.nearest(splits, 4, 0.17, 0.45)[0] is \
        splits[1]
    assert advise.nearest(splits, 4, 0.17)[0] is splits[1]  # no skew known: the first stated, as before
    unstated = [{**r, "halo_rows_per_node": None} for r in rows]
    assert "halo rows/node not stated" in advise.effect(advise.nearest(unstated, 4, 0.17)[0])
    assert advise.nearest([], 4, 0.1) == (None, "")


def test_a_findings_row_takes_the_statistic_of_the_scaling_rows_at_its_p():
    """The findings page states no partition statistic: its row at P=2 takes the scaling page's at P=2 on
    the same dataset and the findings' partitioner; at P=1 an exact row's is 0, a one-process
    approximation's (its own mini-batch parts') not stated; elsewhere it is not stated."""
    scaling = [{"method": "x", "dataset": "cora", "model": "sage", "partitioner": p, "workers": 2, "control": "c",
                "pairs": 10, "effect_pt": 0.0, "effect_low_pt": -1.0, "effect_high_pt": 1.0, "halo_rows_per_node": x}
               for p, x in (("random", 0.9), (advise.findings_partitioner(), 0.099))]
    findings = [{"method": "m", "dataset": d, "workers": w, "exactness": e} for d, w, e in (
        ("cora", 2, "approximate"), ("cora", 1, "exact"), ("cora", 1, "approximate"), ("citeseer", 2, "sampled"))]
    rows = advise.effect_rows(findings, scaling)
    assert [r["halo_rows_per_node"] for r in rows[:4]] == [0.099, 0.0, None, None]
    # a findings row that states its own partitions' statistics keeps them
    own = advise.effect_rows([{**findings[0], "halo_rows_per_node": 0.0995, "label_skew_mean": 0.324}], scaling)
    assert (own[0]["halo_rows_per_node"], own[0]["label_skew_mean"]) == (0.0995, 0.324)
    assert [r["halo_rows_per_node"] for r in rows[4:]] == [0.9, 0.099]  # the scaling rows' own


PAPERS = ROOT / "docs" / "results" / "advise" / "ogbn-papers100M-a100-dgx-sage"


def test_the_papers100m_page_carries_no_effect_at_16_workers_or_more():
    """`advise --graph ogbn-papers100M --hardware a100-dgx --workers 1,16,32,64,128` (the committed page):
    the proxy's halo rows per node at P >= 16 lie far beyond Cora's at P <= 8, so no approximation's effect
    applies there; each says "not measured in this regime", and only exact methods are known safe."""
    result = json.loads((PAPERS / "advise.json").read_text())
    text = (PAPERS / "advise.md").read_text()
    big = [p for p in result["workers"] if p >= 16]
    assert big == [16, 32, 64, 128]
    for r in (r for r in result["rows"] if r["workers"] in big):
        status = recommend.effect_status(recommend.finding_at(r, r["workers"])[0])
        assert recommend.exact(r) or status in recommend.UNKNOWN, (r["variant"], r["workers"], status)
    for p in big:
        section = text.split(f"## {p} workers", 1)[1].split("\n## ", 1)[0]
        assert " pt " not in section and " pt]" not in section, p
        assert "not measured in this regime (measured: cora" in section
    assert text.count("Not checked: ") == 1 and "states no label skew, which is therefore not checked either" in text
    first_screen = text.split("## How these figures were made", 1)[0]
    assert " pt " not in first_screen.split("Rule:", 1)[0]


def test_the_figure_and_files_are_written(advised):
    """The figure is a real image of both kinds (what a reader opens), not an empty or half-written
    file. (The page does not link it yet: docs/projection.md names it.)"""
    from matplotlib import image

    _, result, out = advised
    assert result["rows"]
    height, width, _ = image.imread(out / "figures" / "advise.png").shape
    assert width >= 600 and height >= 300, (width, height)
    pdf = (out / "figures" / "advise.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")


@pytest.mark.parametrize("args, says", [
    (["--workers", "0"], "--workers takes whole numbers of at least 1 (got '0')"),
    (["--workers", "2,x"], "--workers takes whole numbers of at least 1 (got 'x')"),
    (["--workers", "3"], "has no partition statistics for P=3"),
    (["--workers", "4000"], "--workers 4000 exceeds the 3327 nodes of citeseer"),
    (["--hidden", "1.5"], "--hidden takes whole numbers"),
    (["--layers", "0"], "--layers takes whole numbers"),
    (["--model", "mlp"], "unknown --model 'mlp'"),
    (["--model", "gat", "--hidden", "10"], "must be divisible by model.heads"),
    (["--hardware", "no-such-profile"], "no-such-profile"),
    (["--graph", "no-such-graph"], "--graph no-such-graph: not a partition-statistics file"),
    (["--tolerance", "-1"], "--tolerance takes a number of accuracy points of at least 0 (got '-1')"),
    (["--tolerance", "nan"], "--tolerance takes a number of accuracy points of at least 0 (got 'nan')"),
])
def test_bad_arguments_are_refused_in_one_line_before_any_work(capsys, tmp_path, monkeypatch, args, says):
    def no_work(*a, **k):
        raise AssertionError("projected before the arguments were checked")
    monkeypatch.setattr(advise, "advise", no_work)
    argv = ["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "2", "--out", str(tmp_path / "o")]
    assert says in one_line_error(capsys, argv + args)
    assert not (tmp_path / "o" / "advise.md").exists()


def test_bad_files_and_folders_are_refused_in_one_line(capsys, tmp_path):
    argv = ["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "2"]
    assert "advise needs --graph, --hardware and --workers" in one_line_error(capsys, ["advise", "--graph", CITESEER])
    afile = tmp_path / "afile"
    afile.write_text("")
    assert f"--out={afile} is a file, not a folder" in one_line_error(capsys, [*argv, "--out", str(afile)])
    bad = tmp_path / "findings.csv"
    bad.write_text("method,effect_pt\nx,1\n")
    assert "no column family" in one_line_error(capsys, [*argv, "--out", str(tmp_path), "--findings", str(bad)])
    csv_file(bad, advise.FINDINGS_COLUMNS, [{"method": "x", "effect_pt": "big"}])
    assert "line 2: effect_pt is 'big', not a number" in one_line_error(
        capsys, [*argv, "--out", str(tmp_path), "--findings", str(bad)])


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "results" / "advise").glob("*/advise.json")),
                         ids=lambda p: p.parent.name)
def test_each_committed_page_shows_the_accuracy_of_the_findings_it_cites(page):
    """A committed advise page names the measured tables it read; every row's accuracy (effects,
    epochs to target) is those tables' rows of its method as they stand now, and its ranked tables
    show the effect that applies at each worker count (`advise.effect_at`). A findings rerun without the pages
    regenerated fails here."""
    result = json.loads(page.read_text())
    text = (page.parent / "advise.md").read_text()
    cites = result["measured"]
    assert set(cites) == {"findings", "scaling"} and all(f"`{path}`" in text for path in advise.cited_paths(cites))
    assert cites["scaling"] == [advise.cited(path) for path in advise.scaling_tables()], "a scaling table unread"
    findings = advise.measured(ROOT / cites["findings"], [ROOT / path for path in cites["scaling"]])
    for row in result["rows"]:
        assert row["accuracy"] == [f for f in findings if f["method"] == row["method"]
                                   and f["partitioner"] == result["regime"]["partitioner"]
                                   and f["model"] == result["model"]["name"]], row["method"]
    for p in result["workers"]:
        section = text.split(f"## {p} workers", 1)[1].split("\n## ", 1)[0]
        ranked = [line for line in section.split("Do not fit", 1)[0].splitlines() if line.startswith("| ")]
        for row in (r for r in result["rows"] if r["workers"] == p and r["fits"]):
            want = advise.effect_at(row, p)  # inside this graph's regime, or "not measured in this regime"
            name = row.get("variant") or row["method"]
            assert any(f"| {name} " in line and want in line and advise.to_target(row)[1] in line
                       for line in ranked), (p, name)


def test_the_tolerance_is_stated_in_the_page_and_admits_a_resolved_cost(capsys, files, tmp_path):
    """`--tolerance 1.0` is in the page's command and its rule line; a method whose measured cost is
    resolved is left out without it and a candidate with it where the cost is within it."""
    costly = csv_file(tmp_path / "findings.csv", advise.FINDINGS_COLUMNS, [
        {"method": PROJECTED[0], "family": "f", "exactness": "approximate", "reference": "its control",
         "dataset": "cora", "model": "sage", "workers": 2, "seeds": 5, "test_acc": 0.8, "effect_pt": -0.8,
         "effect_low_pt": -1.4, "effect_high_pt": -0.2}])

    def candidates(*args):
        out = tmp_path / f"out{len(args)}"
        main(["advise", "--graph", CITESEER, "--hardware", "a100-dgx", "--workers", "2", "--hidden", "16",
              "--out", str(out), "--findings", str(costly), "--scaling", str(files["scaling"]),
              "--validation", str(files["validation"]), *args])
        capsys.readouterr()
        result = json.loads((out / "advise.json").read_text())
        return (out / "advise.md").read_text(), {r["method"] for r in recommend.ranked(
            result["rows"], 2, result["tolerance"])[0]}
    text, without = candidates()
    assert PROJECTED[0] not in without and f"`{PROJECTED[0]}` (-0.8 pt [-1.4, -0.2] at P=2, halo rows/node" in text
    text, within = candidates("--tolerance", "1.0")
    assert PROJECTED[0] in within and "--tolerance 1 --out" in text and "(or within 1 pt)" in text
