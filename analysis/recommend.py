"""What `python -m analysis advise` recommends, and the summary that opens its page (docs/projection.md,
"advise: the recommendation").

The rule, per worker count and then across them:
- a method is a candidate where it fits a rank's memory (`costmodel.fits`, as projected) and its accuracy
  effect, measured inside the user's graph's regime (`advise.nearest`), is not a cost (`effect_status`:
  resolved by its page's rule, or an interval below 0 that the page's correction does not call resolved,
  left out to be safe and said so), or costs at most the user's `--tolerance` in points (the point
  estimate);
- candidates whose accuracy is known here (`known`: an exact method, whose effect is 0 by construction in
  any regime, or an effect measured inside this regime) rank before those whose accuracy is not (not
  measured, or "not measured in this regime": an approximation measured at other P or halo is not taken
  to be safe);
- within each, candidates rank by projected time to the target accuracy (`advise.seconds_to_target`: the
  epochs a method took to the findings' target at small scale times its projected epoch time); a candidate
  with no time to the target (not measured, or missed in some seed) ranks after every one that has one,
  by epoch time;
- the recommendation is the first candidate over every worker count asked, the runner-up the first of
  another method.

Every projected figure carries a [low, high] range from the projection's validated error
(docs/results/projection.csv): the largest error, not the median, because a range a user acts on should
hold for every validated run, not for half of them (and at projected scale it is not validated at all,
which the page says). The error is |projected - measured| / measured, so the measured value lies in
[projected / (1 + e), projected / (1 - e)].

Two things the cost model's rows do not say by themselves, found by projecting again (`annotate`):
- at P=1 an approximate method's approximation may have nothing to act on (no halo): where its projection
  equals its exact control's, the row is its control there (`as_control`), and the accuracy effect and
  epochs measured with the approximation at P >= 2 do not apply to it;
- a row whose layer 0 is not exchanged (`layer0=precomputed`: an option, not the method) is projected
  again with layer 0 exchanged, and where that is slower the row says how much of its time the option
  saves (`option_saves`).
"""
from __future__ import annotations

import math
import shlex

from analysis import costmodel, projection
from analysis.paired import reading
from analysis.markdown import md_table

#: The readings of a measured accuracy effect (`effect_status`).
COST, GAIN, UNRESOLVED, NOT_MEASURED = "resolved cost", "resolved gain", "not resolved", "not measured"
#: A page's verdict that the effect lies within its declared margin (TOST: `paired.verdict`).
EQUIVALENT = "equivalent within its margin"
#: An effect measured, but outside the regime of the user's graph (`advise.nearest`): not carried to it.
NOT_IN_REGIME = "not measured in this regime"
#: The readings that leave a method's accuracy unknown at the user's graph.
UNKNOWN = (NOT_MEASURED, NOT_IN_REGIME)
#: An interval below 0 that its page does not call resolved: uncorrected (the findings page makes no
#: multiplicity correction) or not surviving Holm (the scaling page). Not a finding, but a recommendation
#: a user acts on leaves it out, and says which it is.
LIKELY_COST = "cost not resolved after correction"
GB = 1e9


def effect_status(finding: dict | None) -> str:
    """The one reading of a measured accuracy effect (method minus its control, points, 95 % interval)
    the recommendation rests on: the verdict its page states where it states one (costs, gains, equivalent;
    otherwise not resolved, or a likely cost where the interval lies below 0); for a page without verdicts
    (records from before them): COST where the interval excludes 0 below the control, GAIN above it,
    UNRESOLVED where it contains 0 (within noise or too wide to say), NOT_MEASURED where no effect was
    measured (the reference itself, too few seeds), NOT_IN_REGIME where it was measured only outside the
    user's graph's regime (`advise.nearest`'s stand-in row). Read through the suite's one rule
    (`paired.reading`); a change of how effects read lands there and here alone."""
    if finding is not None and finding.get("not_in_regime"):
        return NOT_IN_REGIME
    if finding is None or finding.get("effect_pt") is None:
        return NOT_MEASURED
    low, high = finding.get("effect_low_pt"), finding.get("effect_high_pt")
    word = (finding.get("verdict") or "").strip()
    if word:  # the page's own verdict (`paired.verdict`: Holm over the page, TOST at the margin it declared)
        if word in ("costs", "gains", "equivalent"):
            return {"costs": COST, "gains": GAIN, "equivalent": EQUIVALENT}[word]
        return LIKELY_COST if high is not None and high < 0 else UNRESOLVED
    if low is None or high is None or not (low > 0 or high < 0):
        return UNRESOLVED
    # the page's own correction decides "resolved": Holm on the scaling page (`holm`), none on the findings page
    if reading(low, high, corrected=finding.get("holm")) == "resolved":
        return COST if high < 0 else GAIN
    return LIKELY_COST if high < 0 else UNRESOLVED


def finding_at(row: dict, p: int) -> tuple[dict | None, str]:
    """The accuracy effect that applies to `row` at `p` workers and where it was measured (`advise.nearest`
    on the devices the row runs on, with the user's graph's statistics there, `statistic_here` and `skew_here`);
    none for a row that is its control at P=1 (its approximation idle, its effect measured with it)."""
    from analysis.advise import nearest
    if row.get("as_control"):
        return None, "approximation idle at P=1; its control's effect not measured"
    return nearest(row["accuracy"], row.get("devices", p), row.get("statistic_here"), row.get("skew_here"))


def exact(row: dict) -> bool:
    """An exact method's row: its accuracy effect is 0 by construction, in any regime."""
    return row["about"]["kind"] == "exact" and not row.get("as_control")


def known(row: dict, p: int) -> bool:
    """Whether a candidate's accuracy at `p` is known: an exact method, or an effect measured inside the
    user's graph's regime (which the rule admitted); not where it is not measured, or measured elsewhere."""
    return exact(row) or effect_status(finding_at(row, p)[0]) not in UNKNOWN


def order(row: dict, p: int) -> tuple:
    """The rule's order of candidates: accuracy known before not, then time to the target, then epoch time."""
    s = seconds(row)
    return not known(row, p), s is None, s if s is not None else row["projected_epoch_s"]


def admits(finding: dict | None, tolerance: float | None) -> tuple[bool, str]:
    """Whether an accuracy effect lets its method be recommended, and why not: a resolved cost is
    refused unless its point estimate costs at most `tolerance` points."""
    status = effect_status(finding)
    if status not in (COST, LIKELY_COST):
        return True, ""
    cost = -finding["effect_pt"]
    if tolerance is not None and cost <= tolerance:
        return True, f"costs {cost:.1f} pt, within the tolerance of {tolerance:g} pt"
    why = ("resolved accuracy cost" if status == COST else
           "accuracy cost: its interval excludes 0 at 5 %, " + ("not after Holm" if finding.get("holm") is not None
                                                               else "uncorrected") + ", so left out to be safe")
    return False, why + (f", beyond {tolerance:g} pt" if tolerance is not None else "")


def seconds(row: dict) -> float | None:
    """Projected seconds to the target accuracy (`advise.seconds_to_target`: none where not measured, or
    for a row that is its control at P=1)."""
    from analysis.advise import seconds_to_target
    return seconds_to_target(row)


def ranked(rows: list[dict], p: int, tolerance: float | None) -> tuple[list[dict], list[tuple[dict, str]]]:
    """The candidates at `p` in the rule's order, and the rest with why each is not one."""
    candidates, refused = [], []
    for r in (r for r in rows if r["workers"] == p):
        ok, why = admits(finding_at(r, p)[0], tolerance)
        if not r["fits"]:
            refused.append((r, "does not fit"))
        elif not ok:
            refused.append((r, why))
        else:
            candidates.append(r)
    candidates.sort(key=lambda r: order(r, p))
    return candidates, refused


def choose(result: dict, tolerance: float | None) -> list[dict]:
    """The recommendation and the runner-up (another method) over every worker count: at most two rows."""
    firsts = [r for p in result["workers"] for r in ranked(result["rows"], p, tolerance)[0]]
    firsts.sort(key=lambda r: (*order(r, r["workers"]), r["workers"]))
    chosen = []
    for r in firsts:
        if not chosen or r["method"] != chosen[0]["method"]:
            chosen.append(r)
        if len(chosen) == 2:
            break
    return chosen


# ------------------------------------------------------------------ ranges from the validated error
def largest_error(validation: list[dict], quantity: str) -> float | None:
    """The largest validated relative error of `quantity` (`epoch_time`, `working_set`); None if not validated."""
    errors = [r["largest_error"] for r in validation if r["quantity"] == quantity and r["largest_error"] is not None]
    return max(errors) if errors else None


def around(x: float, error: float | None) -> tuple[float, float]:
    """[low, high] of a measured value whose projection is `x`, for a relative error up to `error`."""
    if error is None:
        return math.nan, math.nan
    return x / (1 + error), (x / (1 - error) if error < 1 else math.inf)


def figures(row: dict, validation: list[dict]) -> dict:
    """The row's projected figures, each (value, low, high): epoch s, s to target, peak GB a device (the
    working set's error on its working set; graph, features and parameters are counted), device-hours per
    100 epochs (devices × epoch s × 100 / 3600)."""
    t_err, m_err = largest_error(validation, "epoch_time"), largest_error(validation, "working_set")
    epoch = row["projected_epoch_s"]
    to_target = seconds(row)
    devices = row.get("devices", row["workers"])
    peak, train = row["projected_peak_mem_bytes"], row["projected_train_mem_bytes"]
    ws_low, ws_high = around(train, m_err)
    hours = devices * epoch * 100 / 3600
    return {"epoch_s": (epoch, *around(epoch, t_err)),
            "to_target_s": (to_target, *around(to_target, t_err)) if to_target is not None else None,
            "peak_gb": (peak / GB, (peak - train + ws_low) / GB, (peak - train + ws_high) / GB),
            "device_hours": (hours, *around(hours, t_err))}


def span(value: tuple | None, unit: str = "") -> str:
    """`1.39 s [0.832, 4.21]`; `–` where there is none."""
    from analysis.advise import number
    if value is None:
        return "–"
    x, low, high = value
    rng = "" if math.isnan(low) else f" [{number(low)}, {'∞' if math.isinf(high) else number(high)}]"
    return f"{number(x)}{unit}{rng}"


# ------------------------------------------------------------------ what a row is, projected again
def annotate(result: dict, stats: dict, profile, model) -> None:
    """Mark the rows whose time the bare projection misattributes (module docstring): `as_control` at P=1,
    `option_saves` where layer 0's option, not the method, makes the row faster."""
    from analysis.advise import variants
    from benchmarks.families.partition_parallel import LAYER0
    from benchmarks.run.method import method_defaults
    exchanged = LAYER0[0]  # the plain exact treatment of layer 0: every method's without the option
    options_of = {}
    for r in result["rows"]:
        name = r["method"]
        if name not in options_of:
            options_of[name] = dict(variants(name, method_defaults(name)))
        options = options_of[name][r.get("variant") or name]
        cls = costmodel.plugin(name)
        mode = costmodel.hooks(cls).layer0_mode(costmodel.typed_options(cls, options))
        devices = r.get("devices", r["workers"])

        def again(method, opts) -> dict:
            rows, _ = projection.project_setting({"method": method, "variant": method, "model": r["model"]}, opts,
                                                 model, stats, [devices], profile)
            return rows[0]
        if devices == 1 and r["workers"] == 1 and not cls.single_process and cls.About.exact_control:
            control, control_options = control_of(name, options)
            c = again(control, control_options)
            if math.isclose(c["projected_epoch_s"], r["projected_epoch_s"], rel_tol=1e-9) and math.isclose(
                    c["projected_peak_mem_bytes"], r["projected_peak_mem_bytes"], rel_tol=1e-9):
                switched = " ".join(f"{k}={v}" for k, v in cls.About.exact_control.items() if k != "name")
                r["as_control"] = " ".join(x for x in (control, switched, f"layer0={mode}" if "layer0" in
                                                       control_options else "") if x)
        if "layer0" in options and mode != exchanged:
            plain = again(name, {**options, "layer0": exchanged})
            if plain["projected_epoch_s"] > r["projected_epoch_s"]:
                r["option_saves"] = {"option": f"layer0={mode}", "plain": f"layer0={exchanged}",
                                     "plain_epoch_s": plain["projected_epoch_s"]}


def control_of(name: str, options: dict) -> tuple[str, dict]:
    """The exact control of method `name` at `options` (`About.exact_control`; `name` in it switches to
    another method, which keeps the options both declare, as `benchmarks.run.config.control_config` does)."""
    from benchmarks.run.method import method_defaults
    spec = dict(costmodel.plugin(name).About.exact_control or {})
    other = spec.pop("name", None)
    if other is None:
        return name, {**options, **spec}
    declared = method_defaults(other)
    return other, {**declared, **{k: v for k, v in options.items() if k in declared}, **spec}


# ------------------------------------------------------------------ the command to run a row
def command(row: dict, result: dict) -> str:
    """The command that runs `row` on the cluster: `torchrun` on as few nodes as hold its devices (the
    same number on each), or on one device `python -m benchmarks` (the suite starts its one rank itself),
    with the graph, model and device of the advice. Composes with the suite's config (a test holds it)."""
    devices = row.get("devices", row["workers"])
    name, *set_options = (row.get("variant") or row["method"]).split()
    m = result["model"]
    args = [f"method={name}", *(f"method.{o}" for o in set_options), f"workers={devices}",
            *result.get("dataset_overrides", [f"dataset={result['graph']}"]), f"model={m['name']}",
            f"hidden={m['hidden']}", f"layers={m['layers']}", f"device={result.get('device_kind', 'cuda')}"]
    if devices == 1:
        return shlex.join(["python", "-m", "benchmarks", *args])
    per_node = max(1, result.get("ranks_per_node", devices))
    nodes = next(n for n in range(math.ceil(devices / per_node), devices + 1) if devices % n == 0)
    launch = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={devices // nodes}"]
    if nodes > 1:
        launch += ["--node-rank=$NODE_RANK", "--master-addr=$HEAD"]
    return " ".join(launch) + " -m benchmarks " + shlex.join(args)


def dataset_overrides(stats: dict) -> list[str]:
    """The `dataset=` overrides of the advice's graph: a proxy or a named graph by its name, a measured
    statistics file by the dataset config it was measured with."""
    g = stats["graph"]
    config = g.get("config") if not stats.get("proxy") else None
    if not isinstance(config, dict) or "name" not in config:
        return [f"dataset={g['name']}"]
    return [f"dataset={config['name']}", *(f"dataset.{k}={v}" for k, v in config.items() if k != "name")]


# ------------------------------------------------------------------ the page's first screen
def accuracy(row: dict, p: int) -> str:
    """The accuracy effect that applies at `p`, short: `+0.7 pt, not resolved`, `exact`, `not measured`,
    `not measured in this regime`."""
    found, _ = finding_at(row, p)
    status = effect_status(found)
    if exact(row):
        return "exact"
    return status if status in UNKNOWN else f"{found['effect_pt']:+.1f} pt, {status}"


def name_of(row: dict) -> str:
    text = f"`{row.get('variant') or row['method']}`"
    return text + (f" (= `{row['as_control']}` at P=1)" if row.get("as_control") else "")


def why(row: dict, result: dict, tolerance: float | None, first: dict | None = None) -> str:
    """One line: why the row fits, how fast it reaches the target, what its accuracy effect is, and where
    an option rather than the method makes it fast."""
    from analysis.advise import effect, number, to_target
    p = row["workers"]
    f = figures(row, result["validation"])
    has = result["memory_per_rank_bytes"][p] / GB
    parts = [f"fits ({span(f['peak_gb'], ' GB')} of the {number(has)} GB a device has)"]
    if f["to_target_s"] is not None:
        lead = "fastest to the target accuracy" if first is None else "next fastest to the target accuracy"
        parts.append(f"{lead}: {span(f['to_target_s'], ' s')} ({to_target(row)[1].split(' (')[0]} epochs × "
                     f"{number(row['projected_epoch_s'])} s)")
    else:
        parts.append(f"no time to the target measured ({to_target(row)[1]}): ranked by epoch time, "
                     f"{span(f['epoch_s'], ' s')}")
    found, where = finding_at(row, p)
    status = effect_status(found)
    if exact(row):
        parts.append("accuracy: exact (its effect 0 by construction, in any regime)")
    elif status in UNKNOWN:
        what = (effect(found, short=True) if status == NOT_IN_REGIME else where if row.get("as_control")
                else "effect not measured")
        parts.append(f"accuracy: {what}; not known here, so not taken to be safe: ranked after every candidate "
                     "whose accuracy is known")
    else:
        parts.append(f"accuracy {effect(found, short=True)} {where}, {status}"
                     + (f" ({admits(found, tolerance)[1]})" if status in (COST, LIKELY_COST) else ""))
    if row.get("option_saves"):
        s = row["option_saves"]
        parts.append(f"its default {s['option']}, an option, not the method, gives "
                     f"{number(row['projected_epoch_s'])} s an epoch against {number(s['plain_epoch_s'])} s with "
                     f"{s['plain']}")
    return "; ".join(parts) + "."


def summary(result: dict) -> list[str]:
    """The first screen of the page and of what advise prints: the recommendation and the runner-up, each
    with its reason and command; the best candidate at each worker count with ranges and device-hours; what
    the rule left out, and the rule."""
    from analysis.advise import effect
    tolerance, validation = result.get("tolerance"), result["validation"]
    chosen = choose(result, tolerance)
    lines = ["## Recommendation", ""]
    if not chosen:
        return lines + ["No method fits and passes the accuracy rule at these worker counts "
                        "(the tables below say why each is left out).", ""]
    for label, row in zip(("Recommended", "Runner-up"), chosen):
        devices = row.get("devices", row["workers"])
        on = f"{devices} device{'s' if devices != 1 else ''}"
        lines += [f"**{label}: {name_of(row)} on {on}** ({row['about']['kind']}): "
                  + why(row, result, tolerance, None if label == "Recommended" else chosen[0]), "",
                  f"    {command(row, result)}", ""]
    body, firsts, refused = [], [], {}
    for p in result["workers"]:
        candidates, left_out = ranked(result["rows"], p, tolerance)
        for r, reason in left_out:
            if reason != "does not fit":
                finding, where = finding_at(r, p)
                refused.setdefault(r.get("variant") or r["method"], f"{effect(finding, short=True)} {where}: {reason}")
        if not candidates:
            body.append([p, "none fits and passes the rule", "", "", "", "", ""])
            continue
        r = candidates[0]
        firsts.append(r)
        f = figures(r, validation)
        body.append([p, name_of(r), span(f["to_target_s"]), span(f["epoch_s"]), span(f["peak_gb"]),
                     span(f["device_hours"]), accuracy(r, p)])
    lines += ["Best candidate at each worker count (projected; [low, high] from the projection's largest "
              "validated error):", "",
              md_table(["P", "method", "s to target", "epoch s", "peak GB/device", "device-h / 100 epochs",
                        "accuracy"], body, aligned=True), ""]
    cheapest = min(firsts, key=lambda r: figures(r, validation)["device_hours"][0])
    if cheapest is not chosen[0]:
        lines += [f"Fewest device-hours: {name_of(cheapest)} at P={cheapest['workers']} "
                  f"({span(figures(cheapest, validation)['device_hours'])} per 100 epochs, against "
                  f"{span(figures(chosen[0], validation)['device_hours'])} for the recommendation).", ""]
    if refused:
        lines += ["Left out by the accuracy rule: " + "; ".join(f"`{n}` ({why_not})" for n, why_not in refused.items())
                  + ("." if tolerance is not None else
                     ". `--tolerance <points>` admits a cost up to that many points."), ""]
    errors = [f"{what} " + (f"{100 * e:.0f} %" if e is not None else "not validated")
              for what, e in (("epoch time", largest_error(validation, "epoch_time")),
                              ("working set", largest_error(validation, "working_set")))]
    within = f" (or within {tolerance:g} pt)" if tolerance is not None else ""
    lines += [f"Rule: fits, accuracy effect not a cost (resolved, or excluding 0 before the page's correction)"
              f"{within}; accuracy known here (exact: 0 by construction; or measured inside this graph's regime) "
              f"before accuracy not known (not measured, or {NOT_IN_REGIME}: not taken to be safe); then fastest "
              "projected time to the target accuracy (epochs measured at small scale × projected "
              "epoch time). Ranges: the largest validated "
              f"error ({', '.join(errors)}), which covers every validated run; at this scale and hardware it is "
              "not validated.", ""]
    return lines
