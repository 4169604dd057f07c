"""What `python -m analysis advise` recommends (analysis/recommend.py): the rule on handmade rows (a
resolved accuracy cost is never recommended unless the tolerance admits it, a method that does not fit
never is, candidates rank by time to the target), the ranges from the validated error, the command
composed with the suite's real config, and the marks a second projection puts on the real rows (at P=1
an approximation with nothing to act on is its control; layer 0's option named where it saves time)."""
from __future__ import annotations

import shlex

import pytest

from analysis import recommend
from analysis.__main__ import main
from benchmarks.commands.composition import config_of
from benchmarks.run.config import check
from tests.analysis.test_advise import CITESEER

pytestmark = pytest.mark.fast


#: The partition statistic (halo rows per node) of the handmade measurements and of the graph advised on:
#: the same, so that each effect is carried (analysis/advise.py `nearest`), unless a test says otherwise.
REGIME = 0.1


def finding(effect: float, low: float, high: float, epochs: float | None = 10, workers: int = 2,
            holm: bool | None = None) -> dict:
    """A measured effect; `holm`: the page's verdict after Holm (a scaling row), None: no correction (findings)."""
    return {"method": "m", **({} if holm is None else {"holm": holm}), "dataset": "cora", "model": "sage",
            "workers": workers, "seeds": 5, "reference": "ctl", "halo_rows_per_node": REGIME,
            "test_acc": 0.8, "effect_pt": effect, "effect_low_pt": low, "effect_high_pt": high,
            "epochs_to_target": epochs, "missed_target": 0 if epochs is not None else None}


def row(method: str, epoch_s: float, effect=None, fits: bool = True, workers: int = 2, kind: str = "approximate",
        epochs: float | None = 10, here: float = REGIME) -> dict:
    """A projected row; `effect`: its measured (effect, low, high) at each of the P it is asked at; `here`:
    the advised graph's statistic."""
    accuracy = [] if effect is None else [finding(*effect, epochs=epochs, workers=w) for w in (2, 4)]
    return {"method": method, "variant": method, "workers": workers, "devices": workers, "fits": fits,
            "statistic_here": here,
            "projected_epoch_s": epoch_s, "projected_peak_mem_bytes": 2e9, "projected_train_mem_bytes": 1e9,
            "about": {"kind": kind}, "accuracy": accuracy, "time_terms": {"dense": 1.0}}


def result(rows: list[dict], tolerance: float | None = None, workers=(2,)) -> dict:
    return {"workers": list(workers), "rows": rows, "tolerance": tolerance, "graph": "citeseer",
            "model": {"name": "sage", "hidden": 16, "layers": 2}, "memory_per_rank_bytes": {p: 80e9 for p in workers},
            "validation": [{"quantity": "epoch_time", "median_error": 0.2, "largest_error": 0.5},
                           {"quantity": "working_set", "median_error": 0.1, "largest_error": 0.25}],
            "ranks_per_node": 8, "device_kind": "cuda", "dataset_overrides": ["dataset=citeseer"]}


def chosen(res: dict) -> list[str]:
    return [r["method"] for r in recommend.choose(res, res["tolerance"])]


def test_a_resolved_cost_is_never_recommended_however_fast():
    rows = [row("costly", 0.1, (-2.7, -4.7, -0.7)), row("noisy", 1.0, (-2.1, -4.6, 0.4)),
            row("exact", 2.0, (0.0, 0.0, 0.0), kind="exact")]
    assert chosen(result(rows)) == ["noisy", "exact"]
    text = "\n".join(recommend.summary(result(rows)))
    assert "**Recommended: `noisy`" in text and "**Runner-up: `exact`" in text
    assert ("`costly` (-2.7 pt [-4.7, -0.7] at P=2, halo rows/node 0.1 (here 0.1): accuracy cost: its interval "
            "excludes 0 at 5 %, uncorrected, so left out to be safe)") in text
    assert "--tolerance" in text  # says how to admit it


def test_the_tolerance_admits_a_cost_within_it_and_not_beyond():
    rows = [row("costly", 0.1, (-2.7, -4.7, -0.7)), row("exact", 2.0, (0.0, 0.0, 0.0), kind="exact")]
    assert chosen(result(rows, tolerance=3.0)) == ["costly", "exact"]
    assert chosen(result(rows, tolerance=2.0)) == ["exact"]
    assert "within the tolerance of 3 pt" in "\n".join(recommend.summary(result(rows, tolerance=3.0)))


def test_a_method_that_does_not_fit_is_not_recommended():
    rows = [row("big", 0.1, (0.0, 0.0, 0.0), fits=False), row("small", 1.0, (0.0, 0.0, 0.0))]
    assert chosen(result(rows)) == ["small"]
    assert recommend.ranked(rows, 2, None)[1] == [(rows[0], "does not fit")]


def test_time_to_target_ranks_before_epoch_time_and_a_missing_one_ranks_last():
    """Epochs × epoch time decide (5 × 0.3 s beats 20 × 0.1 s); a method with no time to the target
    (missed in a seed: no median) ranks after every one that has one, however fast its epoch."""
    rows = [row("fast_epoch", 0.1, (0.0, -1.0, 1.0), epochs=20), row("fast_target", 0.3, (0.0, -1.0, 1.0), epochs=5),
            row("unmeasured", 0.01, (0.0, -1.0, 1.0), epochs=None)]
    candidates, _ = recommend.ranked(rows, 2, None)
    assert [r["method"] for r in candidates] == ["fast_target", "fast_epoch", "unmeasured"]


def test_the_runner_up_is_another_method_over_every_worker_count():
    rows = [row("a", 0.1, (0.0, -1.0, 1.0), workers=2), row("a", 0.05, (0.0, -1.0, 1.0), workers=4),
            row("b", 0.2, (0.0, -1.0, 1.0), workers=4)]
    picks = recommend.choose(result(rows, workers=(2, 4)), None)
    assert [(r["method"], r["workers"]) for r in picks] == [("a", 4), ("b", 4)]


def test_effect_status_is_the_one_reading():
    # an interval below 0 is a resolved cost only by its page's correction (Holm on the scaling page); without
    # one (the findings page) or not surviving it, it is a likely cost: left out, and said to be unresolved
    assert recommend.effect_status(finding(-1.0, -1.7, -0.2, holm=True)) == recommend.COST
    assert recommend.effect_status(finding(-1.0, -1.7, -0.2, holm=False)) == recommend.LIKELY_COST
    assert recommend.effect_status(finding(-1.0, -1.7, -0.2)) == recommend.LIKELY_COST
    assert recommend.effect_status(finding(1.0, 0.2, 1.7, holm=True)) == recommend.GAIN
    assert recommend.effect_status(finding(1.0, 0.2, 1.7)) == recommend.UNRESOLVED
    assert recommend.effect_status(finding(-2.1, -4.6, 0.4)) == recommend.UNRESOLVED
    assert recommend.effect_status(finding(0.0, 0.0, 0.0)) == recommend.UNRESOLVED  # an exact method
    assert recommend.effect_status(None) == recommend.NOT_MEASURED
    assert recommend.effect_status({"not_in_regime": "measured: ...; here: ...", "effect_pt": None}) == \
        recommend.NOT_IN_REGIME


def test_accuracy_known_here_ranks_before_accuracy_not_measured_in_this_regime():
    """An approximation measured only in another regime is not taken to be safe, however fast: an exact
    method (0 by construction in any regime) and an approximation measured inside this regime without a
    cost rank before it, and before one never measured; the reason and the rule line say so."""
    rows = [row("elsewhere", 0.01, (0.5, -0.5, 1.5), here=4.85), row("unmeasured", 0.02),
            row("exact", 2.0, kind="exact", here=4.85), row("inside", 1.0, (0.5, -0.5, 1.5))]
    candidates, refused = recommend.ranked(rows, 2, None)
    assert [r["method"] for r in candidates] == ["inside", "exact", "elsewhere", "unmeasured"] and not refused
    assert [recommend.known(r, 2) for r in candidates] == [True, True, False, False]
    assert chosen(result(rows)) == ["inside", "exact"]
    text = "\n".join(recommend.summary(result(rows[:3])))  # without `inside`: the exact method first
    assert "**Recommended: `exact`" in text and "**Runner-up: `elsewhere`" in text
    assert "accuracy: exact (its effect 0 by construction, in any regime)" in text
    assert ("accuracy: not measured in this regime (measured: cora, P=2..4, halo rows/node 0.1; here: 4.85 at "
            "P=2); not known here, so not taken to be safe") in text
    assert "before accuracy not known (not measured, or not measured in this regime: not taken to be safe)" in text
    # the best-candidate table says which reading each row has
    assert recommend.accuracy(rows[0], 2) == recommend.NOT_IN_REGIME and recommend.accuracy(rows[2], 2) == "exact"


def test_ranges_come_from_the_largest_validated_error():
    f = recommend.figures(row("m", 1.0, (0.0, -1.0, 1.0), workers=4), result([])["validation"])
    assert f["epoch_s"] == pytest.approx((1.0, 1 / 1.5, 1 / 0.5))
    assert f["to_target_s"] == pytest.approx((10.0, 10 / 1.5, 10 / 0.5))
    # the working set's error on the working set (1 GB of the 2 GB peak)
    assert f["peak_gb"] == pytest.approx((2.0, 1 + 1 / 1.25, 1 + 1 / 0.75))
    assert f["device_hours"][0] == pytest.approx(4 * 1.0 * 100 / 3600)
    assert recommend.around(1.0, None)[0] != recommend.around(1.0, None)[0]  # not validated: no range


def overrides(command: str) -> list[str]:
    words = shlex.split(command)
    return words[words.index("benchmarks") + 1:]


@pytest.mark.parametrize("method, devices, per_node, launch", [
    ("single", 1, 8, "python -m benchmarks"),
    ("cluster_gcn num_parts=256", 8, 8, "torchrun --nnodes=1 --nproc-per-node=8 -m benchmarks"),
    ("pipegcn_g", 32, 8, "torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$NODE_RANK --master-addr=$HEAD"),
    ("full_halo", 12, 8, "torchrun --nnodes=2 --nproc-per-node=6"),
])
def test_the_command_composes_with_the_suite_config(method, devices, per_node, launch):
    r = {**row(method.split()[0], 1.0, workers=devices), "variant": method}
    res = {**result([r]), "ranks_per_node": per_node, "dataset_overrides": ["dataset=ogbn-products"]}
    command = recommend.command(r, res)
    assert command.startswith(launch), command
    run = check(config_of(overrides(command)))
    assert (run.method_name, run.workers, run.device, run.dataset_name) == (method.split()[0], devices, "cuda",
                                                                            "ogbn-products")
    if " " in method:
        assert run.as_dict()["method"]["num_parts"] == 256


@pytest.fixture(scope="module")
def advised_citeseer(tmp_path_factory):
    """A real advise run on CiteSeer's statistics at 1 and 2 workers (the committed findings)."""
    import json
    out = tmp_path_factory.mktemp("recommend")
    main(["advise", "--graph", CITESEER, "--hardware", "h100-dgx", "--workers", "1,2", "--hidden", "16",
          "--out", str(out)])
    return (out / "advise.md").read_text(), json.loads((out / "advise.json").read_text())


def test_the_summary_comes_first_with_commands_that_compose(advised_citeseer):
    text, res = advised_citeseer
    head = text.split("## How these figures were made", 1)[0]
    assert head.index("**Recommended:") < head.index("**Runner-up:") < head.index("Best candidate")
    assert len(head.splitlines()) <= 40
    commands = [line.strip() for line in head.splitlines() if line.startswith("    ")]
    assert len(commands) == 2
    for command in commands:
        assert check(config_of(overrides(command))).dataset_name == "citeseer"
    for r in recommend.choose(res, None):
        assert r["fits"] and recommend.effect_status(recommend.finding_at(r, r["workers"])[0]) != recommend.COST


def test_at_one_worker_an_idle_approximation_is_its_control_and_an_option_says_so(advised_citeseer):
    """At P=1 a halo approximation has nothing to act on: its row is its control (with its layer 0),
    and its effect and epochs, measured with the approximation at P=2, do not apply. A row that layer 0's
    option makes faster says so."""
    _, res = advised_citeseer
    at_one = [r for r in res["rows"] if r["workers"] == 1]
    idle = [r for r in at_one if r.get("as_control")]
    assert idle and all(r["about"]["kind"] == "approximate" for r in idle)
    for r in idle:
        assert recommend.finding_at(r, 1)[0] is None and recommend.seconds(r) is None
        assert not any(x.get("as_control") for x in res["rows"] if x["workers"] == 2 and x["method"] == r["method"])
    precomputed = [r for r in idle if "layer0=precomputed" in r["as_control"]]
    assert precomputed
    saved = [r for r in res["rows"] if r.get("option_saves")]
    assert saved, "no row that layer 0's option makes faster: nothing to check"
    for r in saved:  # named, and the same row with layer 0 exchanged projects slower
        assert r["option_saves"]["option"].startswith("layer0=") and r["option_saves"]["plain"] == "layer0=exchanged"
        assert r["option_saves"]["plain_epoch_s"] > r["projected_epoch_s"]


def test_a_pages_own_verdict_decides_where_it_states_one():
    """A page that reads its rows by `paired.verdict` (Holm over the page, TOST at its declared margin) states the
    word; the recommendation takes it rather than reading the interval again."""
    def said(word, *effect):
        return {**finding(*effect), "verdict": word}
    assert recommend.effect_status(said("costs", -1.0, -1.7, -0.2)) == recommend.COST
    assert recommend.effect_status(said("gains", 1.0, 0.2, 1.7)) == recommend.GAIN
    assert recommend.effect_status(said("equivalent", 0.1, -0.4, 0.6)) == recommend.EQUIVALENT
    # an interval below 0 that did not survive the page's correction: a likely cost, left out to be safe
    assert recommend.effect_status(said("not resolved", -1.0, -1.7, -0.2)) == recommend.LIKELY_COST
    assert recommend.effect_status(said("not resolved", -1.0, -2.7, 0.6)) == recommend.UNRESOLVED
    assert recommend.admits(said("equivalent", 0.1, -0.4, 0.6), None) == (True, "")
