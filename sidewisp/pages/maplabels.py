"""Where the team map's arrow labels go: rectangles in, centres out, no two labels and no label and node overlapping.

A pure function of numbers (no Django, no SVG): `place` takes the rectangles labels must keep off (the agents,
the nested teams' titles) and, for each label in priority order, its arrow's path and its size, and gives each
label a centre. It tries the arrow itself first (the middle, then further along), then just beside it, then the
nearest free place around the arrow's middle (the drawing then joins label and arrow with a leader line). The
search always ends: far enough from everything, every place is free.

A label's width is estimated from its characters at the widths of a wide font (DejaVu Sans Bold, what Debian's
Chromium uses for system-ui), so a real browser's narrower glyphs only leave a little more room.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

Point = tuple[float, float]
Rect = tuple[float, float, float, float]  # x, y (top-left), w, h

FONT_PX = 12
LABEL_H = 15.0
GAP = 2.0  # the least room between two labels, or a label and a node
SHARES = (0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85)  # where along its arrow a label may go, best first
CELL = 60.0
RINGS = 40  # how far (in steps) the search around an arrow's middle goes before it goes below everything
ON_ARROW = 3.0  # a label whose centre is further than this from its arrow gets a leader line
# Advance widths (em) of DejaVu Sans Bold, rounded up; anything else counts as a wide letter.
_EM = {
    **dict.fromkeys("0123456789", 0.70),
    **dict.fromkeys(" ·.,:;!|'", 0.40),
    **dict.fromkeys("ijlft()[]r/", 0.50),
    **dict.fromkeys("%mwMW", 1.05),
    **dict.fromkeys("#<>+=~…✓✗◔→", 0.90),
}
_EM_DEFAULT = 0.78


def label_width(text: str) -> float:
    """The width a 12 px label needs, rounded up, with 2 px of room either side."""
    return math.ceil(sum(_EM.get(ch, _EM_DEFAULT) for ch in text) * FONT_PX) + 4.0


@dataclass(frozen=True)
class Label:
    path: tuple[Point, ...]  # its arrow, from sender to receiver
    w: float
    h: float = LABEL_H


def along(points: Sequence[Point], share: float) -> Point:
    """The point `share` of the way along the path."""
    lengths = [math.hypot(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(points)]
    rest = sum(lengths) * share
    for (a, b), length in zip(itertools.pairwise(points), lengths, strict=True):
        if rest <= length and length:
            t = rest / length
            return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
        rest -= length
    return points[len(points) // 2]


def place(obstacles: Iterable[Rect], labels: Sequence[Label]) -> list[Point]:
    """Each label's centre, in the order given (earlier labels get the better places); none overlaps another
    label or an obstacle by less than GAP."""
    taken = _Grid()
    for rect in obstacles:
        taken.add(rect)
    centres = []
    for label in labels:
        for cx, cy in _candidates(label, taken):
            rect = (cx - label.w / 2, cy - label.h / 2, label.w, label.h)
            if not taken.hits(rect):
                taken.add(rect)
                centres.append((cx, cy))
                break
    return centres


def _candidates(label: Label, taken: _Grid) -> Iterator[Point]:
    path, w, h = label.path, label.w, label.h
    if not path:
        path = ((0.0, 0.0),)
    points = [along(path, share) for share in SHARES] if len(path) > 1 else [path[0]]
    yield from points
    for cx, cy in points:  # just beside the arrow: right, left, above, below
        yield from ((cx + w / 2 + GAP, cy), (cx - w / 2 - GAP, cy), (cx, cy - h / 2 - GAP), (cx, cy + h / 2 + GAP))
    mx, my = points[0]
    step_x, step_y = 8.0, h / 2 + GAP
    for ring in range(1, RINGS + 1):
        around = [(i, j) for i in range(-ring, ring + 1) for j in range(-ring, ring + 1) if max(abs(i), abs(j)) == ring]
        around.sort(key=lambda ij: (math.hypot(ij[0] * step_x, ij[1] * step_y), ij))
        for i, j in around:
            yield (mx + i * step_x, my + j * step_y)
    yield (mx, taken.bottom + GAP + h / 2 + GAP)  # below everything: always free


def leader(centre: Point, size: tuple[float, float], path: Sequence[Point]) -> tuple[Point, Point] | None:
    """The line from a label placed off its arrow to the nearest point of the arrow, from the label's edge;
    None when the label sits on its arrow."""
    near = nearest(path, centre)
    dx, dy = near[0] - centre[0], near[1] - centre[1]
    if math.hypot(dx, dy) <= ON_ARROW:
        return None
    w, h = size
    t = min(w / 2 / abs(dx) if dx else math.inf, h / 2 / abs(dy) if dy else math.inf)
    if t >= 1:  # the arrow passes under the label
        return None
    return ((centre[0] + dx * t, centre[1] + dy * t), near)


def nearest(path: Sequence[Point], p: Point) -> Point:
    """The point of the polyline `path` nearest to `p`."""
    if len(path) == 1:
        return path[0]
    best, best_d = path[0], math.inf
    for (ax, ay), (bx, by) in itertools.pairwise(path):
        vx, vy = bx - ax, by - ay
        length2 = vx * vx + vy * vy
        t = max(0.0, min(1.0, ((p[0] - ax) * vx + (p[1] - ay) * vy) / length2)) if length2 else 0.0
        q = (ax + vx * t, ay + vy * t)
        d = math.hypot(q[0] - p[0], q[1] - p[1])
        if d < best_d:
            best, best_d = q, d
    return best


def overlap(a: Rect, b: Rect, gap: float = 0.0) -> bool:
    """Whether the rectangles come closer than `gap` (touching edges at gap 0 do not overlap)."""
    return (
        a[0] < b[0] + b[2] + gap and b[0] < a[0] + a[2] + gap and a[1] < b[1] + b[3] + gap and b[1] < a[1] + a[3] + gap
    )


class _Grid:
    """The rectangles taken, in CELL squares: each try looks at the few rectangles near it (200 labels stay cheap)."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], list[Rect]] = defaultdict(list)
        self.bottom = 0.0

    def add(self, rect: Rect) -> None:
        for cell in self._cells(rect):
            self.cells[cell].append(rect)
        self.bottom = max(self.bottom, rect[1] + rect[3])

    def hits(self, rect: Rect) -> bool:
        return any(overlap(rect, other, GAP) for cell in self._cells(rect) for other in self.cells.get(cell, ()))

    @staticmethod
    def _cells(rect: Rect) -> Iterator[tuple[int, int]]:
        x, y, w, h = rect
        # GAP more on every side: a rectangle near a cell's edge is found from the next cell too.
        for i in range(math.floor((x - GAP) / CELL), math.floor((x + w + GAP) / CELL) + 1):
            for j in range(math.floor((y - GAP) / CELL), math.floor((y + h + GAP) / CELL) + 1):
                yield (i, j)
