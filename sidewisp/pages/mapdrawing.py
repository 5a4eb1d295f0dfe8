"""Where the team map draws each agent, box and arrow, and the words on them: coordinates, words and links.

The layout is `sidewisp.pages.maplayout`'s; this module turns it into nodes, boxes and arrows on one canvas,
places each arrow's words where they cover nothing else, and words each arrow and its accessible name. The SVG
itself is a template (`teammap/_map.html`): this module gives it coordinates, words and links, never markup.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from receipts.queries import teammap
from receipts.queries.teammap import ROOT, Route, TeamMap
from sidewisp.pages import labels
from sidewisp.pages.maplayout import BOX_PAD, BOX_TITLE_H, Point, layout

MARGIN = 12
LABEL_CHAR_W = 6.6  # a 12 px label's average character
LABEL_H = 15
LABEL_CELL = 60
LABEL_SHARES = (0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85)  # where along its arrow a label may go, best first

# The arrows' states, worst first (the table of routes lists them in this order), and their words.
STATE_ORDER = (
    teammap.UNDECLARED,
    teammap.FAILING,
    teammap.WAITING,
    teammap.IN_PROGRESS,
    teammap.HEALTHY,
    teammap.UNUSED,
)
STATE_WORDS = {
    teammap.UNDECLARED: "Undeclared route taken",
    teammap.FAILING: "Failing",
    teammap.WAITING: "Waiting",
    teammap.IN_PROGRESS: "In progress",
    teammap.HEALTHY: "Healthy",
    teammap.UNUSED: "Declared, unused",
}


@dataclass
class DrawnNode:
    scope: str
    name: str
    x: float
    y: float
    w: float
    h: float
    href: str = ""
    title: str = ""

    @property
    def text_x(self) -> float:
        return round(self.x + self.w / 2, 1)

    @property
    def text_y(self) -> float:
        return round(self.y + self.h / 2 + 4.5, 1)


@dataclass
class DrawnBox(DrawnNode):
    """A nested team: its scope's box, with its name as the box's title."""

    @property
    def text_x(self) -> float:
        return round(self.x + 8, 1)

    @property
    def text_y(self) -> float:
        return round(self.y + 15, 1)


@dataclass
class DrawnArrow:
    route: Route
    points: list[Point]
    label_x: float
    label_y: float
    text: str
    title: str
    href: str = ""

    @property
    def state(self) -> str:
        return self.route.state

    @property
    def state_words(self) -> str:
        return STATE_WORDS[self.state]

    @property
    def points_attr(self) -> list[str]:
        return [f"{x:.1f},{y:.1f}" for x, y in self.points]


@dataclass
class Drawing:
    width: float
    height: float
    boxes: list[DrawnBox] = field(default_factory=list)
    nodes: list[DrawnNode] = field(default_factory=list)
    arrows: list[DrawnArrow] = field(default_factory=list)


def draw(
    team: TeamMap,
    *,
    route_href: Callable[[Route], str] = lambda route: "",
    agent_href: Callable[[str], str] = lambda name: "",
    steps: bool = False,
) -> Drawing:
    """Lay `team` out and give every node, box and arrow its place, words and link."""
    placed = layout(team, ROOT)
    drawing = Drawing(width=round(placed.w + 2 * MARGIN, 1), height=round(placed.h + 2 * MARGIN, 1))
    routes = {route.key: route for route in team.routes}
    _flatten(placed, ROOT, (MARGIN, MARGIN), routes, drawing, route_href, agent_href, steps)
    _place_labels(drawing)
    _fit_labels(drawing)
    return drawing


def _place_labels(drawing: Drawing) -> None:
    # The busiest and worst routes first: their words get the best places.
    labels_ = _Labels()
    for node in drawing.nodes:
        labels_.block(node.x, node.y, node.w, node.h)
    for box in drawing.boxes:
        labels_.block(box.x, box.y, box.w, BOX_TITLE_H)
    for arrow in sorted(drawing.arrows, key=lambda a: (STATE_ORDER.index(a.state), -a.route.total, a.route.key)):
        x, y = labels_.place(arrow.points, arrow.text)
        arrow.label_x, arrow.label_y = round(x, 1), round(y + 4, 1)


def _fit_labels(drawing: Drawing) -> None:
    """Widen the drawing (and move it right) until every arrow's words fit inside it: none is ever clipped."""
    halves = [(arrow.label_x, label_width(arrow.text) / 2) for arrow in drawing.arrows]
    left = min((x - half for x, half in halves), default=0.0)
    right = max((x + half for x, half in halves), default=0.0)
    shift = max(0.0, MARGIN / 2 - left)
    if shift:
        for item in (*drawing.boxes, *drawing.nodes):
            item.x = round(item.x + shift, 1)
        for arrow in drawing.arrows:
            arrow.points = [(round(x + shift, 1), y) for x, y in arrow.points]
            arrow.label_x = round(arrow.label_x + shift, 1)
    drawing.width = round(max(drawing.width + shift, right + shift + MARGIN / 2), 1)


def label_width(text: str) -> float:
    return len(text) * LABEL_CHAR_W + 4


def _along(points: list[Point], share: float) -> Point:
    """The point `share` of the way along the path."""
    lengths = [math.hypot(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(points)]
    rest = sum(lengths) * share
    for (a, b), length in zip(itertools.pairwise(points), lengths, strict=True):
        if rest <= length and length:
            t = rest / length
            return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
        rest -= length
    return points[len(points) // 2]


class _Labels:
    """Where the arrows' words go: the first place along its arrow that covers no node and no other label.

    A grid of LABEL_CELL squares keeps each try to the few rectangles near it (200 labels stay cheap)."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], list[tuple[float, float, float, float]]] = defaultdict(list)

    def block(self, x: float, y: float, w: float, h: float) -> None:
        for cell in self._cells(x, y, w, h):
            self.cells[cell].append((x, y, x + w, y + h))

    def place(self, points: list[Point], text: str) -> Point:
        w, h = label_width(text), LABEL_H
        for share in LABEL_SHARES:
            cx, cy = _along(points, share)
            x, y = cx - w / 2, cy - h / 2
            if not self._taken(x, y, w, h):
                self.block(x, y, w, h)
                return cx, cy
        return _along(points, 0.5)

    def _taken(self, x: float, y: float, w: float, h: float) -> bool:
        return any(
            x < right and left < x + w and y < bottom and top < y + h
            for cell in self._cells(x, y, w, h)
            for left, top, right, bottom in self.cells.get(cell, ())
        )

    @staticmethod
    def _cells(x: float, y: float, w: float, h: float):
        for i in range(int(x // LABEL_CELL), int((x + w) // LABEL_CELL) + 1):
            for j in range(int(y // LABEL_CELL), int((y + h) // LABEL_CELL) + 1):
                yield (i, j)


def _flatten(placed, scope, origin, routes, drawing, route_href, agent_href, steps) -> None:
    ox, oy = origin
    for name, (x, y, w, h) in placed.nodes.items():
        if name in placed.inner:
            inner_scope = name if scope == ROOT else f"{scope}/{name}"
            title = f"Team {inner_scope} (graph scope {inner_scope})"
            drawing.boxes.append(DrawnBox(inner_scope, name, ox + x, oy + y, w, h, "", title))
            inner_origin = (ox + x + BOX_PAD, oy + y + BOX_TITLE_H)
            _flatten(placed.inner[name], inner_scope, inner_origin, routes, drawing, route_href, agent_href, steps)
        else:
            title = f"Agent {name}: list its handoffs"
            drawing.nodes.append(DrawnNode(scope, name, ox + x, oy + y, w, h, agent_href(name), title))
    for (sender, receiver), points in sorted(placed.paths.items()):
        route = routes.get((scope, sender, receiver))
        if route is None:
            continue
        points = [(round(ox + x, 1), round(oy + y, 1)) for x, y in points]
        text = arrow_text(route, steps=steps)
        drawing.arrows.append(DrawnArrow(route, points, 0.0, 0.0, text, arrow_title(route), route_href(route)))


def arrow_text(route: Route, *, steps: bool = False) -> str:
    """The words on an arrow, colour aside: "3 ✓ / 1 ✗", "undeclared: 2 ✗", "9: 8 ✓ / 1 ✗ · 1 undeclared", "unused".

    The handoff count comes first; "undeclared:" leads only when every handoff on the arrow is undeclared, so a
    label never reads as if all its handoffs were when one was."""
    if not route.total:
        return "unused"
    parts = [f"{n} {mark}" for n, mark in _marks(route) if n]
    text = " / ".join(parts)
    if len(parts) > 1:
        text = f"{route.total}: {text}"
    if route.undeclared == route.total:
        text = f"undeclared: {text}"
    elif route.undeclared:
        text = f"{text} · {route.undeclared} undeclared"
    return f"#{route.step} {text}" if steps and route.step else text


def _marks(route: Route) -> list[tuple[int, str]]:
    return [(route.healthy, "✓"), (route.waiting, "◔"), (route.in_progress, "…"), (route.failing, "✗")]


def arrow_title(route: Route) -> str:
    """The arrow's accessible name: the route, its handoffs by verdict, and whether a contract declares it."""
    head = f"{route.sender} → {route.receiver}"
    if route.scope != ROOT:
        head += f" (in {route.scope})"
    if not route.total:
        return f"{head}: declared, no handoff"
    parts = [f"{route.healthy} healthy"] if route.healthy else []
    parts += [f"{route.waiting} waiting on approval"] if route.waiting else []
    parts += [f"{route.in_progress} in progress"] if route.in_progress else []
    parts += [f"{n} {labels.VERDICTS.get(v, ('', v))[1].lower()}" for v, n in route.failing_verdicts]
    noun = "handoff" if route.total == 1 else "handoffs"
    text = f"{head}: {route.total} {noun}, {', '.join(parts)}"
    if route.undeclared:
        text += f"; {route.undeclared} not declared by their route version"
    return text
