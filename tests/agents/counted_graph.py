"""The demo team behind a factory that counts its calls (tests of agents.host.graphcache)."""

from __future__ import annotations

from typing import Any

from agents.demo.graph import make_graph, sidewisp_description
from agents.host.registry import HostedGraph

__all__ = ["make", "make_for_the_run", "sidewisp_description"]  # the demo's description: its limits apply
CALLS: list[dict] = []


def make(config: dict, *, checkpointer: Any, host: Any) -> HostedGraph:
    CALLS.append(config)
    return make_graph(config, checkpointer=checkpointer, host=host)


def make_for_the_run(config: dict, *, checkpointer: Any, host: Any) -> HostedGraph:
    """A factory that reads its run: its graph is that run's own."""
    CALLS.append({"operation_id": host.operation_id})
    return make_graph(config, checkpointer=checkpointer, host=host)
