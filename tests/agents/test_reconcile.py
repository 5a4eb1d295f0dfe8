"""Evidence a crashed process lost is re-derived from the checkpoint history when the run resumes.

A "crash" here is a graph that ran without the observer past a transfer (its checkpoint moved on, its
`reduced` and `destination` were never recorded), as a worker killed after LangGraph saved the step
leaves it; the resumed observer must record what that step did, once.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph_swarm import SwarmState
from sidewisp_agent import conclude

from agents.observe import writer
from receipts.models import ContractVersion, Handoff, Receipt
from tests.agents import teams
from tests.agents.stored import observe

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731


@pytest.fixture
def team_contracts(transactional_db, contracts):
    routes = {**teams.ROUTES, "prep": {}}
    ContractVersion.objects.create(version=teams.ROUTE_VERSION, routes=routes)


def config_for(name: str) -> dict:
    token = uuid.uuid4().hex[:8]
    return {"configurable": {"thread_id": f"th-{name}-{token}", "operation_id": f"op-{name}-{token}"}}


def crash_after_the_transfer(graph, config: dict) -> None:
    """The graph runs unobserved (as a killed observer's process did) and only `created` reached the database."""
    graph.invoke({"messages": [HumanMessage("hello")]}, config)  # only the middleware's `created` is recorded
    writer.flush()


def handoffs(config: dict) -> list[tuple[str, str, str, str]]:
    found = Handoff.objects.filter(run__operation_id=config["configurable"]["operation_id"]).order_by("created_at")
    return [(h.sender, h.receiver, h.verdict, (h.reduced_part or {}).get("graph_scope")) for h in found]


def desk(checkpointer):
    """The swarm as one node ("desk") of an app graph, after a "prep" node."""
    builder = StateGraph(SwarmState)
    builder.add_node("prep", lambda state: {})
    builder.add_node("desk", teams.swarm(None))
    builder.add_edge(START, "prep")
    builder.add_edge("prep", "desk")
    builder.add_edge("desk", END)
    return builder.compile(checkpointer=checkpointer)


def test_a_run_resumed_past_a_transfer_records_the_reduced_and_destination_it_lost(team_contracts):
    graph, config = teams.swarm(InMemorySaver(), hold=True), config_for("held")
    crash_after_the_transfer(graph, config)
    assert handoffs(config) == [("alice", "bob", "STALE_CONTROL", None)]

    outcome = observe(graph, None, config, verifier=PASS)

    assert outcome.status == "complete"
    assert handoffs(config) == [("alice", "bob", "HEALTHY", "parent")]


def test_a_run_that_finished_before_the_crash_is_concluded_with_every_part(team_contracts):
    graph, config = teams.swarm(InMemorySaver()), config_for("done")
    crash_after_the_transfer(graph, config)

    outcome = conclude(graph, config, verifier=PASS)

    assert outcome.status == "complete"
    assert handoffs(config) == [("alice", "bob", "HEALTHY", "parent")]
    destination = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"]).destination_part
    assert destination["node_id"] == "bob"


def test_a_nested_transfer_is_reconciled_in_its_own_scope(team_contracts):
    graph, config = desk(InMemorySaver()), config_for("desk")
    crash_after_the_transfer(graph, config)

    conclude(graph, config, verifier=PASS)

    assert handoffs(config) == [("alice", "bob", "HEALTHY", "desk")]


def test_reconciling_a_fully_recorded_run_records_no_part_twice(team_contracts):
    graph, config = teams.swarm(InMemorySaver()), config_for("twice")
    observe(graph, {"messages": [HumanMessage("hello")]}, config, verifier=PASS)
    operation_id = config["configurable"]["operation_id"]
    before = sorted(Receipt.objects.filter(handoff__run__operation_id=operation_id).values_list("part", flat=True))

    conclude(graph, config, verifier=PASS)
    conclude(graph, config, verifier=PASS)

    after = sorted(Receipt.objects.filter(handoff__run__operation_id=operation_id).values_list("part", flat=True))
    assert [p for p in after if p in ("created", "reduced", "destination")] == [
        p for p in before if p in ("created", "reduced", "destination")
    ]


class Crash(BaseException):
    """The process dies: nothing after this point runs."""


class DyingSaver(InMemorySaver):
    """Saves nothing from the first root checkpoint that shows bob in control: the step's writes are saved, its
    checkpoint is not (a worker killed between the two)."""

    armed = True

    def put(self, config, checkpoint, metadata, new_versions):
        root = not config["configurable"].get("checkpoint_ns")
        if self.armed and root and checkpoint["channel_values"].get("active_agent") == "bob":
            self.armed = False
            raise Crash
        return super().put(config, checkpoint, metadata, new_versions)


def test_a_run_killed_between_a_transfer_s_writes_and_its_checkpoint_records_it_on_resume(team_contracts):
    saver = DyingSaver()
    graph, config = teams.swarm(saver), config_for("in-flight")
    with pytest.raises(Crash):
        graph.invoke({"messages": [HumanMessage("hello")]}, config, durability="sync")
    writer.flush()
    assert graph.get_state(config).next == ()  # the step's writes are there, its checkpoint is not

    outcome = observe(graph, None, config, verifier=PASS)

    assert outcome.status == "complete"
    assert handoffs(config) == [("alice", "bob", "HEALTHY", "parent")]


class LosingSaver(InMemorySaver):
    """Loses the root step's writes that carry a transfer (`branch:to:`), while saving the checkpoint after it.

    LangGraph saves a task's writes and the next step's checkpoint on two background threads, and
    `durability="sync"` waits only for the checkpoint: a worker killed once the checkpoint was saved (the
    observer handing the transfer's `reduced` to the writer) can leave the step's writes unsaved.
    """

    losing = True
    lost = 0

    def put_writes(self, config, writes, task_id, task_path=""):
        root = not config["configurable"].get("checkpoint_ns")
        if self.losing and root and any(channel.startswith("branch:to:") for channel, _ in writes):
            self.lost += 1  # LangGraph saves them again as the invocation ends: lost each time
            return None
        return super().put_writes(config, writes, task_id, task_path)


def test_a_run_killed_after_a_transfer_s_checkpoint_but_before_its_writes_were_saved_records_it_on_resume(
    team_contracts,
):
    saver = LosingSaver()
    graph, config = teams.swarm(saver, hold=True), config_for("writes-lost")
    crash_after_the_transfer(graph, config)
    saver.losing = False  # the resumed run's saves all succeed
    assert saver.lost  # the transfer's writes were lost, the checkpoint after it (bob next) was saved
    assert graph.get_state(config).next == ("bob",)

    outcome = observe(graph, None, config, verifier=PASS)

    assert outcome.status == "complete"
    assert handoffs(config) == [("alice", "bob", "HEALTHY", "parent")]


def test_a_hand_written_transfer_whose_writes_were_lost_is_recorded_on_resume_too(team_contracts):
    # No receiver declared: the middleware's `created` (recorded once the tool returned) names the handoff,
    # and the checkpoint after it schedules one node, its receiver.
    saver = LosingSaver()
    by_hand = teams._transfer("transfer_by_hand", "bob")
    graph, config = (
        teams.swarm(saver, hold=True, transfer="transfer_by_hand", extra_tools=[by_hand]),
        config_for("hand"),
    )
    crash_after_the_transfer(graph, config)
    saver.losing = False
    assert saver.lost and graph.get_state(config).next == ("bob",)

    outcome = observe(graph, None, config, verifier=PASS)

    assert outcome.status == "complete"
    assert handoffs(config) == [("alice", "bob", "HEALTHY", "parent")]
