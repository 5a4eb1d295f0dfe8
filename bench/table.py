"""The one table `make bench` prints: every benchmark returns rows of it.

A benchmark module exposes `rows(quick) -> list[Row]` (and may run alone as
a script); `bench/run.py` calls them in turn, stamps each row with the load
average while its section ran, and prints one markdown table. Figures are
printed, never judged: nothing here passes or fails on time.

A rate says what was stored, beside what was offered (`stored_rate`); a row
read against a peer or a floor measured in the same run says the ratio
(`versus`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

TIMES = "\u00d7"  # the multiplication sign
COLUMNS = ("section", "what", "figure", "peer / goal", "note", "load (1 min, start → end)")


@dataclass(frozen=True)
class Row:
    section: str  # "overhead", "recording", "live", "pages", "workers"
    what: str  # what was measured, in words
    figure: str  # the measured figure(s), formatted
    goal: str = ""  # the peer's figure or the goal it is read against, with the ratio to it
    note: str = ""  # how it was measured, or what stands in the way
    load: str = ""  # the machine's load average while the section ran (bench.run fills it)


def markdown(rows: Iterable[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = (row.section, row.what, row.figure, row.goal, row.note, row.load)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def load_average() -> float:
    """The machine's 1-minute load average (0.0 where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def stored_rate(stored: int, offered: int, seconds: float, unit: str) -> str:
    """`<stored>/s stored of <offered>/s offered` — a row never reports only what it offered."""
    if seconds <= 0:
        return f"0 {unit}/s stored (no time measured)"
    shown = f"{stored / seconds:,.0f} {unit}/s stored"
    if stored == offered:
        return f"{shown} (all {offered:,} offered)"
    return f"{shown} of {offered / seconds:,.0f}/s offered ({stored:,} of {offered:,})"


def versus(value: float, reference: float, name: str) -> str:
    """`<TIMES>0.58 of <name>`: a figure as a multiple of its peer, floor or goal measured in the same run."""
    if reference <= 0 or value != value or reference != reference:  # nan: nothing to compare
        return f"no ratio to {name} (not measured)"
    ratio = value / reference
    return f"{TIMES}{ratio:.2f} of {name}" if ratio >= 0.1 else f"{TIMES}{ratio:.2g} of {name}"
