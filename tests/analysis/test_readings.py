"""The hand-written readings of intervals follow the one rule of docs/analysis.md ("Reading an
interval"), and every method's claim names its paper or says it is a description.

A clause (a sentence, or the part of it between semicolons; a table cell) of README.md or docs/*.md
that prints an interval, `-0.9 [-1.3, -0.4]`, and one of the words "resolved", "within noise" or
"not resolved" is held to the rule, first on the printed numbers alone ("resolved" must exclude 0,
"within noise" must contain 0 and lie within ±1 point, "not resolved" must not be within noise),
then, where a method named before the interval in that clause (or the page's own, docs/<method>.md)
has a row of the published tables with those numbers (docs/results/findings.csv,
docs/results/scaling.csv), against that row: a
row is resolved only where its page's verdict says costs or gains (`paired.verdict`, Holm over the page), or,
on a page from before the verdicts, where a scaling row survives Holm (`holm`); such a findings row (no
correction on that page) never is. The findings table of docs/findings.md is a copy of the generated page (held to it by
tests/analysis/studies/test_findings.py) and keeps that page's words until it is republished: its
rows are left out here."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.run.method import method_class
from benchmarks.base.registry import method_names
from analysis import PROJECT_ROOT

pytestmark = pytest.mark.fast

ROOT = PROJECT_ROOT
NUM = r"([+\-−]?\d+\.\d+)"
INTERVAL = re.compile(rf"{NUM} \[{NUM}, {NUM}\]")
METHOD = re.compile(r"`([a-z_]+)`")
NOISE = 1.0  # analysis.paired.NOISE_POINTS


def number(text: str) -> float:
    return float(text.replace("−", "-"))


#: Pages not held here: the generated references (no readings).
LEFT_OUT = {"methods.md", "options.md"}


def pages() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in LEFT_OUT)]


def clauses(path: Path) -> list[str]:
    text = path.read_text()
    if path.name == "findings.md":  # the copy of the generated findings table: that page's words
        head, rest = text.split("<!-- findings:start -->")
        block, tail = rest.split("<!-- findings:end -->")
        text = head + "\n".join(line for line in block.splitlines() if not line.startswith("|")) + tail
    out = []
    for paragraph in re.split(r"\n\s*\n|\n(?=\s*[-|#])", text):
        if paragraph.lstrip().startswith("|"):
            out += paragraph.split("|")
        else:
            out += re.split(r";|\.\s", " ".join(paragraph.split()))
    return out


WORD = re.compile(r"\b(not resolved|within noise|resolved)\b")


def word(clause: str, start: int = 0, end: int | None = None, prev_end: int = 0, next_start: int | None = None):
    """The reading word of the interval at [start, end) of `clause`: the first word between it and the
    next interval, else the last between the previous interval and it, else the first after it."""
    end = start if end is None else end
    after = WORD.findall(clause, end, len(clause) if next_start is None else next_start)
    before = WORD.findall(clause, prev_end, start)
    rest = WORD.findall(clause, end)
    return after[0] if after else before[-1] if before else rest[0] if rest else None


def tables() -> list[dict]:
    rows = []
    for name in ("findings", "scaling"):
        t = pd.read_csv(ROOT / "docs" / "results" / f"{name}.csv")
        for r in t.dropna(subset=["effect_pt"]).to_dict("records"):
            # a page read by `paired.verdict` states its word (Holm over the page): resolved is costs or gains;
            # a findings page from before the verdicts made no correction (None: never resolved)
            said = r.get("verdict") if isinstance(r.get("verdict"), str) else None
            corrected = said in ("costs", "gains") if said else bool(r["holm"]) if name == "scaling" else None
            rows.append({"page": name, "method": r["method"], "mean": r["effect_pt"], "low": r["effect_low_pt"],
                         "high": r["effect_high_pt"], "holm": corrected})
    return rows


def allowed(low: float, high: float, corrected: bool | None) -> set[str]:
    """The words the rule allows for an interval (points) and its page's correction."""
    if low > 0 or high < 0:
        return {"resolved"} if corrected else {"not resolved"}
    return {"within noise"} if -NOISE <= low and high <= NOISE else {"not resolved"}


def readings():
    """(page, clause, the methods it may read, mean, low, high, word) for every interval with a word: the
    methods named before the interval in its clause, and the page's own (docs/<method>.md)."""
    for path in pages():
        for clause in clauses(path):
            found = list(INTERVAL.finditer(clause))
            for i, m in enumerate(found):
                w = word(clause, m.start(), m.end(), found[i - 1].end() if i else 0,
                         found[i + 1].start() if i + 1 < len(found) else None)
                if w is None:
                    continue
                named = {*METHOD.findall(clause[:m.start()]), path.stem}  # a method page reads its own method
                yield path.name, clause.strip(), named, *map(number, m.groups()), w


def test_every_reading_follows_the_rule_on_its_printed_interval():
    wrong = []
    for page, clause, _, _, low, high, w in readings():
        contains = low <= 0 <= high
        if (w == "resolved" and contains) \
                or (w == "within noise" and not (contains and -NOISE <= low and high <= NOISE)) \
                or (w == "not resolved" and contains and -NOISE <= low and high <= NOISE):
            wrong.append(f"{page}: {w!r} for [{low}, {high}]: {clause[:160]}")
    assert not wrong, "\n".join(wrong)


def test_every_reading_of_a_published_row_agrees_with_its_table():
    rows = tables()
    wrong, checked = [], 0
    for page, clause, methods, mean, low, high, w in readings():
        match = [r for r in rows if r["method"] in methods and all(
            abs(round(r[k], 1) - v) < 0.051 for k, v in (("mean", mean), ("low", low), ("high", high)))]
        if not match:
            continue
        checked += 1
        if not any(w in allowed(r["low"], r["high"], r["holm"]) for r in match):
            wrong.append(f"{page}: `{match[0]['method']}` {mean} [{low}, {high}] read {w!r}, the rule says "
                         f"{sorted(allowed(match[0]['low'], match[0]['high'], match[0]['holm']))}: {clause[:160]}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 5  # docs/findings.md's scaling readings, at least, are held to the table


def test_the_rule_itself():
    assert allowed(0.0, 0.5, None) == {"within noise"}  # sancus' +0.3 [+0.0, +0.5]: never "resolved"
    assert allowed(-1.3, -0.4, True) == {"resolved"} and allowed(-2.8, -0.2, False) == {"not resolved"}
    assert allowed(-2.5, 0.5, None) == {"not resolved"} and allowed(-2.1, -0.7, None) == {"not resolved"}
    clause = "`sancus` +0.3 [+0.0, +0.5] is resolved"
    assert word(clause) == "resolved" and INTERVAL.search(clause)


def test_every_claim_names_its_paper_or_says_it_is_a_description():
    """`Method.About.claim` (the findings table's last column): "(Authors, Venue Year) ..." for a paper's
    claim, "description: ..." for the suite's own words about a method no paper claims for."""
    bad = {}
    for name in method_names():
        claim = method_class(name).About.claim
        if not (claim.startswith("description: ") or re.match(r"\([^()]*\b(19|20)\d\d\b[^()]*\) \S", claim)
                or re.match(r"\([^()]*(SC'\d\d|arXiv \d{4}\.\d{4,5})[^()]*\) \S", claim)):
            bad[name] = claim
    assert not bad, "; ".join(
        f"method {name}: About.claim = {claim!r} must open with its paper, '(Authors, Venue Year) ...', or say "
        "'description: ...'" for name, claim in bad.items())
