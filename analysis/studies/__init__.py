"""Study sections of the report. A study is an experiment preset (`conf/experiment/`, what to run;
it sets `study: <name>`) plus a section here that reads only its records (tables, goals, figures).
`sections` returns the sections of the studies whose records are in a folder, in this order; a
record of a study without a section is in the report's general tables only."""
from __future__ import annotations

from pathlib import Path

from analysis.studies import (boundary, digest, families, feature_cache, findings, gas, kernels, lr_choice, planetoid,
                              runtime, sampling, sar, savers, scaling)

SECTIONS = {
    "lr_choice": lr_choice.section,
    "findings": findings.section,
    "runtime": runtime.section,
    "sar_memory": sar.memory_section,
    "sar_fit": sar.fit_section,
    "sar_anchor": sar.anchor_section,
    "digest": digest.section,
    "digest_stragglers": digest.stragglers_section,
    "sampling": sampling.section,
    "boundary": boundary.section,
    "savers": savers.section,
    "kernels": kernels.section,
    "families": families.section,
    "feature_cache": feature_cache.section,
    "gas": gas.section,
    "scaling": scaling.section,
    "planetoid": planetoid.section,
}


#: Studies whose table is also written as data beside a published page (`<page>.csv`).
TABLES = {"findings": findings.csv, "scaling": scaling.csv, "planetoid": planetoid.csv}


def of(records: list[dict], study: str) -> list[dict]:
    return [r for r in records if r["config"].get("study") == study]


def sections(records: list[dict], out_dir: Path) -> list[str]:
    parts = []
    for name, section in SECTIONS.items():
        mine = of(records, name)
        if mine:
            parts += section(mine, Path(out_dir))
    return parts
