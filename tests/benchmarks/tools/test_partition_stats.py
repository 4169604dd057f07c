"""benchmarks.tools.partition_stats: the measured statistics are the record's partition section, the file
is a cache, the extrapolation is exact on a power law and says its error, bad input is one line."""
from __future__ import annotations

import json

import pytest

from benchmarks.tools import partition_stats
from benchmarks.run.config import check
from benchmarks.base.errors import UserError
from benchmarks.core.partition import REGIME_KEYS, load_part
from benchmarks.tools.partition_stats import extrapolate, measure
from benchmarks.run.runner import prepare

pytestmark = pytest.mark.fast

SMALL = ["dataset=synthetic", "dataset.nodes=400", "dataset.avg_degree=8", "dataset.features=8", "dataset.classes=4"]


def test_measured_statistics_are_the_records_and_the_file_is_a_cache(make_cfg, tmp_path, monkeypatch):
    cfg = make_cfg(*SMALL)
    stats = measure(cfg, [2, 4], "metis", 0, results_dir=tmp_path / "stats", log=lambda m: None)
    assert stats["source"] == "measured" and stats["graph"]["nodes"] == 400
    assert stats["graph"]["config"]["nodes"] == 400 and stats["graph"]["config"]["homophily"] == 0.8
    for P in (2, 4):
        info, folder = prepare(check(cfg), P, log=lambda m: None)  # what the record's `partition` section holds
        entry, record = stats["by_workers"][str(P)], info["partition"]
        for key in ("nodes_per_rank", "edges_per_rank", "train_nodes_per_rank", "halo_nodes_per_rank", "edge_cut",
                    *REGIME_KEYS):
            assert entry[key] == record[key], key
        assert entry["peers_per_rank"] == [int((load_part(folder, r).recv_counts > 0).sum()) for r in range(P)]
        assert entry["summary"]["halo_max"] == max(record["halo_nodes_per_rank"])
        assert entry["partition_time_s"] >= 0 and entry["cut_time_s"] >= 0

    path = tmp_path / "stats" / "synthetic-avg_degree8-classes4-features8-nodes400-metis.json"
    assert stats["path"] == str(path) and set(json.loads(path.read_text())["by_workers"]) == {"2", "4"}
    calls = []

    def counting(graph, partitioner, parts, seed):
        calls.append(parts)
        return real(graph, partitioner, parts, seed)

    real = partition_stats.partition
    monkeypatch.setattr(partition_stats, "partition", counting)
    again = measure(cfg, [4, 2], "metis", 0, results_dir=tmp_path / "stats", log=lambda m: None)
    assert calls == [] and again["by_workers"] == stats["by_workers"]  # nothing repartitioned
    more = measure(cfg, [1, 2], "metis", 0, results_dir=tmp_path / "stats", log=lambda m: None)
    assert calls == [1] and list(more["by_workers"]) == ["1", "2"]
    assert more["by_workers"]["1"]["halo_nodes_per_rank"] == [0] and more["by_workers"]["1"]["peers_per_rank"] == [0]
    assert set(json.loads(path.read_text())["by_workers"]) == {"1", "2", "4"}

    # An entry measured before the regime's statistics existed is measured again, once.
    old = json.loads(path.read_text())
    for key in REGIME_KEYS:
        del old["by_workers"]["4"][key]
    path.write_text(json.dumps(old))
    calls.clear()
    renewed = measure(cfg, [2, 4], "metis", 0, results_dir=tmp_path / "stats", log=lambda m: None)
    assert calls == [4] and renewed["by_workers"]["4"] == {**stats["by_workers"]["4"], **{
        k: renewed["by_workers"]["4"][k] for k in ("partition_time_s", "cut_time_s")}}


def _power_law_stats(scale_last: float = 1.0) -> dict:
    laws = {"halo_mean_frac": (0.3, -0.5), "halo_max_frac": (0.4, -0.5), "peers_mean_share": (0.9, -0.2),
            "peers_max_share": (1.0, 0.0), "edge_cut_frac": (0.05, 0.5)}
    by_workers = {}
    for P in (2, 4, 8, 16):
        f = {q: c * P ** b for q, (c, b) in laws.items()}
        f.update(node_imbalance=1.02, edge_imbalance=1.05)
        if P == 16:
            f["halo_mean_frac"] *= scale_last
        by_workers[str(P)] = {"fractions": f}
    return {"graph": {"name": "hand-made", "nodes": 1_000_000, "edges": 21_000_000}, "partitioner": "metis",
            "by_workers": by_workers}, laws


def test_extrapolation_recovers_a_power_law_and_reports_its_error():
    stats, laws = _power_law_stats()
    out = extrapolate(stats, [64, 128])
    assert out["source"] == "extrapolated" and "proxy" not in out
    assert out["fit"]["holdout_workers"] == 16
    assert all(e == pytest.approx(0, abs=1e-9) for e in out["fit"]["holdout_rel_error"].values())
    for P in (64, 128):
        f, s = out["by_workers"][str(P)]["fractions"], out["by_workers"][str(P)]["summary"]
        for q, (c, b) in laws.items():
            assert f[q] == pytest.approx(c * P ** b, rel=1e-9), q
        assert s["halo_mean"] == pytest.approx(0.3 * P ** -0.5 * 1_000_000, rel=1e-9)
        assert s["peers_max"] == pytest.approx(P - 1) and s["edge_cut"] == pytest.approx(0.05 * P ** 0.5 * 10_000_000)
        assert s["nodes_max"] == pytest.approx(1_000_000 / P * 1.02) and s["edges_mean"] == 21_000_000 / P

    # The largest measured P 10% off the law: predicted from the others, it misses by 1 - 1/1.1.
    off, _ = _power_law_stats(scale_last=1.1)
    errors = extrapolate(off, [64])["fit"]["holdout_rel_error"]
    assert (errors["halo_mean_frac"] == pytest.approx(1 - 1 / 1.1)
            and errors["halo_max_frac"] == pytest.approx(0, abs=1e-9))

    # A proxy: the fractions applied to another graph's totals, and said so; a measured P keeps its own.
    proxy = extrapolate(off, [16, 64], nodes=100_000_000, edges=3_000_000_000, name="big")
    assert proxy["by_workers"]["16"]["basis"] == "measured" and proxy["by_workers"]["64"]["basis"] == "fit"
    assert proxy["by_workers"]["16"]["fractions"] == off["by_workers"]["16"]["fractions"]
    proxy = extrapolate(stats, [64], nodes=100_000_000, edges=3_000_000_000, name="big")
    assert proxy["proxy"].startswith("PROXY: fractions measured on hand-made")
    assert proxy["graph"] == {"name": "big", "nodes": 100_000_000, "edges": 3_000_000_000}
    assert proxy["by_workers"]["64"]["summary"]["halo_mean"] == pytest.approx(0.3 / 8 * 100_000_000)


def test_bad_input_is_one_line(tmp_path, capsys):
    small = {"name": "synthetic", "nodes": 400}
    for workers in ([0], [], [2, -1]):
        with pytest.raises(UserError, match="workers must be a non-empty list of positive integers"):
            measure(small, workers, results_dir=tmp_path)
    with pytest.raises(UserError, match=r"unknown option dataset.nodez for dataset=synthetic"):
        measure({"name": "synthetic", "nodez": 400}, [2], results_dir=tmp_path)
    with pytest.raises(UserError, match="unknown partitioner"):
        measure(small, [2], partitioner="metric", results_dir=tmp_path)
    with pytest.raises(SystemExit) as stop:
        partition_stats.main(["dataset=synthetic", "dataset.nodez=400", "--workers", "2", "--results-dir",
                              str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in err and err.startswith("error: unknown option dataset.nodez")
    with pytest.raises(SystemExit):
        partition_stats.main(["dataset=synthetic", "--workers", "0,2", "--results-dir", str(tmp_path)])
    assert capsys.readouterr().err.strip() == ("error: workers must be a non-empty list of positive integers "
                                               "(got [0, 2])")
    assert not any(tmp_path.iterdir())  # nothing measured, nothing written
