"""A user's graph whose node fails with an exception that quotes its input, as a careless graph's would.

Registered in the log tests through SIDEWISP_GRAPHS as `tests/sidewisp/quoting_graph.py:make_graph`.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    messages: list


def quote_and_fail(state: State) -> State:
    msg = f"cannot route {state['messages']!r}"
    raise ValueError(msg)


def make_graph(config: dict, *, checkpointer: Any, host: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("route", quote_and_fail)
    graph.add_edge(START, "route")
    graph.add_edge("route", END)
    return graph.compile(checkpointer=checkpointer)
