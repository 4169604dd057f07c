"""Every results page ships with the records it was read from: `python -m analysis report <folder> --publish
<page>` copies them into `<page stem>/records/`, committed with the page (results/ itself is never tracked);
git holds as many there as the page says it read, and publishing again from them gives the same page.

A later session extends a study by copying them back into the page's folder of records (named in its head),
running its sweep there (it resumes on them, same paths) and publishing again; before records shipped with
their pages (until 2026-12-07) every new machine lost them, and a study could only be rerun whole. The pages
published before then are listed in NOT_KEPT until each is regenerated."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Pages published before records were tracked, their records lost with the machine that ran them;
#: each leaves this list when its sweep is rerun from one clean commit and published with its records.
NOT_KEPT = {
    "docs/results/findings.md": "320 runs of 7fa927eafa",
    "docs/results/lr_choice.md": "144 runs of 3da11eb655 and 7f060c7dc9",
    "docs/results/scaling.md": "807 runs of 4812986352, 5dbb6033ac, a175237db5 and b81f56e3b7",
}

COMMAND = re.compile(r"^python -m analysis report (\S+) --publish (\S+)$", re.M)
RECORDS = re.compile(r"^- Records: (\d+) runs", re.M)


def _pages() -> list[tuple[str, str, int | None]]:
    """(page, its records' folder, the records it says it read), every generated page."""
    found = []
    for page in sorted((ROOT / "docs" / "results").rglob("*.md")):
        text = page.read_text()
        command, records = COMMAND.search(text), RECORDS.search(text)
        if command:
            found.append((command.group(2), command.group(1), int(records.group(1)) if records else None))
    return found


def _git(*args, stdin: bytes | None = None) -> bytes:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, input=stdin, capture_output=True)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if out.returncode != 0:
        pytest.skip(f"not a git checkout: {out.stderr.decode().strip()}")
    return out.stdout


def _committed(page: str, folder: str, into: Path) -> Path:
    """The records git holds beside `page` (`<page stem>/records/`, as `publish` copies them; the index: what is
    committed or staged, never a working file), written under `into` at `folder`, where the page read them."""
    from analysis.report import RECORDS
    shipped = f"{Path(page).with_suffix('')}/{RECORDS}"
    listed = _git("ls-files", "-z", "--", f":(glob){shipped}/*.json")
    _git("checkout-index", f"--prefix={into}/.index/", "--stdin", "-z", stdin=listed)
    (into / folder).parent.mkdir(parents=True, exist_ok=True)
    exported = into / ".index" / shipped
    exported.mkdir(parents=True, exist_ok=True)
    exported.rename(into / folder)
    return into / folder


KEPT = [p for p in _pages() if p[0] not in NOT_KEPT]


def test_every_page_listed_without_its_records_exists():
    pages = {p[0] for p in _pages()}
    assert pages, "no generated page found under docs/results"
    assert set(NOT_KEPT) <= pages, "a page listed here is gone: take it off the list"


@pytest.mark.parametrize("page,folder,n", KEPT, ids=[p[0] for p in KEPT])
def test_a_page_tracks_the_records_it_says_it_read(page, folder, n, tmp_path):
    from analysis.records import load
    assert n is not None, f"{page} names its records' folder but not how many it read (its '- Records:' line)"
    held = len(load(_committed(page, folder, tmp_path)))
    assert held == n, (
        f"{page} says it read {n} records; git holds {held} beside it: commit the page with its folder "
        "(`publish` copies the records it read into `<page stem>/records/`)")


@pytest.mark.parametrize("page,folder,n", KEPT, ids=[p[0] for p in KEPT])
def test_publishing_again_from_the_tracked_records_gives_the_same_page(page, folder, n, tmp_path, monkeypatch):
    from analysis.report import publish
    _committed(page, folder, tmp_path)
    monkeypatch.chdir(tmp_path)  # the page names both paths as given, relative to the project
    publish(folder, page)
    assert (tmp_path / page).read_text() == (ROOT / page).read_text()
    csv = Path(page).with_suffix(".csv")
    if (ROOT / csv).exists():
        assert (tmp_path / csv).read_text() == (ROOT / csv).read_text()
