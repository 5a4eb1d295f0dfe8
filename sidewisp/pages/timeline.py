"""The run's timeline as the page draws it: a server-rendered SVG (sidewisp/_timeline.html), its bars placed on a
fixed-width plot, each in words (its title) and a link to the history entry it starts at.

The plot is wider than a phone: its box scrolls inside itself (static/css/sidewisp.css, .timeline-box).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from receipts.queries import timeline
from sidewisp.pages import labels

LABEL_WIDTH = 130  # the agents' names, left of the plot
PLOT_WIDTH = 760
LANE_HEIGHT = 30
AXIS_HEIGHT = 22
BAR_HEIGHT = 18
TOOL_HEIGHT = 8  # a tool bar: thinner, at the foot of its agent's turn, so both can be seen
MIN_BAR = 3  # a bar shorter than this is drawn this wide, so it can be seen and clicked
TICKS = 5
IN_PROGRESS = ("▸", "In progress", "info")  # not a verdict yet: a part it needs is still due


@dataclass
class DrawnBar:
    bar: timeline.Bar
    x: float
    y: float
    width: float
    tone: str
    verdict_label: str
    text: str  # the bar in words (its link's name)
    href: str
    height: float = BAR_HEIGHT


def duration(value: timedelta) -> str:
    """A duration in words, to the millisecond: "850 ms", "1.234 s", "2 min 3.456 s", "1 h 2 min"."""
    ms = max(0, round(value.total_seconds() * 1000))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)} min {seconds:.3f} s"
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours} h {minutes} min"


def describe(bar: timeline.Bar) -> str:
    """A bar in words: "Turn of sales: 1.234 s, still going on" / "Handoff h-1 from triage: 12 ms"."""
    if bar.kind == "turn":
        what = f"Turn of {bar.lane}"
    elif bar.kind == "wait":
        what = f"Wait in {bar.lane} for a person" + (f" (handoff {bar.handoff_id})" if bar.handoff_id else "")
    elif bar.kind == "tool":
        what = f"Tool call {bar.tool} in {bar.lane}{', failed' if bar.failed else ''}"
    else:
        what = f"Handoff {bar.handoff_id} from {bar.lane}"
    return f"{what}: {duration(bar.duration)}{', still going on' if bar.open else ''}"


def drawn(tl: timeline.Timeline, href_of) -> dict:
    """What the template draws: lanes with their bars placed, the axis ticks, the current moment."""
    span = max((tl.end - tl.start).total_seconds(), 0.001)

    def x(at) -> float:
        return round(LABEL_WIDTH + (at - tl.start).total_seconds() / span * PLOT_WIDTH, 1)

    lanes = []
    for i, lane in enumerate(tl.lanes):
        y = AXIS_HEIGHT + i * LANE_HEIGHT
        bars = []
        for bar in lane.bars:
            left = x(bar.start)
            width = max(MIN_BAR, round(x(bar.end) - left, 1))
            top = y + (LANE_HEIGHT - BAR_HEIGHT) / 2
            if bar.kind == "tool":  # no verdict: a neutral bar, a failed call marked
                tone = "bad" if bar.failed else "muted"
                top += BAR_HEIGHT - TOOL_HEIGHT
                bars.append(DrawnBar(bar, left, top, width, tone, "", describe(bar), href_of(bar.anchor), TOOL_HEIGHT))
                continue
            _, verdict_label, tone = _verdict(bar.verdict)
            text = f"{describe(bar)} · verdict {verdict_label}"
            bars.append(DrawnBar(bar, left, top, width, tone, verdict_label, text, href_of(bar.anchor)))
        lanes.append({"agent": lane.agent, "y": y, "text_y": y + LANE_HEIGHT / 2 + 5, "bars": bars})
    ticks = [
        {
            "x": round(LABEL_WIDTH + PLOT_WIDTH * n / TICKS, 1),
            "text": f"+{duration(timedelta(seconds=span * n / TICKS))}",
        }
        for n in range(TICKS + 1)
    ]
    height = AXIS_HEIGHT + max(1, len(lanes)) * LANE_HEIGHT + 4
    return {
        "lanes": lanes,
        "ticks": ticks,
        "width": LABEL_WIDTH + PLOT_WIDTH + 40,
        "height": height,
        "now_x": x(tl.now) if tl.now is not None else None,
        "bar_height": BAR_HEIGHT,
        "plot_left": LABEL_WIDTH,
        "total": duration(tl.end - tl.start),
        "count": len(tl.bars),
    }


def _verdict(code: str) -> tuple[str, str, str]:
    return IN_PROGRESS if code == timeline.IN_PROGRESS else labels.VERDICTS.get(code, labels.UNKNOWN)
