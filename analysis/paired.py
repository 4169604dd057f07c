"""Paired comparisons over seeds, the way every study attributes a difference (docs/analysis.md).

A run's seed fixes its initial weights, its dropout masks and its partition, so two variants run on
the same seeds differ, seed by seed, only by what tells them apart. An effect is the mean of those
per-seed differences with a 95 % Student-t interval (n - 1 degrees of freedom), read by one rule,
`verdict` (docs/analysis.md, "Reading an interval: the verdict"): "costs", "gains", "equivalent
within +-m" by TOST, "not resolved", "untestable here", with seeds planned by `seeds_for_half_width`.
`reading`'s three words ("resolved", "within noise", "not resolved") read the tables published
before the verdicts. Each approximate method's record names
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


def interval(e: Effect | None) -> str:
    """`-1.3 [-2.8, +0.1] (3)` in points: an effect shown without a verdict of its own (a validation effect
    beside the test effect's verdict); "–" with fewer than 2 pairs."""
    if e is None or e.n < 2:
        return "–"
    return f"{100 * e.mean:+.1f} [{100 * e.low:+.1f}, {100 * e.high:+.1f}] ({e.n})"


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


@dataclass
class Ratio:
    """The ratio of two paired means, mean(a) / mean(b), over `n` seeds, with Fieller's 95 % interval
    [`low`, `high`]: NaN ends where the interval is unbounded (the denominator's own interval reaches 0,
    so no finite range holds the ratio at that level)."""

    n: int
    estimate: float
    low: float
    high: float

    @property
    def bounded(self) -> bool:
        return self.low == self.low and self.high == self.high

    def text(self, scale: float = 100.0, unit: str = " %") -> str:
        if self.n < 2:
            return "–"
        if not self.bounded:  # no estimate shown: a ratio over a denominator that may be 0 is no number to read
            return f"unbounded: the denominator is not resolved ({self.n} seeds)"
        return f"{scale * self.estimate:.0f}{unit} [{scale * self.low:.0f}, {scale * self.high:.0f}] ({self.n} seeds)"


def ratio(numerators, denominators) -> Ratio:
    """mean(a) / mean(b) over the pairs (a_i, b_i) of the same seeds, with Fieller's interval: the ratios r
    for which mean(a) - r mean(b) = 0 is not rejected by its paired t-test at 5 %, i.e. where
    (mean(a) - r mean(b))^2 <= t^2 (v_aa - 2 r v_ab + r^2 v_bb), the v's the means' (co)variances. A
    quadratic in r; bounded only when mean(b) is itself resolved from 0 (its leading coefficient > 0)."""
    pairs = [(float(a), float(b)) for a, b in zip(numerators, denominators) if a == a and b == b]
    n = len(pairs)
    if n < 2:
        return Ratio(n, math.nan, math.nan, math.nan)
    da = [a for a, _ in pairs]
    db = [b for _, b in pairs]
    ma, mb = sum(da) / n, sum(db) / n

    def of_means(u, mu, w, mw):  # the (co)variance of two means over the same n pairs
        return sum((x - mu) * (y - mw) for x, y in zip(u, w)) / (n - 1) / n

    v_aa, v_bb, v_ab = of_means(da, ma, da, ma), of_means(db, mb, db, mb), of_means(da, ma, db, mb)
    from scipy import stats

    t2 = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) ** 2
    lead, half_b, const = mb * mb - t2 * v_bb, ma * mb - t2 * v_ab, ma * ma - t2 * v_aa
    disc = half_b * half_b - lead * const
    estimate = ma / mb if mb else math.nan
    if lead <= 0 or disc < 0:
        return Ratio(n, estimate, math.nan, math.nan)
    root = math.sqrt(disc)
    return Ratio(n, estimate, float((half_b - root) / lead), float((half_b + root) / lead))


def effect(differences) -> Effect:
    d, mean, sd = _mean_sd(differences)
    n = len(d)
    if n == 0:
        return Effect(0, math.nan, math.nan, math.nan)
    if n < 2:
        return Effect(1, d[0], math.nan, math.nan)
    from scipy import stats  # here: importing scipy.stats takes ~1.4 s, which a command that pairs nothing never pays

    half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
    return Effect(n, mean, mean - half, mean + half)


def differences(runs: pd.DataFrame, variant: str, against: str, column: str = "test_acc",
                where: dict | None = None, keys: list[str] = PAIR_KEYS) -> list[float]:
    """`column` of `variant` minus that of `against`, seed by seed, over the ok runs of both that
    share every value of `keys` (and the values in `where`). Leave `workers` out of `keys` to pair
    a run with `single`, which always runs at one worker."""
    return list(paired_differences(runs, variant, against, column, where, keys))


def paired_differences(runs: pd.DataFrame, variant: str, against: str, column: str = "test_acc",
                       where: dict | None = None, keys: list[str] = PAIR_KEYS) -> pd.Series:
    """`differences` indexed by the pair's `keys` (its seed among them), for a study that pairs two effects
    by seed in turn (the scaling study's effect on one partitioner against another's)."""
    ok = runs[runs["status"] == "ok"]
    for key, value in (where or {}).items():
        ok = ok[ok[key] == value]
    a = ok[ok["variant"] == variant].set_index(keys)[column]
    b = ok[ok["variant"] == against].set_index(keys)[column]
    a, b = a[~a.index.duplicated()], b[~b.index.duplicated()]
    both = a.index.intersection(b.index)
    return a[both] - b[both]


def p_value(differences: list[float]) -> float:
    """Two-sided paired t-test of mean 0, at an SD of at least SD_FLOOR (NaN with fewer than 2 pairs)."""
    d, mean, sd = _mean_sd(differences)
    if len(d) < 2:
        return math.nan
    from scipy import stats  # lazily, as `effect` does

    return float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(len(d))), len(d) - 1))


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


# --- The verdict of the next republication (docs/analysis.md, "Reading an interval": the verdict) ---
# `reading` and `Effect.text` above keep the committed pages' words until they are republished.

#: The equivalence margin a claim is tested against unless it declares its own, in points.
MARGIN_POINTS = 1.0
#: The 95 % half-width the headline rows (approximations against their controls) are run to, in points.
HEADLINE_HALF_WIDTH_POINTS = 0.5
#: The most seeds the two-stage plan asks for.
SEED_CAP = 100
TOST_ALPHA = 0.05  # each one-sided test's level: equivalence shown by the 90 % interval inside +-margin
#: The fewest pairs a verdict other than "not resolved" reads: with two, the SD has one degree of freedom and two
#: accuracies on 1,000 test nodes tie often (two seeds both at +0.2 pt), so their interval and TOST are shown but
#: decide nothing.
MIN_PAIRS = 3


#: The smallest paired SD an interval or test takes, in fractions: an accuracy read on a test set of 1,000 nodes
#: (the Planetoid splits') moves in steps of 0.1 pt, so a difference of two carries rounding noise of SD
#: 0.001 / sqrt(6) (two uniform roundings); seeds whose differences came out equal have not measured an SD below
#: it (two seeds both at +0.2 pt are not a resolved gain). Larger test sets round finer: the floor is then
#: conservative by at most this much.
SD_FLOOR = 0.001 / math.sqrt(6)


def _mean_sd(differences) -> tuple[list[float], float, float]:
    """The differences that are numbers, their mean and sample standard deviation, at least SD_FLOOR (NaN with
    fewer than 2)."""
    d = [float(x) for x in differences if x == x]
    if len(d) < 2:
        return d, math.nan, math.nan
    mean = sum(d) / len(d)
    return d, mean, max(SD_FLOOR, math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)))


def tost(differences, margin_pt: float) -> float:
    """The p-value of the two one-sided paired t-tests (TOST) that the mean of `differences`
    (fractions, as `effect` takes them) lies within +-`margin_pt` points: the larger of the two
    one-sided p-values (H0: mean <= -margin; H0: mean >= +margin). p < 5 % is the 90 % interval
    inside +-margin. NaN with fewer than 2 pairs; the SD at least SD_FLOOR."""
    d, mean, sd = _mean_sd(differences)
    if len(d) < 2:
        return math.nan
    margin = margin_pt / 100
    from scipy import stats  # lazily, as `effect` does

    se = sd / math.sqrt(len(d))
    above_low = stats.t.sf((mean + margin) / se, len(d) - 1)   # H0: mean <= -margin
    below_high = stats.t.cdf((mean - margin) / se, len(d) - 1)  # H0: mean >= +margin
    return float(max(above_low, below_high))


@dataclass(frozen=True)
class SeedPlan:
    """Seeds a plan asks for; `capped` when the cap binds (the target is not reached within it)."""

    n: int
    capped: bool


def seeds_for_half_width(sd: float, half_width: float, level: float = LEVEL, cap: int = SEED_CAP) -> SeedPlan:
    """The two-stage plan's second stage: the fewest seeds n (at least 2) whose `level` Student-t
    interval of a paired mean with SD `sd` has half-width t_{n-1} * sd / sqrt(n) <= `half_width`
    (`sd` and `half_width` in one unit); `cap` and capped=True where even `cap` seeds fall short."""
    if not (sd >= 0 and half_width > 0):
        raise ValueError(f"seeds_for_half_width needs sd >= 0 and half_width > 0, not {sd!r}, {half_width!r}")
    from scipy import stats

    quantile = 0.5 + level / 2
    for n in range(2, cap + 1):
        if stats.t.ppf(quantile, n - 1) * sd / math.sqrt(n) <= half_width:
            return SeedPlan(n, False)
    return SeedPlan(cap, True)


def tost_power(n: int, sd: float, margin: float, true_effect: float = 0.0, alpha: float = TOST_ALPHA) -> float:
    """The power of TOST at level `alpha` with n paired seeds of SD `sd` (one unit with `margin` and
    `true_effect`), from the noncentral t: P(T(ncp1) > t) + P(T(ncp2) > t) - 1, the Bonferroni lower
    bound of the exact joint probability (Owen's Q), so the seeds it asks for are never too few."""
    from scipy import stats

    se = sd / math.sqrt(n)
    t = stats.t.ppf(1 - alpha, n - 1)
    return float(stats.nct.sf(t, n - 1, (margin - true_effect) / se)
                 + stats.nct.sf(t, n - 1, (margin + true_effect) / se) - 1)


def seeds_for_equivalence(sd: float, margin: float, power: float = 0.8, true_effect: float = 0.0,
                          cap: int = SEED_CAP) -> SeedPlan:
    """The fewest seeds (at least 2) that show equivalence within +-`margin` by TOST at 5 % with
    `power`, when the true effect is `true_effect` and the paired SD `sd` (`tost_power`)."""
    if not (sd > 0 and margin > abs(true_effect)):
        raise ValueError(f"seeds_for_equivalence needs sd > 0 and margin > |true_effect|, not {sd!r}, {margin!r}")
    for n in range(2, cap + 1):
        if tost_power(n, sd, margin, true_effect) >= power:
            return SeedPlan(n, False)
    return SeedPlan(cap, True)


@dataclass(frozen=True)
class Verdict:
    """One row's verdict: `word` (costs, gains, equivalent, not resolved, untestable), the `text` a
    page prints, the seeds it took (`n`) and, where it is not settled, the seeds it would need."""

    word: str
    text: str
    n: int
    seeds_needed: int | None = None

    def __str__(self) -> str:
        return self.text


def verdicts(family: list, **options) -> list[Verdict | None]:
    """`verdict` of each paired effect of one Holm family (`family`: a list of differences, None where a row has
    no effect): Holm's correction over the family's `p_value`s, each row reading its own flag (a None holds its
    place in the order and reads None). `options`: `verdict`'s keywords (margin_pt, claim_pt, half_width_pt)."""
    rejected = holm([math.nan if d is None else p_value(d) for d in family])
    return [None if d is None else verdict(d, rejected=r, **options) for d, r in zip(family, rejected)]


def verdict(differences, *, rejected: bool, margin_pt: float = MARGIN_POINTS, claim_pt: float | None = None,
            half_width_pt: float = HEADLINE_HALF_WIDTH_POINTS) -> Verdict:
    """The verdict of a paired accuracy effect (`differences` in fractions, higher is better) by the
    rule of docs/analysis.md ("Reading an interval": the verdict):
      - "costs X [CI]" / "gains X [CI]": the 95 % interval excludes 0 and `rejected` (the row
        survives the page's Holm correction, `holm` over its rows' `p_value`s), with MIN_PAIRS or more;
      - "equivalent within +-m": TOST at 5 % passes with margin m = `claim_pt` where the row tests a
        paper's claim, else `margin_pt` (declared before the runs), with MIN_PAIRS or more;
      - "untestable here": neither, and the claim is finer than the row's 95 % half-width: the seeds
        a half-width of the claim needs (`seeds_for_half_width` with the measured SD);
      - "not resolved": neither, with the seeds a half-width of `half_width_pt` needs (where that is
        more than it took).
    Every text states the seeds it took."""
    d, mean, sd = _mean_sd(differences)
    n = len(d)
    seeds = f"{n} seed" + ("" if n == 1 else "s")
    if n < 2:
        return Verdict("not resolved", f"not resolved ({seeds}: no interval)", n)
    e = effect(d)
    low, high, mean_pt, sd_pt = 100 * e.low, 100 * e.high, 100 * mean, 100 * sd
    margin = margin_pt if claim_pt is None else claim_pt
    rejected = rejected and n >= MIN_PAIRS  # two seeds' SD (one degree of freedom, ties common) decides nothing
    equivalent = n >= MIN_PAIRS and tost(d, margin) < TOST_ALPHA
    if (low > 0 or high < 0) and rejected:
        word, lo, hi = ("gains", low, high) if low > 0 else ("costs", -high, -low)
        within = f", within the ±{margin:g} pt margin" if equivalent else ""
        return Verdict(word, f"{word} {abs(mean_pt):.1f} [{lo:.1f}, {hi:.1f}] pt ({seeds}{within})", n)
    interval = f"{mean_pt:+.1f} [{low:+.1f}, {high:+.1f}]"
    if equivalent:
        return Verdict("equivalent", f"equivalent within ±{margin:g} pt: {interval} ({seeds})", n)
    if claim_pt is not None and (high - low) / 2 > claim_pt:
        need = seeds_for_half_width(sd_pt, claim_pt)
        return Verdict("untestable", f"untestable here: {interval} ({seeds}); ±{claim_pt:g} pt needs "
                       f"{'more than' if need.capped else 'about'} {need.n} seeds", n, need.n)
    need = seeds_for_half_width(sd_pt, half_width_pt)
    need = SeedPlan(max(need.n, MIN_PAIRS), need.capped)  # a verdict reads MIN_PAIRS at least
    if need.n <= n:  # the interval is already that narrow: more seeds would not settle it at this target
        return Verdict("not resolved", f"not resolved: {interval} ({seeds})", n)
    return Verdict("not resolved", f"not resolved: {interval} ({seeds}); ±{half_width_pt:g} pt needs "
                   f"{'more than' if need.capped else 'about'} {need.n} seeds", n, need.n)
