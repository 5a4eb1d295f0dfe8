"""Single-agent steps (spec v1.2): each change of the step variable is a handoff proven by the next model call.

The team is the LangChain docs' customer-support handoffs tutorial (tests/agents/steps_team.py), run through
`observe` and `aobserve` with only SidewispMiddleware added.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import steps
from sidewisp_agent.middleware import SidewispMiddleware

from agents.observe import database, writer
from receipts.ingest.contracts import import_document
from receipts.models import ContractVersion, Handoff, MiddlewareReport
from tests.agents import steps_team
from tests.agents.stored import aobserve, observe

PASS = lambda op: ("issue_resolved", "pass", "v-1")  # noqa: E731


@pytest.fixture
def step_contracts(transactional_db):
    import_document(steps_team.contracts_document())


@pytest.fixture(params=["sync", "async"])
def mode(request) -> str:
    return request.param


def drive(mode: str, graph, graph_input, config, **kwargs):
    """observe, or aobserve driven by asyncio.run: the same cases both ways."""
    if mode == "sync":
        return observe(graph, graph_input, config, **kwargs)
    return asyncio.run(aobserve(graph, graph_input, config, **kwargs))


def config_for(name: str) -> dict:
    token = uuid.uuid4().hex[:8]
    return {"configurable": {"thread_id": f"th-{name}-{token}", "operation_id": f"op-{name}-{token}"}}


def handoffs(config: dict) -> list[Handoff]:
    operation_id = config["configurable"]["operation_id"]
    return list(Handoff.objects.filter(run__operation_id=operation_id).order_by("created_at", "pk"))


def transcript(values: dict) -> list[tuple]:
    return [(type(m).__name__, m.content, m.name) for m in values["messages"]] + [values.get("current_step")]


# --- healthy steps ------------------------------------------------------------------------


def test_each_step_change_of_a_healthy_support_agent_is_a_healthy_handoff(step_contracts, mode):
    config = config_for("steps")

    outcome = drive(
        mode,
        steps_team.support_agent(InMemorySaver(), asynchronous=mode == "async"),
        steps_team.ask(),
        config,
        verifier=PASS,
    )

    assert outcome.status == "complete"
    found = handoffs(config)
    assert [(h.sender, h.receiver, h.verdict) for h in found] == [
        ("warranty_collector", "issue_classifier", "HEALTHY"),
        ("issue_classifier", "resolution_specialist", "HEALTHY"),
    ]
    assert found[1].destination_part["tools"] == ["escalate_to_human", "provide_solution"]
    assert found[1].reduced_part["graph_scope"] == "parent"
    assert not MiddlewareReport.objects.filter(kind=MiddlewareReport.Kind.NO_HANDOFF).exists()


def test_a_step_handoff_records_names_and_ids_only(step_contracts):
    config = config_for("names")

    observe(steps_team.support_agent(InMemorySaver()), steps_team.ask(), config, verifier=PASS)

    first = handoffs(config)[0]
    assert first.created_part["required_context_keys"] == ["warranty_status"]
    assert first.created_part["tool_call_id"] in first.reduced_part["tool_message_ids"]
    assert first.reduced_part["context_keys"] == ["current_step", "warranty_status"]
    assert first.destination_part["node_id"] == "issue_classifier"
    stored = repr([first.created_part, first.reduced_part, first.destination_part])
    assert "in_warranty" not in stored and "My phone" not in stored


def test_the_observed_support_agent_ends_as_it_would_unobserved(step_contracts, mode):
    asynchronous = mode == "async"
    observed_graph = steps_team.support_agent(InMemorySaver(), asynchronous=asynchronous)
    plain = steps_team.support_agent(InMemorySaver(), asynchronous=asynchronous, observed=False)
    config = config_for("same")
    plain_config = {"configurable": {"thread_id": "plain"}}

    drive(mode, observed_graph, steps_team.ask(), config, verifier=PASS)
    if asynchronous:
        expected = asyncio.run(plain.ainvoke(steps_team.ask(), plain_config))
    else:
        expected = plain.invoke(steps_team.ask(), plain_config)

    assert transcript(observed_graph.get_state(config).values) == transcript(expected)
    assert expected["current_step"] == "resolution_specialist"


def test_a_step_team_one_node_down_names_the_graph_its_steps_changed_in(step_contracts, mode):
    config = config_for("desk")

    drive(
        mode,
        steps_team.help_desk(InMemorySaver(), asynchronous=mode == "async"),
        steps_team.ask(),
        config,
        verifier=PASS,
    )

    found = handoffs(config)
    assert [h.verdict for h in found] == ["HEALTHY", "HEALTHY"]
    assert {h.reduced_part["graph_scope"] for h in found} == {"desk"}


def test_an_explicit_step_key_records_steps_where_the_contracts_name_none(transactional_db, mode):
    import_document({**steps_team.contracts_document(), "steps": {}})
    middleware = SidewispMiddleware(
        route_version=steps_team.ROUTE_VERSION, step_key="current_step", first_step="warranty_collector"
    )
    config = config_for("explicit")

    drive(
        mode,
        steps_team.support_agent(InMemorySaver(), asynchronous=mode == "async", sidewisp=middleware),
        steps_team.ask(),
        config,
        verifier=PASS,
    )

    assert [h.verdict for h in handoffs(config)] == ["HEALTHY", "HEALTHY"]


# --- faults ---------------------------------------------------------------------------------


def test_a_step_whose_model_call_did_not_get_the_declared_tools_did_not_start(step_contracts, mode):
    config = config_for("short")
    graph = steps_team.support_agent(InMemorySaver(), asynchronous=mode == "async", short_tools=True)

    drive(mode, graph, steps_team.ask(), config, verifier=PASS)

    found = handoffs(config)
    assert [h.verdict for h in found] == ["HEALTHY", "DESTINATION_NOT_STARTED"]
    assert found[1].destination_part["tools"] == ["provide_solution"]
    assert found[1].reason == "destination.tools does not equal the tools the contract declares for the step"


def test_a_step_change_the_contract_does_not_route_is_rejected(step_contracts, mode):
    config = config_for("skip")
    graph = steps_team.support_agent(InMemorySaver(), asynchronous=mode == "async", skip=True)

    drive(mode, graph, steps_team.ask(), config, verifier=PASS)

    found = handoffs(config)
    assert [(h.sender, h.receiver, h.verdict) for h in found] == [
        ("warranty_collector", "resolution_specialist", "ROUTE_REJECTED")
    ]


def test_without_a_first_step_the_first_change_has_no_proven_sender(step_contracts):
    middleware = SidewispMiddleware(route_version=steps_team.ROUTE_VERSION)
    config = config_for("nofirst")

    observe(steps_team.support_agent(InMemorySaver(), sidewisp=middleware), steps_team.ask(), config, verifier=PASS)

    first = handoffs(config)[0]
    assert (first.sender, first.verdict) == ("", "ROUTE_REJECTED")
    assert first.reason == "created.sender is missing"


def test_the_tutorial_without_first_step_is_healthy_when_the_contract_names_the_first_step(transactional_db, mode):
    # The docs' tutorial defaults current_step in its own middleware; the contract says so (spec v1.3 `first`).
    document = steps_team.contracts_document()
    document["steps"][steps_team.ROUTE_VERSION] = {**steps_team.STEPS, "first": steps_team.FIRST_STEP}
    import_document(document)
    middleware = SidewispMiddleware(route_version=steps_team.ROUTE_VERSION)
    config = config_for("first")
    agent = steps_team.support_agent(InMemorySaver(), asynchronous=mode == "async", sidewisp=middleware)

    outcome = drive(mode, agent, steps_team.ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert [(h.sender, h.receiver, h.verdict) for h in handoffs(config)] == [
        ("warranty_collector", "issue_classifier", "HEALTHY"),
        ("issue_classifier", "resolution_specialist", "HEALTHY"),
    ]
    first = handoffs(config)[0]
    assert first.created_part["turn_tool_call_ids"] == [first.created_part["tool_call_id"]]


def test_a_route_version_without_steps_records_no_step_handoff(transactional_db):
    ContractVersion.objects.create(version="plain/1", routes={})
    config = config_for("nosteps")

    observe(
        steps_team.support_agent(InMemorySaver(), sidewisp=SidewispMiddleware(route_version="plain/1")),
        steps_team.ask(),
        config,
    )

    assert handoffs(config) == []


# --- the watch on its own ------------------------------------------------------------------


class _Request:
    """What a ToolCallRequest or ModelRequest carries that the watch reads."""

    def __init__(self, state: dict, call_id: str = "call_1") -> None:
        self.state = state
        self.tool_call = {"id": call_id, "name": "record_warranty_status", "args": {}}
        self.runtime = None


def _turn(call_id: str = "call_1") -> list:
    return [AIMessage("", tool_calls=[{"name": "record_warranty_status", "args": {}, "id": call_id}])]


def _step_change(call_id: str = "call_1", step: str = "issue_classifier"):
    from langgraph.types import Command

    return Command(update={"messages": [ToolMessage("ok", tool_call_id=call_id)], "current_step": step})


def test_the_contracts_are_read_once_however_many_tools_return(step_contracts, monkeypatch):
    reads = []
    monkeypatch.setattr(database, "current_contracts", lambda: reads.append(1) or steps_team_contracts())
    monkeypatch.setattr(steps, "_config", lambda: {"configurable": {"operation_id": "op-reads"}})
    watch = steps.StepWatch(steps_team.ROUTE_VERSION, first_step="warranty_collector")

    for index in range(5):
        watch.after_tool(_Request({"messages": _turn(f"call_{index}")}, f"call_{index}"), _step_change(f"call_{index}"))

    assert len(reads) == 1


def steps_team_contracts():
    from receipts.verdicts.bundle import parse_contracts

    return parse_contracts(steps_team.contracts_document())


def test_the_model_call_touches_no_database(step_contracts, monkeypatch, django_assert_num_queries):
    monkeypatch.setattr(
        steps,
        "_config",
        lambda: {"configurable": {"operation_id": "op-noquery"}, "metadata": {"langgraph_checkpoint_ns": "model:t1"}},
    )
    watch = steps.StepWatch(steps_team.ROUTE_VERSION, first_step="warranty_collector")
    watch.after_tool(_Request({"messages": _turn()}), _step_change())
    writer.flush()

    with django_assert_num_queries(0):
        watch.before_model(_Request({"messages": [], "current_step": "issue_classifier"}), ["record_issue_type"])


def test_pending_step_changes_are_bounded_and_cleared_on_use(step_contracts, monkeypatch):
    monkeypatch.setattr(steps, "MAX_PENDING", 3)
    watch = steps.StepWatch(steps_team.ROUTE_VERSION, first_step="warranty_collector")
    for index in range(5):
        operation = f"op-bound-{index}"
        monkeypatch.setattr(steps, "_config", lambda op=operation: {"configurable": {"operation_id": op}})
        watch.after_tool(_Request({"messages": _turn()}), _step_change())

    assert [key[0] for key in watch._pending] == ["op-bound-2", "op-bound-3", "op-bound-4"]
    watch.before_model(_Request({"current_step": "issue_classifier"}), [])
    assert [key[0] for key in watch._pending] == ["op-bound-2", "op-bound-3"]


def test_a_step_name_that_could_hold_a_path_is_refused_up_front():
    with pytest.raises(ValueError, match="first_step must be a non-empty name"):
        SidewispMiddleware(first_step="/etc/passwd")


@pytest.mark.parametrize(
    ("namespace", "scope"), [("", "parent"), ("desk:1f2e", "desk"), ("app:9|desk:1f2e", "app/desk")]
)
def test_the_graph_scope_is_the_agent_graphs_node_path(namespace: str, scope: str):
    assert steps.graph_scope(namespace) == scope


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [(["call_1", "call_2"], "HEALTHY"), (["call_1"], "OPEN_TOOL_PROTOCOL")],
    ids=["whole", "open"],
)
def test_a_step_change_made_beside_another_call_needs_that_call_answered_before_the_next_model_call(
    step_contracts, monkeypatch, answered, verdict
):
    # One AI message [record_warranty_status, lookup]: each tool's own update answers its call, so the history the
    # next model call is given proves the other one (spec v1.3 the whole turn).
    operation_id = f"op-turn-{verdict}"
    config = {"configurable": {"operation_id": operation_id}, "metadata": {"langgraph_checkpoint_ns": "model:t1"}}
    monkeypatch.setattr(steps, "_config", lambda: config)
    lookup = {"name": "lookup", "args": {}, "id": "call_2"}
    turn = [AIMessage("", tool_calls=[*_turn()[0].tool_calls, lookup])]
    watch = steps.StepWatch(steps_team.ROUTE_VERSION, first_step="warranty_collector")
    watch.after_tool(_Request({"messages": turn}), _step_change())

    history = [*turn, *(ToolMessage("ok", tool_call_id=call_id) for call_id in answered)]
    state = {"messages": history, "current_step": "issue_classifier", "warranty_status": "in_warranty"}
    watch.before_model(_Request(state), ["record_issue_type"])
    writer.flush()

    handoff = Handoff.objects.get(run__operation_id=operation_id)
    assert handoff.created_part["turn_tool_call_ids"] == ["call_1", "call_2"]
    assert (handoff.sender, handoff.receiver, handoff.verdict) == ("warranty_collector", "issue_classifier", verdict)
