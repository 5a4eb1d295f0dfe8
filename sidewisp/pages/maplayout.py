"""How the team map lays a team out: a Sugiyama layout by grandalf per scope, numbers only.

Each scope (a nested team) is laid out on its own, innermost first; its box then takes part in the layout of
the scope above it with the size its team needs. Routes both ways between two agents share one layout edge
and are drawn side by side (`sidewisp.pages.mapdrawing` places them and their words).
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout
from grandalf.routing import route_with_lines

from receipts.queries import teammap
from receipts.queries.teammap import TeamMap

NODE_H = 34
CHAR_W = 7.4  # the average width of a 13 px system-ui character: wide enough for a node's name
NODE_MIN_W = 72
NODE_PAD_X = 12
BOX_PAD = 14
BOX_TITLE_H = 22
X_SPACE = 44
Y_SPACE = 70  # room between layers for an arrow's label
Y_SPACE_MAX = 200
LABEL_ROOM = 14  # more room between two layers for each route past the third that crosses it
COMPONENT_GAP = 36
ROW_WIDTH = 1100  # separate parts of a team wrap onto the next row past this width
PARALLEL_OFFSET = 6  # how far apart the two arrows of a route taken both ways are drawn
LOOP = 22  # how far a route from an agent to itself loops out

Point = tuple[float, float]


@dataclass
class Placed:
    """One scope laid out: its size and, relative to its top-left corner, its nodes and routes' paths."""

    w: float
    h: float
    nodes: dict[str, tuple[float, float, float, float]]  # name -> x, y, w, h
    paths: dict[tuple[str, str], list[Point]]
    inner: dict[str, Placed]


class _View:
    """What grandalf reads of a vertex (its size) and writes (its centre, `xy`)."""

    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy: Point = (0.0, 0.0)


class _EdgeView:
    def setpath(self, points: list[Point]) -> None:
        self.points = points


def node_width(name: str) -> float:
    return max(NODE_MIN_W, round(len(name) * CHAR_W + 2 * NODE_PAD_X))


def layout(team: TeamMap, scope: str) -> Placed:
    """`scope` of `team` laid out, its nested teams first: each is a box of the size its own team needs."""
    inner = {teammap.box_name(child): layout(team, child) for child in team.children(scope)}
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
    return Placed(width, height, nodes, paths, inner)


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
        # Layers crossed by many routes get more room between them: their arrows' words sit on the arrows.
        per_gap = len(component.sE) / max(1, len(layout.layers) - 1)
        layout.yspace = min(Y_SPACE_MAX, Y_SPACE + LABEL_ROOM * max(0.0, per_gap - 3))
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
