"""Markdown tables and number formatting shared by the report and the study sections."""
from __future__ import annotations

import math


def md_table(header: list[str], rows: list[list], aligned: bool = False) -> str:
    """A Markdown table; `aligned`: each column padded to its widest cell, so that it reads as plain
    text too (in a terminal)."""
    cells = [list(map(str, header))]
    cells += [[str(c).replace("|", "\\|").replace("\n", " ") for c in row] for row in rows]
    rule = ["-" for _ in header]
    if aligned:
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        cells = [[c.ljust(w) for c, w in zip(row, widths)] for row in cells]
        rule = ["-" * w for w in widths]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join([lines[0], "|" + "|".join(f"-{r}-" for r in rule) + "|", *lines[1:]])


def fmt(x, digits: int = 3, std=None, scale: float = 1.0, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    text = f"{x / scale:.{digits}f}{suffix}"
    if std is not None and std == std:
        text += f" ± {std / scale:.{digits}f}"
    return text


def fmt_peak(x, kind: str, digits: int, scale: float, std=None) -> str:
    """A peak memory figure, marked with its kind where it is not PSS (`records.runs`: RSS in
    records from before PSS was measured)."""
    return fmt(x, digits, std, scale) + ("" if kind in ("PSS", "") else f" ({kind})")


def image(paths, out_dir) -> str:
    """A figure's PNG inline, with a link to its PDF; paths relative to the report's folder."""
    from pathlib import Path

    png = Path(paths[0]).relative_to(out_dir)
    return f"![{png.stem.replace('_', ' ')}]({png.as_posix()}) ([PDF]({png.with_suffix('.pdf').as_posix()}))"
