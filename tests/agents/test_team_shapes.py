"""Every team shape (spec v1.2): nested and hierarchical teams, `Send` fan-out, a `Command` to END and
agents without Sidewisp's middleware, each healthy and with one fault, through `observe` and `aobserve`.

The teams are built in `tests/agents/shapes.py` with the real langgraph-supervisor and langgraph-swarm.
A handoff is named here by (sender, receiver) and where it happened (`reduced.graph_scope`), never by its
id: a fan-out makes two handoffs with the same sender and tool-call id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from receipts.models import ContractVersion, Handoff, Run
from tests.agents import shapes
from tests.agents.test_third_party import FAIL, PASS, ask, config_for, run_of, verdicts

H, RR, OTP, DNS, FC = "HEALTHY", "ROUTE_REJECTED", "OPEN_TOOL_PROTOCOL", "DESTINATION_NOT_STARTED", "FALSE_COMPLETE"


@pytest.fixture
def shape_contracts(transactional_db, contracts):
    ContractVersion.objects.create(version=shapes.ROUTE_VERSION, routes=shapes.ROUTES)


@dataclass(frozen=True)
class Shape:
    """A team shape: its builder, the handoffs of a healthy run, and what `observe` needs besides."""

    build: Callable[..., Any]
    handoffs: tuple[tuple[str, str, str], ...]  # (sender, receiver, graph_scope)
    keywords: Mapping[str, Any] = field(default_factory=dict)

    def graph(self, **options: Any) -> Any:
        return self.build(InMemorySaver(), **options)


HIERARCHICAL = Shape(
    shapes.hierarchical,
    (
        ("top_supervisor", "research_team", "parent"),
        ("research_supervisor", "researcher", "research_team"),
        ("top_supervisor", "writing_team", "parent"),
        ("writing_supervisor", "writer", "writing_team"),
    ),
)
SWARM_IN_APP = Shape(shapes.swarm_in_app, (("alice", "bob", "desk"),))
NESTED_AGENTS = Shape(shapes.nested_agents, (("front", "back", "dept/team"),))
FAN_OUT = Shape(shapes.fan_out, (("dispatcher", "worker", "parent"), ("dispatcher", "worker", "parent")))
FORWARDING = Shape(shapes.forwarding_supervisor, (("supervisor", "w1", "parent"),))
# No SidewispMiddleware in the graph: the route version of its transfers is given to observe.
REACT_SWARM = Shape(shapes.react_swarm, (("alice", "bob", "parent"),), {"route_version": shapes.ROUTE_VERSION})

HEALTHY_SHAPES = [
    pytest.param(HIERARCHICAL, {}, id="hierarchical"),
    pytest.param(SWARM_IN_APP, {}, id="swarm_in_app"),
    pytest.param(NESTED_AGENTS, {}, id="nested_agents"),
    pytest.param(FAN_OUT, {"carry": "payload"}, id="fan_out_payload"),
    pytest.param(FAN_OUT, {"carry": "update"}, id="fan_out_update"),
    pytest.param(FORWARDING, {}, id="forward_message"),
    pytest.param(REACT_SWARM, {}, id="react_swarm"),
]
# The shapes a fault applies to, and the (sender, receiver, verdict) each then gets, sorted.
UNDECLARED = [
    pytest.param(
        HIERARCHICAL,
        [
            ("research_supervisor", "analyst", RR),
            ("top_supervisor", "research_team", H),
            ("top_supervisor", "writing_team", H),
            ("writing_supervisor", "writer", H),
        ],
        id="hierarchical",
    ),
    pytest.param(SWARM_IN_APP, [("alice", "carol", RR)], id="swarm_in_app"),
    pytest.param(NESTED_AGENTS, [("front", "carol", RR)], id="nested_agents"),
    pytest.param(FAN_OUT, [("dispatcher", "auditor", RR), ("dispatcher", "worker", H)], id="fan_out"),
    pytest.param(REACT_SWARM, [("alice", "carol", RR)], id="react_swarm"),
]
NO_TOOL_MESSAGE = [
    pytest.param(
        HIERARCHICAL,
        [
            ("research_supervisor", "researcher", OTP),
            ("top_supervisor", "research_team", H),
            ("top_supervisor", "writing_team", H),
            ("writing_supervisor", "writer", H),
        ],
        id="hierarchical",
    ),
    pytest.param(SWARM_IN_APP, [("alice", "bob", OTP)], id="swarm_in_app"),
    pytest.param(NESTED_AGENTS, [("front", "back", OTP)], id="nested_agents"),
    pytest.param(FAN_OUT, [("dispatcher", "worker", OTP), ("dispatcher", "worker", OTP)], id="fan_out"),
    pytest.param(REACT_SWARM, [("alice", "bob", OTP)], id="react_swarm"),
]
HELD = [
    pytest.param(
        HIERARCHICAL,
        [("research_supervisor", "researcher", DNS), ("top_supervisor", "research_team", H)],
        id="hierarchical",
    ),
    pytest.param(SWARM_IN_APP, [("alice", "bob", DNS)], id="swarm_in_app"),
    pytest.param(NESTED_AGENTS, [("front", "back", DNS)], id="nested_agents"),
    pytest.param(FAN_OUT, [("dispatcher", "worker", DNS), ("dispatcher", "worker", DNS)], id="fan_out"),
    pytest.param(REACT_SWARM, [("alice", "bob", DNS)], id="react_swarm"),
]


def handoffs_of(config: dict) -> list[Handoff]:
    operation_id = config["configurable"]["operation_id"]
    return list(Handoff.objects.filter(run__operation_id=operation_id).order_by("created_at", "pk"))


def routes(config: dict) -> list[tuple[str, str, str]]:
    """(sender, receiver, verdict) of each handoff of the run, sorted."""
    return sorted((h.sender, h.receiver, h.verdict) for h in handoffs_of(config))


def scopes(config: dict) -> list[tuple[str, str, str | None]]:
    """(sender, receiver, graph_scope) of each handoff of the run, sorted."""
    return sorted((h.sender, h.receiver, (h.reduced_part or {}).get("graph_scope")) for h in handoffs_of(config))


def projection(values: Mapping[str, Any]) -> tuple[list[tuple], dict[str, Any]]:
    """What a final state says, without the ids that differ between two runs."""
    messages = [
        (type(m).__name__, m.content, m.name, [c["name"] for c in getattr(m, "tool_calls", None) or ()])
        for m in values.get("messages") or ()
    ]
    return messages, {key: value for key, value in values.items() if key != "messages"}


# --- healthy teams ------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "options"), HEALTHY_SHAPES)
def test_a_healthy_team_of_any_shape_is_healthy_at_the_level_of_each_handoff(shape_contracts, drive, shape, options):
    config = config_for("healthy")

    outcome = drive(shape.graph(**options), ask(), config, verifier=PASS, **shape.keywords)

    assert outcome.status == "complete"
    assert routes(config) == sorted((sender, receiver, H) for sender, receiver, _ in shape.handoffs)
    assert scopes(config) == sorted(shape.handoffs)
    assert run_of(config).status == Run.Status.COMPLETE


@pytest.mark.parametrize(("shape", "options"), HEALTHY_SHAPES)
def test_an_observed_team_of_any_shape_ends_as_it_would_unobserved(shape_contracts, drive, shape, options):
    observed_config, plain_config = config_for("alike"), {"configurable": {"thread_id": "plain"}, "recursion_limit": 50}
    observed_graph, plain_graph = shape.graph(**options), shape.graph(**options)

    drive(observed_graph, ask(), observed_config, verifier=PASS, **shape.keywords)
    plain_graph.invoke(ask(), plain_config)

    observed_state = observed_graph.get_state(observed_config)
    plain_state = plain_graph.get_state(plain_config)
    assert projection(observed_state.values) == projection(plain_state.values)
    assert observed_state.next == plain_state.next == ()


# --- one fault each -------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "expected"), UNDECLARED)
def test_a_transfer_on_an_undeclared_route_is_route_rejected_at_any_depth(shape_contracts, drive, shape, expected):
    config = config_for("undeclared")

    drive(shape.graph(fault="undeclared"), ask(), config, verifier=PASS, **shape.keywords)

    assert routes(config) == expected


@pytest.mark.parametrize(("shape", "expected"), NO_TOOL_MESSAGE)
def test_a_transfer_without_its_tool_message_is_an_open_tool_protocol_at_any_depth(
    shape_contracts, drive, shape, expected
):
    config = config_for("quiet")

    drive(shape.graph(fault="no_tool_message"), ask(), config, verifier=PASS, **shape.keywords)

    assert routes(config) == expected


@pytest.mark.parametrize(("shape", "expected"), HELD)
def test_a_destination_held_before_it_starts_has_not_started_at_any_depth(shape_contracts, drive, shape, expected):
    config = config_for("held")

    outcome = drive(shape.graph(fault="held"), ask(), config, verifier=PASS, **shape.keywords)

    assert outcome.status == "parked"
    assert routes(config) == expected


@pytest.mark.parametrize(("shape", "options"), HEALTHY_SHAPES)
def test_a_completion_whose_verifier_fails_is_false_complete_on_the_runs_latest_handoff(
    shape_contracts, drive, shape, options
):
    config = config_for("false")

    drive(shape.graph(**options), ask(), config, verifier=FAIL, **shape.keywords)

    found = verdicts(config)
    assert len(found) == len(shape.handoffs)
    assert found[-1] == FC
    # The outcome belongs to the latest handoff; a fan-out's sibling may share it, nothing else fails.
    assert set(found[:-1]) <= ({H, FC} if shape is FAN_OUT else {H})


# --- shape by shape ---------------------------------------------------------------------------


def test_a_worker_returning_to_its_supervisor_is_no_handoff_at_either_level(shape_contracts, drive):
    config = config_for("returns")

    drive(HIERARCHICAL.graph(), ask(), config, verifier=PASS)

    senders = {h.sender for h in handoffs_of(config)}
    assert senders == {"top_supervisor", "research_supervisor", "writing_supervisor"}


@pytest.mark.parametrize("carry", ["payload", "update"])
def test_each_destination_of_a_fan_out_is_a_handoff_of_its_own(shape_contracts, drive, carry):
    config = config_for(f"fan-{carry}")

    drive(shapes.fan_out(InMemorySaver(), carry=carry), ask(), config, verifier=PASS)

    first, second = handoffs_of(config)
    call_id = first.created_part["tool_call_id"]
    assert second.created_part["tool_call_id"] == call_id
    for handoff in (first, second):
        assert handoff.reduced_part["goto"] == "worker"
        assert handoff.reduced_part["tool_message_ids"].count(call_id) == 1
        assert handoff.destination_part["node_id"] == "worker"
    assert first.destination_part["attempt_id"] != second.destination_part["attempt_id"]


def test_a_fan_out_whose_update_the_tool_node_drops_leaves_its_tool_protocol_open(shape_contracts, drive):
    config = config_for("fan-dropped")
    graph = shapes.fan_out(InMemorySaver(), carry="update_list")

    drive(graph, ask(), config, verifier=PASS)

    # The ToolNode rebuilt the Command without its update: the ToolMessage never reached the graph.
    messages = graph.get_state(config).values["messages"]
    assert not any(isinstance(m, ToolMessage) for m in messages)
    assert routes(config) == [("dispatcher", "worker", OTP), ("dispatcher", "worker", OTP)]


def test_forwarding_a_workers_answer_to_the_end_is_no_handoff_and_the_run_is_healthy(shape_contracts, drive):
    config = config_for("forward")
    graph = FORWARDING.graph()

    outcome = drive(graph, ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert routes(config) == [("supervisor", "w1", H)]
    assert not Handoff.objects.filter(run=run_of(config), receiver="__end__").exists()
    last = graph.get_state(config).values["messages"][-1]
    assert (type(last), last.name, last.content) == (AIMessage, "supervisor", "w1 done")
    assert handoffs_of(config)[-1].verification_part["result"] == "pass"


def test_transfers_of_agents_without_any_sidewisp_code_are_recorded_from_the_graph(shape_contracts, drive):
    config = config_for("react")

    drive(REACT_SWARM.graph(), ask(), config, verifier=PASS, **REACT_SWARM.keywords)

    (handoff,) = handoffs_of(config)
    assert (handoff.sender, handoff.receiver, handoff.route_version) == ("alice", "bob", shapes.ROUTE_VERSION)
    assert handoff.created_part["tool_call_id"] == handoff.reduced_part["tool_message_ids"][0]
    assert (handoff.reduced_part["active_agent_after"], handoff.destination_part["node_id"]) == ("bob", "bob")
    assert handoff.verdict == H


def test_context_is_read_in_the_graph_that_applies_the_transfer(shape_contracts, drive):
    config = config_for("context")

    drive(NESTED_AGENTS.graph(), ask(), config, verifier=PASS)

    # `case_id` exists only in the team's state, two levels below the root (the route requires it).
    (handoff,) = handoffs_of(config)
    assert "case_id" in handoff.reduced_part["context_keys"]
    assert handoff.verdict == H
