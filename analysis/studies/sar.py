"""SAR's memory claim on one machine, three studies that share a folder (results/sar_memory):

- `sar_memory` (experiment=sar_memory): per-rank training working set and epoch time of `single`,
  `full_halo` and `sar` in its three modes against workers; ratios at 4 workers.
- `sar_fit` (experiment=sar_fit): the largest graph whose largest rank stays within a budget, from
  the bisection's probes (the bound is the one the preset's `sweep.bisect` declared, read from the
  records' config).
- `sar_anchor` (experiment=sar_anchor): our `sar` beside IntelLabs/SAR's public numbers
  (results/reference/sar_public_anchor.csv)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import records
from analysis.markdown import fmt, md_table
from analysis.reference import REFERENCE_DIR

GIB = 2 ** 30
ANCHOR = REFERENCE_DIR / "sar_public_anchor.csv"


def rows(recs: list[dict]) -> pd.DataFrame:
    """One row per model, variant and worker count: means over ok seeds."""
    runs_df = records.runs(recs)
    ok = runs_df[runs_df["status"] == "ok"]
    cols = ["epoch_time_s", "train_mem_bytes", "peak_rss_bytes", "comm_bytes_per_epoch"]
    return ok.groupby(["model", "variant", "workers"], as_index=False, sort=False)[cols].mean()


def ratios(t: pd.DataFrame, workers: int = 4) -> list[str]:
    """SAR against single and full_halo at `workers`: the largest rank's training working set and
    the median epoch time."""
    lines = []
    for model, g in t.groupby("model", sort=False):
        pick = {(r["variant"], r["workers"]): r for r in g.to_dict("records")}
        single, halo, sar = pick.get(("single", 1)), pick.get(("full_halo", workers)), pick.get(("sar", workers))
        if single and halo and sar:
            lines.append(f"- {model}: sar/single memory {sar['train_mem_bytes'] / single['train_mem_bytes']:.2f}x, "
                         f"sar/full_halo memory {sar['train_mem_bytes'] / halo['train_mem_bytes']:.2f}x, "
                         f"sar/full_halo time {sar['epoch_time_s'] / halo['epoch_time_s']:.2f}x")
    return lines


def memory_section(recs: list[dict], out_dir: Path) -> list[str]:
    t = rows(recs)
    table = md_table(["model", "method", "workers", "epoch s", "train WS GiB", "peak RSS GiB", "comm MB/epoch"],
                     [[r["model"], r["variant"], r["workers"], fmt(r["epoch_time_s"], 3),
                       fmt(r["train_mem_bytes"], 3, scale=GIB), fmt(r["peak_rss_bytes"], 3, scale=GIB),
                       fmt(r["comm_bytes_per_epoch"], 1, scale=1e6)] for r in t.to_dict("records")])
    return ["## Study: SAR's memory against workers", "",
            "`experiment=sar_memory`. Train WS: the largest rank's training working set; epoch time: median after "
            "warm-up, slowest rank.", "", table, "",
            "At 4 workers (largest rank's training working set; median epoch time):", "",
            *(ratios(t) or ["- (single, full_halo and sar at 4 workers are not all here)"]), ""]


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def largest_fitting(recs: list[dict]) -> pd.DataFrame:
    """Per model, variant and worker count: the largest value of the bisected key whose record met
    the bound, and the smallest that did not (a failed probe did not). Every probe of a group is
    judged by the bound of its newest record: a resumed bisection under a new bound keeps the
    probes it already has, which were run under the old one."""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        groups.setdefault((r["model"], r["variant"], r["workers"]), []).append(r)
    out = []
    for (model, variant, workers), probes in groups.items():
        spec = max(probes, key=lambda r: r.get("started_at") or "")["config"]["sweep"]["bisect"]
        limit = spec.get("at_most", spec.get("at_least"))

        def met(r):
            if r["status"] != "ok":
                return False
            return _get(r, spec["field"]) <= limit if "at_most" in spec else _get(r, spec["field"]) >= limit

        values = [(_get(r["config"], spec["key"]), met(r)) for r in probes]
        out.append({"model": model, "variant": variant, "workers": workers, "key": spec["key"],
                    "bound": f"{spec['field']} {'<=' if 'at_most' in spec else '>='} {limit}",
                    "largest": max((v for v, ok in values if ok), default=float("nan")),
                    "smallest_not": min((v for v, ok in values if not ok), default=float("nan")),
                    "probes": len(probes)})
    return pd.DataFrame(out)


def fit_section(recs: list[dict], out_dir: Path) -> list[str]:
    t = largest_fitting(recs)
    lines = ["## Study: the largest graph within a memory budget", "",
             f"`experiment=sar_fit`: bisection on `{t['key'].iloc[0]}` for the largest value whose record is ok and "
             f"meets `{' / '.join(sorted(set(t['bound'])))}`.", "",
             md_table(["model", "method", "workers", "largest that fits", "smallest that does not", "probes"],
                      [[r["model"], r["variant"], r["workers"], fmt(r["largest"], 0), fmt(r["smallest_not"], 0),
                        r["probes"]] for r in t.to_dict("records")]), ""]
    best = {r["variant"]: r["largest"] for r in t.to_dict("records")}
    if best.get("sar") and best.get("full_halo"):
        lines += [f"sar / full_halo: {best['sar'] / best['full_halo']:.2f}x the graph.", ""]
    return lines


def anchor_section(recs: list[dict], out_dir: Path) -> list[str]:
    public = pd.read_csv(ANCHOR).set_index("workers")
    runs_df = records.runs(recs)
    ok = runs_df[runs_df["status"] == "ok"].groupby("workers")[["epoch_time_s", "peak_rss_bytes",
                                                                "train_mem_bytes"]].mean()
    table = md_table(["workers", "public SAR s/iter", "ours s/epoch", "public peak RSS/rank GB",
                      "ours peak RSS/rank GB", "ours train WS/rank GB"],
                     [[w, fmt(public["epoch_time_s"].get(w), 2), fmt(ok["epoch_time_s"].get(w), 2),
                       fmt(public["peak_rss_GB"].get(w), 2), fmt(ok["peak_rss_bytes"].get(w), 2, scale=1e9),
                       fmt(ok["train_mem_bytes"].get(w), 3, scale=1e9)]
                      for w in sorted(set(public.index) | set(ok.index))])
    return ["## Study: our SAR beside IntelLabs/SAR", "",
            f"`experiment=sar_anchor`; public numbers: `results/reference/{ANCHOR.name}` "
            f"({public['source'].iloc[0]}; {public['note'].iloc[0]}).", "", table, ""]
