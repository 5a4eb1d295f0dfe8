"""Where the team map draws each agent, box and arrow: a Sugiyama layout by grandalf, numbers only.

Each scope (a nested team) is laid out on its own, innermost first; its box then takes part in the layout of
the scope above it with the size its team needs. Routes both ways between two agents share one layout edge
and are drawn side by side. The SVG itself is a template (`teammap/_map.html`): this module gives it
coordinates, words and links, never markup.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout
from grandalf.routing import route_with_lines

from receipts.queries import teammap
from receipts.queries.teammap import ROOT, Route, TeamMap
from sidewisp.pages import labels

NODE_H = 34
CHAR_W = 7.4  # the average width of a 13 px system-ui character: wide enough for a node's name
NODE_MIN_W = 72
NODE_PAD_X = 12
BOX_PAD = 14
BOX_TITLE_H = 22
X_SPACE = 44
Y_SPACE = 70  # room between layers for an arrow's label
COMPONENT_GAP = 36
ROW_WIDTH = 1100  # separate parts of a team wrap onto the next row past this width
MARGIN = 12
PARALLEL_OFFSET = 6  # how far apart the two arrows of a route taken both ways are drawn
LOOP = 22  # how far a route from an agent to itself loops out
LABEL_CHAR_W = 6.6  # a 12 px label's average character
LABEL_H = 15
LABEL_CELL = 60
LABEL_SHARES = (0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85)  # where along its arrow a label may go, best first

Point = tuple[float, float]

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


@dataclass
class _Placed:
    """One scope laid out: its size and, relative to its top-left corner, its nodes and routes' paths."""

    w: float
    h: float
    nodes: dict[str, tuple[float, float, float, float]]  # name -> x, y, w, h
    paths: dict[tuple[str, str], list[Point]]
    inner: dict[str, _Placed]


class _View:
    """What grandalf reads of a vertex (its size) and writes (its centre, `xy`)."""

    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy: Point = (0.0, 0.0)


class _EdgeView:
    def setpath(self, points: list[Point]) -> None:
        self.points = points


def draw(
    team: TeamMap,
    *,
    route_href: Callable[[Route], str] = lambda route: "",
    agent_href: Callable[[str], str] = lambda name: "",
    steps: bool = False,
) -> Drawing:
    """Lay `team` out and give every node, box and arrow its place, words and link."""
    placed = _layout(team, ROOT)
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


def node_width(name: str) -> float:
    return max(NODE_MIN_W, round(len(name) * CHAR_W + 2 * NODE_PAD_X))


def _layout(team: TeamMap, scope: str) -> _Placed:
    inner = {teammap.box_name(child): _layout(team, child) for child in team.children(scope)}
    sizes = {name: (node_width(name), NODE_H) for name in team.nodes.get(scope, [])}
    for name, box in inner.items():
        sizes[name] = (max(box.w + 2 * BOX_PAD, node_width(name) + 2 * BOX_PAD), box.h + BOX_TITLE_H + BOX_PAD)
    pairs = sorted({(r.sender, r.receiver) for r in team.routes if r.scope == scope})
    nodes, paths = _sugiyama(sizes, pairs)
    width = max((x + w for x, _, w, _ in nodes.values()), default=0.0)
    height = max((y + h for _, y, _, h in nodes.values()), default=0.0)
    for points in paths.values():
        width = max(width, *(x for x, _ in points))
        height = max(height, *(y for _, y in points))
    return _Placed(width, height, nodes, paths, inner)


def _sugiyama(sizes: dict[str, tuple[float, float]], pairs: list[tuple[str, str]]) -> tuple[dict, dict]:
    """Node boxes (top-left, size) and one path per directed pair, components side by side in rows."""
    order = _flow_order(sorted(sizes), pairs)
    rank = {name: i for i, name in enumerate(order)}
    vertices = {name: Vertex(name) for name in order}
    for name, vertex in vertices.items():
        vertex.view = _View(*sizes[name])
    # One layout edge per pair of agents, pointing the way the team mostly flows (no cycles to invert).
    undirected = sorted({tuple(sorted((a, b), key=rank.__getitem__)) for a, b in pairs if a != b})
    edges = {pair: Edge(vertices[pair[0]], vertices[pair[1]]) for pair in undirected}
    for edge in edges.values():
        edge.view = _EdgeView()
    graph = Graph(list(vertices.values()), list(edges.values()))
    nodes: dict[str, tuple[float, float, float, float]] = {}
    shifted: dict[tuple[str, str], list[Point]] = {}
    cursor_x = cursor_y = row_h = 0.0
    for component in graph.C:
        local_nodes, local_paths, (w, h) = _component(component, edges)
        if cursor_x and cursor_x + w > ROW_WIDTH:
            cursor_x, cursor_y, row_h = 0.0, cursor_y + row_h + COMPONENT_GAP, 0.0
        for name, (x, y, nw, nh) in local_nodes.items():
            nodes[name] = (x + cursor_x, y + cursor_y, nw, nh)
        for pair, points in local_paths.items():
            shifted[pair] = [(x + cursor_x, y + cursor_y) for x, y in points]
        cursor_x += w + COMPONENT_GAP
        row_h = max(row_h, h)
    return nodes, _directed_paths(pairs, shifted, nodes)


def _component(component, edges: dict) -> tuple[dict, dict, tuple[float, float]]:
    vertices = list(component.sV)
    if len(vertices) > 1:
        layout = SugiyamaLayout(component)
        layout.xspace, layout.yspace = X_SPACE, Y_SPACE
        layout.route_edge = route_with_lines
        layout.init_all(roots=[v for v in vertices if not v.e_in()], optimize=True)
        layout.draw()
    boxes = {v.data: (v.view.xy[0] - v.view.w / 2, v.view.xy[1] - v.view.h / 2, v.view.w, v.view.h) for v in vertices}
    paths = {pair: list(edge.view.points) for pair, edge in edges.items() if hasattr(edge.view, "points")}
    paths = {pair: points for pair, points in paths.items() if pair[0] in boxes}
    xs = [x for x, _, _, _ in boxes.values()] + [x for pts in paths.values() for x, _ in pts]
    ys = [y for _, y, _, _ in boxes.values()] + [y for pts in paths.values() for _, y in pts]
    left, top = min(xs), min(ys)
    right = max([x + w for x, _, w, _ in boxes.values()] + xs)
    bottom = max([y + h for _, y, _, h in boxes.values()] + ys)
    boxes = {name: (x - left, y - top, w, h) for name, (x, y, w, h) in boxes.items()}
    paths = {pair: [(x - left, y - top) for x, y in pts] for pair, pts in paths.items()}
    return boxes, paths, (right - left, bottom - top)


def _flow_order(names: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """The agents in the order the team's routes reach them (breadth first), from those that hand off the most."""
    following: dict[str, list[str]] = defaultdict(list)
    balance: dict[str, int] = defaultdict(int)  # routes in minus routes out: the entry agents have the least
    for sender, receiver in pairs:
        if sender != receiver:
            following[sender].append(receiver)
            balance[receiver] += 1
            balance[sender] -= 1
    starts = sorted(names, key=lambda name: (balance[name], name))
    order: list[str] = []
    seen: set[str] = set()
    for start in starts:
        if start in seen:
            continue
        queue = deque([start])
        seen.add(start)
        while queue:
            name = queue.popleft()
            order.append(name)
            for nxt in sorted(following[name]):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
    return order


def _directed_paths(pairs: list[tuple[str, str]], paths: dict, nodes: dict) -> dict[tuple[str, str], list[Point]]:
    both_ways = {(a, b) for a, b in pairs if (b, a) in pairs and a != b}
    directed: dict[tuple[str, str], list[Point]] = {}
    for sender, receiver in pairs:
        if sender == receiver:
            directed[(sender, receiver)] = _loop(nodes[sender])
            continue
        points = paths.get((sender, receiver)) or list(reversed(paths.get((receiver, sender), [])))
        if not points:
            continue
        offset = PARALLEL_OFFSET if (sender, receiver) in both_ways else 0.0
        directed[(sender, receiver)] = _offset(points, offset)
    return directed


def _loop(box: tuple[float, float, float, float]) -> list[Point]:
    x, y, w, h = box
    right, middle = x + w, y + h / 2
    return [(right, middle - 8), (right + LOOP, middle - 8), (right + LOOP, middle + 8), (right, middle + 8)]


def _offset(points: list[Point], distance: float) -> list[Point]:
    """`points` moved `distance` to the right of their overall direction (the other way's arrow goes left)."""
    if not distance:
        return points
    (x0, y0), (x1, y1) = points[0], points[-1]
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    dx, dy = -(y1 - y0) / length * distance, (x1 - x0) / length * distance
    return [(x + dx, y + dy) for x, y in points]


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
