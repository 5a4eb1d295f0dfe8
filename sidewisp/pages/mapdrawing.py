"""Where the team map draws each agent, box and arrow, and the words on them: coordinates, words and links.

The layout is `sidewisp.pages.maplayout`'s; this module turns it into nodes, boxes and arrows on one canvas,
places each arrow's words where they cover nothing else, and words each arrow and its accessible name. The SVG
itself is a template (`teammap/_map.html`): this module gives it coordinates, words and links, never markup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from receipts.queries import teammap
from receipts.queries.teammap import ROOT, Route, TeamMap
from sidewisp.pages import labels, maplabels
from sidewisp.pages.maplabels import LABEL_H, label_width
from sidewisp.pages.maplayout import BOX_PAD, BOX_TITLE_H, Point, layout

MARGIN = 12

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
    label_x: float  # the centre of its words
    label_y: float
    text: str
    title: str
    href: str = ""
    verdicts: str = ""  # its handoffs by verdict, for the table: "9: 8 ✓ / 1 ✗ · 1 undeclared"
    label_w: float = 0.0
    leader: tuple[Point, Point] | None = None  # from its words to the arrow, when they had to sit beside it

    @property
    def baseline(self) -> float:
        return round(self.label_y + 4, 1)

    @property
    def name(self) -> str:
        """The accessible name: the words shown on the arrow first, then the route and its handoffs by verdict."""
        return f"{self.text}; {self.title}"

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
    """Every arrow's words where they cover no agent, no team's title and no other arrow's words
    (`sidewisp.pages.maplabels`); the busiest and worst routes first, so their words sit on their arrows."""
    obstacles = [(node.x, node.y, node.w, node.h) for node in drawing.nodes]
    obstacles += [(box.x, box.y, box.w, BOX_TITLE_H) for box in drawing.boxes]
    arrows = sorted(drawing.arrows, key=lambda a: (STATE_ORDER.index(a.state), -a.route.total, a.route.key))
    wanted = [maplabels.Label(tuple(a.points), label_width(a.text)) for a in arrows]
    for arrow, label, (x, y) in zip(arrows, wanted, maplabels.place(obstacles, wanted), strict=True):
        arrow.label_x, arrow.label_y, arrow.label_w = x, y, label.w
        arrow.leader = maplabels.leader((x, y), (label.w, label.h), arrow.points)


def _fit_labels(drawing: Drawing) -> None:
    """Grow the drawing (and move it right and down) until every arrow's words fit inside it: none is clipped."""
    rects = [(a.label_x - a.label_w / 2, a.label_y - LABEL_H / 2, a.label_w, LABEL_H) for a in drawing.arrows]
    left = min((x for x, _, _, _ in rects), default=0.0)
    top = min((y for _, y, _, _ in rects), default=0.0)
    right = max((x + w for x, _, w, _ in rects), default=0.0)
    bottom = max((y + h for _, y, _, h in rects), default=0.0)
    dx, dy = max(0.0, MARGIN / 2 - left), max(0.0, MARGIN / 2 - top)
    for item in (*drawing.boxes, *drawing.nodes):
        item.x, item.y = round(item.x + dx, 1), round(item.y + dy, 1)
    for arrow in drawing.arrows:
        arrow.points = [(round(x + dx, 1), round(y + dy, 1)) for x, y in arrow.points]
        arrow.label_x, arrow.label_y = round(arrow.label_x + dx, 1), round(arrow.label_y + dy, 1)
        if arrow.leader:
            arrow.leader = tuple((round(x + dx, 1), round(y + dy, 1)) for x, y in arrow.leader)
    drawing.width = round(max(drawing.width + dx, right + dx + MARGIN / 2), 1)
    drawing.height = round(max(drawing.height + dy, bottom + dy + MARGIN / 2), 1)


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
        arrow = DrawnArrow(route, points, 0.0, 0.0, text, arrow_title(route), route_href(route), verdict_text(route))
        drawing.arrows.append(arrow)


def arrow_text(route: Route, *, steps: bool = False) -> str:
    """The words on an arrow, colour aside: its handoffs in view and the share of them that failed, as in
    "4 · 25% failed", "undeclared: 2 · 100% failed", "9 · 11% failed · 1 undeclared", "#2 1 · 0% failed", "unused".

    The handoff count comes first; "undeclared:" leads only when every handoff on the arrow is undeclared, so a
    label never reads as if all its handoffs were when one was."""
    if not route.total:
        return "unused"
    text = f"{route.total} · {failure_rate(route.failing, route.total)} failed"
    if route.undeclared == route.total:
        text = f"undeclared: {text}"
    elif route.undeclared:
        text = f"{text} · {route.undeclared} undeclared"
    return f"#{route.step} {text}" if steps and route.step else text


def failure_rate(failing: int, total: int) -> str:
    """The share that failed as a whole percentage, never rounded to 0% or 100% when it is not."""
    if not total:
        return "0%"
    share = round(100 * failing / total)
    if failing and not share:
        return "<1%"
    if failing < total and share == 100:
        return ">99%"
    return f"{share}%"


def verdict_text(route: Route) -> str:
    """The handoffs by verdict, for the table of routes: "3 ✓ / 1 ✗", "9: 8 ✓ / 1 ✗ · 1 undeclared", "unused"."""
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
    return text


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
