"""benchmarks.tools.stages: every stage from a configuration to ranks ready to train is timed and
measured, and the partition cache it builds is the one a run of that configuration uses."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.run.config import check
from benchmarks.run.runner import prepare
from benchmarks.tools import stages

SMALL = ["dataset.nodes=600", "dataset.avg_degree=6", "dataset.features=8", "dataset.classes=4"]


@pytest.mark.parametrize("workers", [1, 2])
def test_every_stage_is_measured_and_the_cache_is_the_runs(make_cfg, tmp_path, capsys, workers):
    overrides = [*SMALL, "method=full_halo", f"workers={workers}", f"cache_dir={tmp_path / 'cache'}"]
    stages.main([*overrides, "--json", str(tmp_path / "stages.json")])
    entries = json.loads((tmp_path / "stages.json").read_text())["stages"]
    assert [e["stage"] for e in entries] == ["generate", "fingerprint", "partition", "ranks"]
    assert entries[0]["graph"]["nodes"] == 600
    assert all(e["seconds"] >= 0 for e in entries)
    assert entries[2]["launcher_holds_bytes"] > 0 and entries[2]["peak_rss_bytes"] > 0
    printed = capsys.readouterr().out
    assert "generate:" in printed and "ranks:" in printed
    if workers == 1:  # no cache: the launcher's process cuts the whole graph and trains on it
        assert "cache" not in entries[2] and entries[3]["peak_rss_bytes"] > 0
        return
    ranks = entries[3]["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1] and sum(r["nodes"] for r in ranks) == 600
    assert entries[3]["peak_rss_bytes_sum"] == sum(r["peak_rss_bytes"] for r in ranks)
    cfg = make_cfg(*overrides)
    _, folder = prepare(check(cfg), workers, log=lambda m: None)
    assert Path(entries[2]["cache"]) == folder
