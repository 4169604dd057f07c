"""Paired comparisons over seeds, the way every study attributes a difference (docs/analysis.md).

A run's seed fixes its initial weights, its dropout masks and its partition, so two variants run on
the same seeds differ, seed by seed, only by what tells them apart. An effect is the mean of those
per-seed differences with a 95 % Student-t interval (n - 1 degrees of freedom), read by one rule
(`reading`; docs/analysis.md, "Reading an interval"): "resolved" when it excludes 0 after the page's
multiplicity correction, "within noise" when it contains 0 and lies within +-1 point, "not resolved"
otherwise. Each approximate method's record names
its exact control (`control`, the variant of `benchmarks.run.method.control_config`), so:
  - the approximation's effect is method - control (same layer 0, model, partition, seeds);
  - the treatment's effect is control - the plain exact method (`full_halo`): what the control
    itself does differently (layer 0 cached or precomputed, the receiver's dropout).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

#: What two runs share to be a pair: everything but the variant.
PAIR_KEYS = ["dataset", "model", "setting", "workers", "seed"]
PLAIN = "full_halo"  # the plain exact method every treatment is measured against
LEVEL = 0.95
#: An interval that contains 0 and lies within +-NOISE_POINTS points is "within noise"; wider, "not resolved".
NOISE_POINTS = 1.0


def reading(low_pt: float, high_pt: float, corrected: bool | None = None) -> str:
    """The reading of a 95 % interval [`low_pt`, `high_pt`] in points, by the suite's one rule
    (docs/analysis.md, "Reading an interval"): "resolved" when it excludes 0 and survives the page's
    multiplicity correction (`corrected`: True or False where the page applies one, e.g. Holm's;
    None where it applies none, and then an exclusion is reported as "excludes 0 at 5 %,
    uncorrected"); an exclusion that does not survive it is "not resolved"; an interval that
    contains 0 is "within noise" when it lies within +-`NOISE_POINTS`, else "not resolved"."""
    if low_pt > 0 or high_pt < 0:
        if corrected is None:
            return "excludes 0 at 5 %, uncorrected"
        return "resolved" if corrected else "not resolved"
    return "within noise" if -NOISE_POINTS <= low_pt and high_pt <= NOISE_POINTS else "not resolved"


@dataclass
class Effect:
    """Mean of paired differences over `n` seeds and its interval [`low`, `high`] (NaN with n < 2)."""

    n: int
    mean: float
    low: float
    high: float

    @property
    def resolved(self) -> bool:
        return self.n >= 2 and (self.low > 0 or self.high < 0)

    def text(self, scale: float = 100.0, digits: int = 1) -> str:
        """`+1.3 [-0.8, +3.4] (5, not resolved)`: the mean and interval times `scale` (points for
        accuracies), the pairs in parentheses and, when the interval contains 0, its `reading`
        ("within noise" or "not resolved"); an interval that excludes 0 carries no word, since only
        the page's multiplicity correction can call it resolved."""
        if self.n == 0:
            return "–"
        if self.n < 2:
            return f"{scale * self.mean:+.{digits}f} (1 pair: no interval)"
        noise = "" if self.resolved else ", " + reading(scale * self.low, scale * self.high)
        return (f"{scale * self.mean:+.{digits}f} [{scale * self.low:+.{digits}f}, {scale * self.high:+.{digits}f}]"
                f" ({self.n}{noise})")


def points(e: Effect | None, what: str) -> float | None:
    """`e`'s mean, low or high (`what`) in points, to 0.01; None without an interval (fewer than 2 pairs)."""
    return round(100 * getattr(e, what), 2) if e is not None and e.n >= 2 else None


def within(e: Effect | None, points: float) -> str:
    """A goal "no more than `points` below" on an accuracy effect, judged on its interval: met when
    the interval's lower end is above -points, NOT met when its upper end is below, else unresolved."""
    if e is None or e.n < 2:
        return "unresolved (fewer than 2 paired seeds)"
    if 100 * e.low >= -points:
        return "met"
    if 100 * e.high < -points:
        return "NOT met"
    return f"unresolved (the interval spans -{points:g})"


def effect(differences) -> Effect:
    d = [float(x) for x in differences if x == x]
    n = len(d)
    if n == 0:
        return Effect(0, math.nan, math.nan, math.nan)
    mean = sum(d) / n
    if n < 2:
        return Effect(1, mean, math.nan, math.nan)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    from scipy import stats  # here: importing scipy.stats takes ~1.4 s, which a command that pairs nothing never pays

    half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
    return Effect(n, mean, mean - half, mean + half)


def differences(runs: pd.DataFrame, variant: str, against: str, column: str = "test_acc",
                where: dict | None = None, keys: list[str] = PAIR_KEYS) -> list[float]:
    """`column` of `variant` minus that of `against`, seed by seed, over the ok runs of both that
    share every value of `keys` (and the values in `where`). Leave `workers` out of `keys` to pair
    a run with `single`, which always runs at one worker."""
    ok = runs[runs["status"] == "ok"]
    for key, value in (where or {}).items():
        ok = ok[ok[key] == value]
    a = ok[ok["variant"] == variant].set_index(keys)[column]
    b = ok[ok["variant"] == against].set_index(keys)[column]
    a, b = a[~a.index.duplicated()], b[~b.index.duplicated()]
    both = a.index.intersection(b.index)
    return list(a[both] - b[both])


def p_value(differences: list[float]) -> float:
    """Two-sided paired t-test of mean 0 (NaN with fewer than 2 pairs; 1 when every pair is equal)."""
    d = [x for x in differences if x == x]
    if len(d) < 2:
        return math.nan
    if all(x == d[0] for x in d):
        return 1.0 if d[0] == 0 else 0.0
    from scipy import stats  # lazily, as `effect` does

    return float(stats.ttest_1samp(d, 0.0).pvalue)


def holm(p_values: list[float], alpha: float = 1 - LEVEL) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level `alpha` (NaN: never)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    rejected = [False] * len(p_values)
    m = len(order)
    for k, (p, i) in enumerate(order):
        if p > alpha / (m - k):
            break
        rejected[i] = True
    return rejected
