"""The team map's facts: which agents a team has, which routes it declares and which it took, and how each went.

Plain Python (no Django), like the classifier: values in, values out. The routes taken come from the
handoffs, counted per (graph scope, sender, receiver, route version, verdict, in progress) by one grouped
query (`receipts.queries.routestats`); the routes declared come from the contract versions in view and, for a
hosted graph, from the graph itself (`GraphShape`, read by the agent runtime). A nested team is a scope
(spec v1.2 `graph_scope`: "parent" for the root graph, else node names joined by "/"): its box is a node of
the scope above it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

ROOT = "parent"
# The graph's own entry and exit (xray names them inside every subgraph too): never an agent.
ENDS = frozenset({"__start__", "__end__"})

HEALTHY = "healthy"
WAITING = "waiting"
IN_PROGRESS = "in_progress"
FAILING = "failing"
UNDECLARED = "undeclared"
UNUSED = "unused"
WAITING_VERDICTS = frozenset({"WAITING_ON_APPROVAL"})


@dataclass(frozen=True)
class GraphShape:
    """A hosted graph as `get_graph(xray=True)` draws it: node paths (subgraph names first) and edges."""

    nodes: tuple[tuple[str, ...], ...] = ()
    edges: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class RouteRow:
    """One group of the grouped query: how many handoffs of one route, version and verdict."""

    scope: str | None
    sender: str
    receiver: str
    route_version: str
    verdict: str
    in_progress: bool
    count: int
    first_at: datetime | None = None


@dataclass
class Route:
    """One arrow of the map: a route in one scope, with its handoffs counted by verdict."""

    scope: str
    sender: str
    receiver: str
    verdicts: dict[str, int] = field(default_factory=dict)  # settled verdict -> handoffs
    in_progress: int = 0  # handoffs whose verdict waits for a part still due (spec v1.2 "Settled")
    undeclared: int = 0  # handoffs whose route version does not declare this route
    declared: bool = False  # a contract version in view declares it, or the graph is wired for it
    first_at: datetime | None = None
    step: int = 0  # 1, 2, … in the order the routes were first taken (0: never taken)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.scope, self.sender, self.receiver)

    @property
    def total(self) -> int:
        return sum(self.verdicts.values()) + self.in_progress

    @property
    def healthy(self) -> int:
        return self.verdicts.get("HEALTHY", 0)

    @property
    def waiting(self) -> int:
        return sum(n for v, n in self.verdicts.items() if v in WAITING_VERDICTS)

    @property
    def failing_verdicts(self) -> list[tuple[str, int]]:
        """The failing verdicts and their counts, most first."""
        found = [(v, n) for v, n in self.verdicts.items() if v != "HEALTHY" and v not in WAITING_VERDICTS and n]
        return sorted(found, key=lambda item: (-item[1], item[0]))

    @property
    def failing(self) -> int:
        return sum(n for _, n in self.failing_verdicts)

    @property
    def state(self) -> str:
        """What the arrow says first: undeclared, failing, waiting, in progress, healthy, or unused."""
        if not self.total:
            return UNUSED
        if self.undeclared:
            return UNDECLARED
        if self.failing:
            return FAILING
        if self.waiting:
            return WAITING
        return IN_PROGRESS if self.in_progress else HEALTHY


@dataclass
class TeamMap:
    """The agents by scope (a nested team's box is a node of the scope above it) and the routes."""

    nodes: dict[str, list[str]]
    routes: list[Route]
    versions: tuple[str, ...] = ()

    @property
    def handoffs(self) -> int:
        return sum(route.total for route in self.routes)

    def children(self, scope: str) -> list[str]:
        """The scopes drawn as boxes directly inside `scope`."""
        return sorted(s for s in self.nodes if s != ROOT and parent_of(s) == scope)


def parent_of(scope: str) -> str:
    """The scope a nested team's box is drawn in ("team/sub" -> "team", "team" -> "parent")."""
    head, _, _ = scope.rpartition("/")
    return head or ROOT


def box_name(scope: str) -> str:
    """The node that a nested team is in the scope above it ("team/sub" -> "sub")."""
    return scope.rpartition("/")[2]


def scope_of(path: Iterable[str]) -> str:
    parts = tuple(path)
    return "/".join(parts) if parts else ROOT


def build(
    rows: Iterable[RouteRow],
    declared: Mapping[str, Iterable[tuple[str, str]]],
    shapes: Iterable[GraphShape] = (),
) -> TeamMap:
    """The map of `rows` (the routes taken), `declared` (route version -> its (sender, receiver) routes, the
    versions in view) and `shapes` (the hosted graphs in view)."""
    rows = list(rows)
    allowed = {version: set(pairs) for version, pairs in declared.items()}
    contract_pairs = set().union(*allowed.values()) if allowed else set()
    names = {name for pair in contract_pairs for name in pair} | {n for row in rows for n in (row.sender, row.receiver)}
    scoped = {row.scope for row in rows if row.scope}
    shape_nodes, shape_edges = set(), set()
    for shape in shapes:
        found_nodes, found_edges = read_shape(shape, _team_scopes(shape, scoped, names))
        shape_nodes |= found_nodes
        shape_edges |= found_edges
    nodes: dict[str, set[str]] = {ROOT: set()}
    for scope, name in shape_nodes:
        nodes.setdefault(scope, set()).add(name)
    routes = _taken(rows, allowed, nodes)
    for scope, sender, receiver in shape_edges:
        routes.setdefault((scope, sender, receiver), Route(scope, sender, receiver))
    _add_declared(routes, contract_pairs, nodes)
    for route in routes.values():
        route.declared = route.declared or (route.sender, route.receiver) in contract_pairs
        route.declared = route.declared or route.key in shape_edges
        nodes.setdefault(route.scope, set()).update((route.sender, route.receiver))
    _add_boxes(nodes)
    ordered = sorted(routes.values(), key=lambda r: r.key)
    for step, route in enumerate(sorted((r for r in ordered if r.first_at), key=lambda r: (r.first_at, r.key)), 1):
        route.step = step
    return TeamMap({s: sorted(n) for s, n in sorted(nodes.items())}, ordered, tuple(sorted(allowed)))


def _taken(rows: list[RouteRow], allowed: dict[str, set], nodes: dict[str, set[str]]) -> dict[tuple, Route]:
    # A handoff without a reduced receipt has no scope: it belongs where its sender is known, else the root.
    home = {name: scope for scope, names in sorted(nodes.items(), reverse=True) for name in names}
    home.update({row.sender: row.scope for row in sorted(rows, key=_row_order, reverse=True) if row.scope})
    routes: dict[tuple, Route] = {}
    for row in rows:
        scope = row.scope or home.get(row.sender) or home.get(row.receiver) or ROOT
        route = routes.setdefault((scope, row.sender, row.receiver), Route(scope, row.sender, row.receiver))
        if row.in_progress:
            route.in_progress += row.count
        else:
            route.verdicts[row.verdict] = route.verdicts.get(row.verdict, 0) + row.count
        if (row.sender, row.receiver) not in allowed.get(row.route_version, ()):
            route.undeclared += row.count
        if row.first_at is not None and (route.first_at is None or row.first_at < route.first_at):
            route.first_at = row.first_at
    return routes


def _row_order(row: RouteRow) -> tuple:
    return (row.scope or "", row.sender, row.receiver, row.route_version, row.verdict)


def _add_declared(routes: dict[tuple, Route], pairs: set[tuple[str, str]], nodes: dict[str, set[str]]) -> None:
    """Each declared route not taken anywhere, in the scopes that have both its agents (else its sender's,
    else its receiver's, else the root)."""
    taken = {(r.sender, r.receiver) for r in routes.values()}
    present = {scope: set(names) for scope, names in nodes.items()}
    for route in routes.values():
        present.setdefault(route.scope, set()).update((route.sender, route.receiver))
    for sender, receiver in sorted(pairs - taken):
        scopes = [s for s, names in sorted(present.items()) if sender in names and receiver in names]
        scopes = scopes or [s for s, names in sorted(present.items()) if sender in names]
        scopes = scopes or [s for s, names in sorted(present.items()) if receiver in names] or [ROOT]
        for scope in scopes:
            routes[(scope, sender, receiver)] = Route(scope, sender, receiver, declared=True)


def _add_boxes(nodes: dict[str, set[str]]) -> None:
    for scope in sorted(nodes, key=lambda s: -s.count("/")):
        if scope != ROOT:
            nodes.setdefault(parent_of(scope), set()).add(box_name(scope))


def _team_scopes(shape: GraphShape, scoped: set[str], names: set[str]) -> set[str]:
    """The scopes of `shape` that hold a team: the root, those handoffs happened in, those with a contract's
    agent, and every scope above one of them. An agent's own inner nodes (model, tools) are no team."""
    found = {ROOT, *scoped}
    for path in shape.nodes:
        for depth, part in enumerate(path):
            if part in names:
                found.add(scope_of(path[:depth]))
    for scope in list(found):
        while scope != ROOT:
            scope = parent_of(scope)
            found.add(scope)
    return found


def read_shape(shape: GraphShape, team_scopes: set[str]) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    """The (scope, agent) nodes and (scope, sender, receiver) edges `shape` draws at the level of teams.

    A node inside an agent that is no team (its model and tools) stands for that agent; a subgraph's own
    entry or exit stands for the subgraph, so the edge `a:__end__ -> b:__start__` is the route a -> b.
    """
    nodes = {placed for path in shape.nodes if (placed := _place(path, team_scopes))}
    edges = set()
    for source, target in shape.edges:
        a, b = _place(source, team_scopes), _place(target, team_scopes)
        if a and b and a != b and a[0] == b[0]:
            edges.add((a[0], a[1], b[1]))
    return nodes, edges


def _place(path: tuple[str, ...], team_scopes: set[str]) -> tuple[str, str] | None:
    parts = list(path)
    while parts and parts[-1] in ENDS:
        parts.pop()
    if not parts or any(part in ENDS for part in parts):
        return None
    for depth, part in enumerate(parts):
        inner = scope_of(parts[: depth + 1])
        if depth == len(parts) - 1 or inner not in team_scopes:
            return (scope_of(parts[:depth]), part)
    return None
