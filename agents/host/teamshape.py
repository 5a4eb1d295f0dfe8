"""A hosted graph's wiring for the team map: its nodes and edges as `get_graph(xray=True)` draws them.

The graph is built once per process for each (SIDEWISP_GRAPHS, graph, scenario) as the worker would read
it (`Host(reading=True)`: no checkpointer, nothing created): its wiring is a fact of the code, not of a run.
"""

from __future__ import annotations

import logging

from agents.host import registry
from receipts.queries.teammap import GraphShape

logger = logging.getLogger(__name__)

# (SIDEWISP_GRAPHS, graph, scenario) -> its shape, or None when it could not be read.
_SHAPES: dict[tuple[str, str, str], GraphShape | None] = {}


def shape_of(graph: str, scenario: str = "") -> GraphShape | None:
    """The wiring of the registered `graph` (built for `scenario`), or None for a graph this process does
    not host or whose factory cannot be built for reading."""
    if graph not in registry.graphs():
        return None
    key = (registry.setting_key(), graph, scenario)
    if key not in _SHAPES:
        _SHAPES[key] = _read(graph, scenario)
    return _SHAPES[key]


def _read(graph: str, scenario: str) -> GraphShape | None:
    config = {"configurable": {"scenario": scenario}} if scenario else {}
    try:
        hosted = registry.entry(graph).build(config, checkpointer=None, host=registry.Host(reading=True))
        drawn = hosted.graph.get_graph(xray=True)
    except Exception as exc:  # noqa: BLE001 - a user's factory may raise anything; the map then goes without
        logger.warning("team map: graph %s could not be read for its wiring (%s)", graph, type(exc).__name__)
        return None
    nodes = tuple(sorted(tuple(node_id.split(":")) for node_id in drawn.nodes))
    edges = tuple(sorted((tuple(e.source.split(":")), tuple(e.target.split(":"))) for e in drawn.edges))
    return GraphShape(nodes=nodes, edges=edges)


def hosted() -> set[str]:
    """The graphs this process hosts (whose wiring `shape_of` can read)."""
    return set(registry.graphs())
