"""The verdict of the next republication (analysis/paired.py; docs/analysis.md, "Reading an
interval": the verdict): TOST against scipy's one-sided t-tests, the two-stage seed plan against hand
computations, and the verdict's words on known cases."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from analysis import paired

pytestmark = pytest.mark.fast

# Paired differences in fractions (accuracy), as paired.differences returns them.
SAMPLES = [
    [0.004, -0.002, 0.011, -0.006, 0.001],
    [-0.012, -0.004, -0.009, 0.002, -0.007, -0.015, 0.000, -0.005],
    [0.021, -0.013, 0.030, 0.008, -0.019, 0.004],
]


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("margin_pt", [0.5, 1.0, 2.0])
def test_tost_is_the_larger_of_the_two_one_sided_t_tests(sample, margin_pt):
    m = margin_pt / 100
    above = stats.ttest_1samp(sample, -m, alternative="greater").pvalue  # H0: mean <= -margin
    below = stats.ttest_1samp(sample, m, alternative="less").pvalue      # H0: mean >= +margin
    assert paired.tost(sample, margin_pt) == pytest.approx(max(above, below), rel=1e-10)


@pytest.mark.parametrize("sample", SAMPLES)
def test_tost_passes_exactly_when_the_90_percent_interval_lies_inside_the_margin(sample):
    n, mean, sd = len(sample), sum(sample) / len(sample), stats.tstd(sample)
    half = stats.t.ppf(0.95, n - 1) * sd / math.sqrt(n)
    for margin_pt in (0.2, 0.5, 1.0, 1.5, 3.0):
        inside = -margin_pt / 100 < mean - half and mean + half < margin_pt / 100
        assert (paired.tost(sample, margin_pt) < 0.05) == inside


def test_tost_degenerate_samples():
    assert math.isnan(paired.tost([0.01], 1.0))
    assert math.isnan(paired.tost([], 1.0))
    assert paired.tost([0.002] * 4, 1.0) < 0.001   # every pair equal, inside +-1 pt
    assert paired.tost([0.02] * 4, 1.0) > 0.999    # every pair equal, outside


def test_equal_differences_on_two_seeds_are_not_a_resolved_effect():
    """Accuracies on 1,000 test nodes move in 0.1 pt steps, so two seeds whose differences both came out +0.2 pt
    have not measured an SD of 0: the SD is floored at the rounding noise (SD_FLOOR), the interval at 2 seeds
    reaches 0, and the verdict is not a gain; at 5 equal seeds of -6 pt the cost is resolved."""
    two = paired.verdict([0.002, 0.002], rejected=paired.p_value([0.002, 0.002]) < 0.05)
    assert two.word == "not resolved" and paired.effect([0.002, 0.002]).low < 0 < paired.effect([0.002, 0.002]).high
    assert two.seeds_needed == 3 and two.text.endswith("±0.5 pt needs about 3 seeds")  # the fewest a verdict reads
    five = [-0.06] * 5
    assert paired.verdict(five, rejected=paired.p_value(five) < 0.05).word == "costs"
    assert paired.p_value([0.0, 0.0, 0.0]) == 1.0 and paired.verdict([0.0] * 3, rejected=False).word == "equivalent"
    assert paired.p_value([0.01, 0.02, 0.03]) == pytest.approx(0.0742, abs=1e-4)  # above the floor: the t-test


def test_seed_plan_against_hand_computation():
    # sd 1.29 pt, target 0.5 pt: t_{27,.975} = 2.0518 gives 2.0518 * 1.29 / sqrt(28) = 0.5002 > 0.5;
    # t_{28,.975} = 2.0484 gives 2.0484 * 1.29 / sqrt(29) = 0.4907 <= 0.5: 29 seeds.
    assert paired.seeds_for_half_width(1.29, 0.5) == paired.SeedPlan(29, False)
    # The review's table (review-fidelity-r3 §4.1): 0.64 -> 9, 1.12 -> 22, 2.00 -> 64 at 0.5; 1.29 -> 74 at 0.3.
    assert [paired.seeds_for_half_width(sd, 0.5).n for sd in (0.64, 1.12, 2.00)] == [9, 22, 64]
    assert paired.seeds_for_half_width(1.29, 0.3).n == 74
    # sd 1 and h 1: t_{6,.975} = 2.447 / sqrt(7) = 0.925 <= 1, t_{5,.975} = 2.571 / sqrt(6) = 1.050 > 1: 7 seeds.
    assert paired.seeds_for_half_width(1.0, 1.0).n == 7
    # A wider level takes more seeds; no spread takes the fewest an interval has.
    assert paired.seeds_for_half_width(1.0, 1.0, level=0.99).n > 7
    assert paired.seeds_for_half_width(0.0, 0.5) == paired.SeedPlan(2, False)


def test_seed_plan_says_when_the_cap_binds():
    assert paired.seeds_for_half_width(1.29, 0.3, cap=50) == paired.SeedPlan(50, True)
    assert paired.seeds_for_half_width(1.29, 0.3, cap=74) == paired.SeedPlan(74, False)
    with pytest.raises(ValueError):
        paired.seeds_for_half_width(1.0, 0.0)


def test_seeds_for_equivalence():
    # The review's 80 % power at a true effect of 0 (median sd 1.29): 16 seeds at +-1.
    plan = paired.seeds_for_equivalence(1.29, 1.0)
    assert plan == paired.SeedPlan(16, False)
    assert paired.tost_power(16, 1.29, 1.0) >= 0.8 > paired.tost_power(15, 1.29, 1.0)
    # The power bound against a simulation of TOST itself: never above it (a lower bound), and close.
    rng = __import__("numpy").random.default_rng(0)
    draws = rng.normal(0.0, 1.29, size=(20000, 16))
    mean, se = draws.mean(1), draws.std(1, ddof=1) / 4
    t = stats.t.ppf(0.95, 15)
    simulated = ((mean + 1.0) / se > t) & ((1.0 - mean) / se > t)
    assert paired.tost_power(16, 1.29, 1.0) <= simulated.mean() + 0.01
    assert simulated.mean() - paired.tost_power(16, 1.29, 1.0) < 0.05
    # A true effect off 0 takes more seeds.
    assert paired.seeds_for_equivalence(1.29, 1.0, true_effect=0.3).n > 16


def shifted(center: float, spread: list[float]) -> list[float]:
    return [center + x for x in spread]


SPREAD = [-0.004, 0.003, -0.001, 0.005, -0.003]  # mean 0, sd 0.0038 (0.38 pt)
MEDIAN_SD = [x * 0.0129 / stats.tstd(SPREAD) for x in SPREAD]  # mean 0, sd 1.29 pt (the review's median)


def test_verdict_costs_and_gains_only_after_holm():
    d = shifted(-0.03, SPREAD)
    e = paired.effect(d)
    v = paired.verdict(d, rejected=True)
    assert v.word == "costs"
    assert v.text == f"costs 3.0 [{-100 * e.high:.1f}, {-100 * e.low:.1f}] pt (5 seeds)"
    assert paired.verdict(shifted(0.03, SPREAD), rejected=True).text.startswith("gains 3.0 [")
    # The same interval that does not survive Holm is not a cost.
    assert paired.verdict(d, rejected=False).word == "not resolved"


def test_verdict_cost_inside_the_margin_says_so():
    d = shifted(-0.004, [x / 4 for x in SPREAD] * 4)  # -0.4 pt, tight: excludes 0 and within +-1
    v = paired.verdict(d, rejected=True)
    assert v.word == "costs" and v.text.endswith("(20 seeds, within the ±1 pt margin)")


def test_verdict_equivalent():
    d = SPREAD * 2  # mean 0, 90 % interval about +-0.22 pt
    v = paired.verdict(d, rejected=False)
    assert v.word == "equivalent"
    assert v.text.startswith("equivalent within ±1 pt: ") and v.text.endswith("(10 seeds)")
    # A margin declared tighter than the interval: no longer shown equivalent.
    assert paired.verdict(d, rejected=False, margin_pt=0.1).word == "not resolved"


def test_verdict_not_resolved_states_the_seeds_it_would_need():
    d = MEDIAN_SD  # +-0.5 needs 29 seeds
    v = paired.verdict(d, rejected=False)
    need = paired.seeds_for_half_width(100 * stats.tstd(d), 0.5).n
    assert v.word == "not resolved" and v.seeds_needed == need == 29
    assert v.text.endswith(f"(5 seeds); ±0.5 pt needs about {need} seeds")


def test_verdict_claim_finer_than_the_page_is_untestable():
    d = MEDIAN_SD  # half-width 1.6 pt against AdaQP's 0.3 pt claim
    v = paired.verdict(d, rejected=False, claim_pt=0.3)
    need = paired.seeds_for_half_width(100 * stats.tstd(d), 0.3).n
    assert v.word == "untestable" and v.seeds_needed == need == 74
    assert v.text.startswith("untestable here: ") and v.text.endswith(f"±0.3 pt needs about {need} seeds")
    # A resolved cost is a finding whatever the claim.
    assert paired.verdict(shifted(-0.03, SPREAD), rejected=True, claim_pt=0.3).word == "costs"


def test_verdict_with_one_pair():
    v = paired.verdict([0.01], rejected=False)
    assert (v.word, v.n, v.text) == ("not resolved", 1, "not resolved (1 seed: no interval)")


def test_a_ratio_of_paired_means_has_fiellers_interval():
    """With a constant denominator b, Fieller's interval is the t interval of mean(a), divided by b; a
    denominator whose own interval reaches 0 leaves the ratio unbounded; over repeated samples the
    interval holds the true ratio about 95 % of the time."""
    import random

    a = [0.01, 0.02, 0.03, 0.02]
    r = paired.ratio(a, [0.04] * 4)
    half = stats.t.ppf(0.975, 3) * stats.tstd(a) / 2
    assert r.estimate == pytest.approx(0.5) and r.bounded
    assert (r.low, r.high) == pytest.approx(((0.02 - half) / 0.04, (0.02 + half) / 0.04))
    assert r.text() == f"50 % [{100 * r.low:.0f}, {100 * r.high:.0f}] (4 seeds)"
    loose = paired.ratio([0.01, -0.01, 0.02], [0.001, -0.002, 0.003])
    assert not loose.bounded and loose.text() == "unbounded: the denominator is not resolved (3 seeds)"
    assert paired.ratio([0.01], [0.02]).text() == "–"
    rng, held = random.Random(0), 0
    for _ in range(400):
        b = [rng.gauss(0.04, 0.01) for _ in range(8)]
        held += (lambda x: x.low <= 0.5 <= x.high)(paired.ratio([0.5 * v + rng.gauss(0, 0.005) for v in b], b))
    assert 0.91 <= held / 400 <= 0.99
