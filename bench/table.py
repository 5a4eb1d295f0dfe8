"""The one table `make bench` prints: every benchmark returns rows of it.

A benchmark module exposes `rows(options) -> list[Row]` (and may run alone as
a script); `bench/run.py` calls them in turn and prints one markdown table.
Figures are printed, never judged: nothing here passes or fails on time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    section: str  # "overhead", "recording", "live", "pages", "workers"
    what: str  # what was measured, in words
    figure: str  # the measured figure(s), formatted
    goal: str = ""  # the peer's figure or the goal it is read against
    note: str = ""  # how it was measured, or what stands in the way


def markdown(rows: Iterable[Row]) -> str:
    lines = ["| section | what | figure | peer / goal | note |", "|---|---|---|---|---|"]
    for row in rows:
        cells = (row.section, row.what, row.figure, row.goal, row.note)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
