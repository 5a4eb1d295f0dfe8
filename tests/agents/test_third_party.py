"""Observed mode on teams we did not write: langgraph-swarm, langgraph-supervisor and the LangChain docs'
agents-as-nodes pattern, run through `observe` and `aobserve` with only SidewispMiddleware added."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import decisions
from sidewisp_agent.handoffs import handoff_tool

from agents.host.scripted import Call, Say
from receipts import actions
from receipts.models import AuditEntry, Handoff, MiddlewareReport, Run
from tests.agents import teams
from tests.agents.stored import aobserve, observe

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
FAIL = lambda op: ("stock_check", "fail", "v-1")  # noqa: E731


def config_for(name: str) -> dict:
    token = uuid.uuid4().hex[:8]
    return {
        "configurable": {"thread_id": f"th-{name}-{token}", "operation_id": f"op-{name}-{token}"},
        "recursion_limit": 50,
    }


def ask(text: str = "hello") -> dict:
    return {"messages": [HumanMessage(text)]}


def verdicts(config: dict) -> list[str]:
    return [
        h.verdict
        for h in Handoff.objects.filter(run__operation_id=config["configurable"]["operation_id"]).order_by(
            "created_at", "pk"
        )
    ]


def run_of(config: dict) -> Run:
    return Run.objects.get(operation_id=config["configurable"]["operation_id"])


# --- healthy conversations ------------------------------------------------------------


def test_a_healthy_swarm_handoff_is_healthy_from_the_first_turn(team_contracts, drive):
    config = config_for("swarm")

    outcome = drive(teams.swarm(InMemorySaver()), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]
    run = run_of(config)
    assert (run.status, run.mode) == (Run.Status.COMPLETE, Run.Mode.OBSERVED)
    assert run.thread_id == config["configurable"]["thread_id"]


def test_healthy_sequential_supervisor_handoffs_are_healthy(team_contracts, drive):
    config = config_for("sup")

    outcome = drive(teams.supervisor(InMemorySaver()), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY", "HEALTHY"]
    assert [h.receiver for h in Handoff.objects.filter(run=run_of(config)).order_by("created_at")] == ["w1", "w2"]


def test_a_healthy_agents_as_nodes_handoff_is_healthy(team_contracts, drive):
    config = config_for("nodes")

    outcome = drive(teams.agents_as_nodes(InMemorySaver()), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


def test_an_agents_as_nodes_handoff_is_healthy_without_a_checkpointer(team_contracts, drive):
    config = config_for("nocp")

    outcome = drive(teams.agents_as_nodes(None), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


def test_an_async_only_tool_works_under_aobserve(team_contracts):
    config = config_for("asynctool")
    graph = teams.agents_as_nodes(InMemorySaver(), back_steps=(Call("check_stock", {"item": "x"}), Say("back done")))

    outcome = asyncio.run(aobserve(graph, ask(), config, verifier=PASS))

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


def test_observe_works_inside_a_running_event_loop(team_contracts):
    config = config_for("inloop")

    async def app():
        return observe(teams.swarm(InMemorySaver()), ask(), config, verifier=PASS)

    outcome = asyncio.run(app())

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]
    assert run_of(config).status == Run.Status.COMPLETE


# --- broken transfers -----------------------------------------------------------------


def test_a_transfer_to_an_undeclared_agent_is_route_rejected(team_contracts, drive):
    config = config_for("rogue")
    graph = teams.swarm(InMemorySaver(), transfer="transfer_to_carol", extra_tools=[teams.rogue_transfer()])

    outcome = drive(graph, ask(), config, verifier=PASS)

    assert verdicts(config) == ["ROUTE_REJECTED"]
    assert outcome.status == "failed"
    assert run_of(config).status == Run.Status.FAILED


def test_a_goto_other_than_the_declared_destination_is_route_rejected(team_contracts, drive):
    config = config_for("misdirected")
    graph = teams.swarm(InMemorySaver(), transfer="transfer_declared_bob", extra_tools=[teams.misdirected_transfer()])

    drive(graph, ask(), config, verifier=PASS)

    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    assert (handoff.verdict, handoff.receiver, handoff.reduced_part["goto"]) == ("ROUTE_REJECTED", "bob", "alice")


def test_a_transfer_that_omits_its_tool_message_is_an_open_tool_protocol(team_contracts, drive):
    config = config_for("quiet")
    graph = teams.swarm(InMemorySaver(), transfer="transfer_quietly", extra_tools=[teams.quiet_transfer()])

    drive(graph, ask(), config, verifier=PASS)

    assert verdicts(config) == ["OPEN_TOOL_PROTOCOL"]


def test_a_swarm_transfer_made_beside_another_call_leaves_the_tool_protocol_open(team_contracts, drive):
    # [lookup_fare, transfer_to_ben] in one AI message: langgraph-swarm's tool passes on the state from before
    # lookup_fare was answered, so ben is handed a turn with an open call; a real provider refuses it in ben.
    config = config_for("batched")

    with pytest.raises(teams.HistoryRejected):
        drive(teams.fares_swarm(InMemorySaver()), ask(), config, verifier=PASS)

    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    assert (handoff.sender, handoff.receiver, handoff.verdict) == ("desk", "ben", "OPEN_TOOL_PROTOCOL")
    assert handoff.created_part["turn_tool_call_ids"] == ["call_ben_1", "call_fare_1"]
    assert handoff.reduced_part["tool_message_ids"] == ["call_ben_1"]
    assert run_of(config).status == Run.Status.FAILED


def test_a_swarm_transfer_made_after_the_other_call_was_answered_is_healthy(team_contracts, drive):
    config = config_for("answered")

    outcome = drive(teams.fares_swarm(InMemorySaver(), batched=False), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]
    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    assert handoff.created_part["turn_tool_call_ids"] == [handoff.created_part["tool_call_id"]]


@pytest.mark.parametrize("build", [teams.swarm, teams.agents_as_nodes], ids=["swarm", "agents_as_nodes"])
def test_a_destination_held_before_it_starts_has_not_started(team_contracts, drive, build):
    config = config_for("held")

    outcome = drive(build(InMemorySaver(), hold=True), ask(), config, verifier=PASS)

    assert outcome.status == "parked"
    assert verdicts(config) == ["DESTINATION_NOT_STARTED"]


def test_a_claimed_completion_whose_verifier_fails_is_false_complete(team_contracts, drive):
    config = config_for("false")

    drive(teams.supervisor(InMemorySaver()), ask(), config, verifier=FAIL)

    assert verdicts(config)[-1] == "FALSE_COMPLETE"


# --- approval waits and decisions -------------------------------------------------------


def _hitl_swarm(saver):
    return teams.swarm(
        saver,
        hitl=True,
        bob_tools=[teams.place_order],
        bob_steps=(Call("place_order", {"item": "widget"}), Say("ordered")),
    )


def test_an_approval_wait_reaches_the_app_and_the_run_completes(team_contracts, person, drive):
    owner = person("ops-lead", "approver")
    config = config_for("approval")
    graph = _hitl_swarm(InMemorySaver())

    outcome = drive(graph, ask("buy a widget"), config, wait_policies=teams.WAIT_POLICIES, verifier=PASS)

    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    run = run_of(config)
    assert (outcome.status, handoff.verdict, run.status) == ("waiting", "WAITING_ON_APPROVAL", Run.Status.WAITING)
    assert run.pending_call["tool"] == "place_order"
    assert run.pending_call["arg_types"] == {"item": "str"}
    assert "widget" not in str(run.pending_call)
    assert run.pending_call["interrupts"] == [{"id": outcome.interrupts[0].id, "calls": 1}]

    result = actions.decide(
        user=owner, handoff_id=handoff.pk, kind="approve", token=handoff.wait_part["resume_token_id"], key="k-1"
    )
    assert result.decision is not None, result.message
    command = decisions.await_decision(run.operation_id, timeout=5, poll=0.05)
    outcome = drive(graph, command, config, wait_policies=teams.WAIT_POLICIES, verifier=PASS)

    handoff.refresh_from_db()
    run.refresh_from_db()
    assert outcome.status == "complete"
    assert (handoff.wait_open, handoff.wait_part["resolution"]) == (False, "approved")
    assert (run.status, run.pending_call) == (Run.Status.COMPLETE, None)
    assert AuditEntry.objects.filter(action="wait.resume", run=run, actor=None).count() == 1


def test_a_decision_is_claimed_once_and_a_wait_without_one_times_out(team_contracts, person):
    owner = person("ops-lead", "approver")
    config = config_for("claim")
    observe(_hitl_swarm(InMemorySaver()), ask(), config, wait_policies=teams.WAIT_POLICIES)
    operation_id = config["configurable"]["operation_id"]
    assert decisions.await_decision(operation_id, timeout=0.1, poll=0.05) is None

    handoff = Handoff.objects.get(run__operation_id=operation_id)
    actions.decide(
        user=owner,
        handoff_id=handoff.pk,
        kind="reject",
        token=handoff.wait_part["resume_token_id"],
        key="k",
        reason="no",
    )

    first = asyncio.run(decisions.aawait_decision(operation_id, timeout=1, poll=0.05))
    second = decisions.await_decision(operation_id, timeout=0.1, poll=0.05)
    assert second is None
    (value,) = first.resume.values()
    assert value == {"decisions": [{"type": "reject", "message": "no"}]}


# --- observation never changes the observed ------------------------------------------------


def _final(graph, config) -> tuple[int, str]:
    messages = graph.get_state(config).values["messages"]
    return len(messages), messages[-1].content


def test_observed_and_unobserved_parallel_supervisor_runs_end_alike(team_contracts):
    observed_config, plain_config = (
        config_for("par"),
        {"configurable": {"thread_id": "plain-par"}, "recursion_limit": 50},
    )
    observed_graph, plain_graph = (
        teams.supervisor(InMemorySaver(), parallel=True),
        teams.supervisor(InMemorySaver(), parallel=True),
    )

    outcome = observe(observed_graph, ask(), observed_config, verifier=PASS)
    plain_graph.invoke(ask(), plain_config)

    assert outcome.status == "complete"
    assert _final(observed_graph, observed_config) == _final(plain_graph, plain_config)
    # LangGraph runs one of two parallel Command(graph=PARENT) handoffs and drops the other
    # (which one varies): the receipts show exactly that instead of two green handoffs. The winner's
    # worker is handed the supervisor's turn with the loser's call unanswered (spec v1.3 the whole turn).
    assert sorted(verdicts(observed_config)) == ["OPEN_TOOL_PROTOCOL", "STALE_CONTROL"]
    winner = Handoff.objects.get(
        run__operation_id=observed_config["configurable"]["operation_id"], verdict="OPEN_TOOL_PROTOCOL"
    )
    assert len(winner.created_part["turn_tool_call_ids"]) == 2
    assert winner.reduced_part["tool_message_ids"] == [winner.created_part["tool_call_id"]]


def test_a_long_swarm_history_is_observed_without_changing_the_run(team_contracts):
    observed_config, plain_config = (
        config_for("long"),
        {"configurable": {"thread_id": "plain-long"}, "recursion_limit": 1000},
    )
    observed_config["recursion_limit"] = 1000
    observed_graph, plain_graph = (teams.swarm(InMemorySaver(), busy_calls=210) for _ in range(2))

    outcome = observe(observed_graph, ask(), observed_config, verifier=PASS)
    plain_graph.invoke(ask(), plain_config)

    assert outcome.status == "complete"
    assert _final(observed_graph, observed_config) == _final(plain_graph, plain_config)
    handoff = Handoff.objects.get(run__operation_id=observed_config["configurable"]["operation_id"])
    assert handoff.verdict == "HEALTHY"
    assert handoff.reduced_part["tool_message_ids"] == [handoff.created_part["tool_call_id"]]


def test_a_name_a_receipt_may_not_hold_is_redacted_and_reported_and_the_graph_finishes(team_contracts):
    config = config_for("drop")
    # A declared receiver a receipt may not hold (an absolute path): spec v1.3 stores it redacted, the rest of
    # the receipt kept, and names the field on the run.
    graph = teams.agents_as_nodes(InMemorySaver(), metadata={"__handoff_destination": "/etc/back"})

    outcome = observe(graph, ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    run = run_of(config)
    report = MiddlewareReport.objects.get(run=run, kind=MiddlewareReport.Kind.VALUE_REDACTED)
    assert report.detail == {"part": "created", "field": "created.receiver"}
    created = Handoff.objects.get(run=run).created_part
    assert created["receiver"] == "redacted:" + hashlib.sha256(b"/etc/back").hexdigest()[:12]
    assert created["sender"] == "front"
    assert not run.reports.filter(kind=MiddlewareReport.Kind.EVIDENCE_DROPPED).exists()


def test_a_run_without_any_handoff_is_reported(team_contracts):
    config = config_for("solo")
    graph = teams.swarm(InMemorySaver(), transfer="lookup")

    observe(graph, ask(), config)

    assert MiddlewareReport.objects.filter(run=run_of(config), kind=MiddlewareReport.Kind.NO_HANDOFF).exists()


def test_our_transfer_tool_works_without_context_keys(team_contracts):
    config = config_for("ours")
    graph = teams.swarm(
        InMemorySaver(), transfer="handoff_bob", extra_tools=[handoff_tool(to="bob", name="handoff_bob")]
    )

    outcome = observe(graph, ask(), config, verifier=PASS)

    assert handoff_tool(to="bob").tool_call_schema.model_json_schema()["properties"] == {}
    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


def test_an_edit_reaches_the_app_only_with_the_graphs_pending_interrupts(team_contracts, person):
    owner = person("ops-lead", "approver")
    config = config_for("edit")
    graph = _hitl_swarm(InMemorySaver())
    observe(graph, ask("buy a widget"), config, wait_policies=teams.WAIT_POLICIES, verifier=PASS)
    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    token = handoff.wait_part["resume_token_id"]
    result = actions.decide(
        user=owner, handoff_id=handoff.pk, kind="edit", token=token, key="k-e", edited_args={"item": "gadget"}
    )
    assert result.decision is not None, result.message
    operation_id = config["configurable"]["operation_id"]

    with pytest.raises(ValueError, match="pending="):
        decisions.await_decision(operation_id, timeout=0.1, poll=0.05)
    command = decisions.await_decision(operation_id, timeout=1, poll=0.05, pending=graph.get_state(config).interrupts)

    (answer,) = command.resume.values()
    assert answer["decisions"][0]["edited_action"] == {"name": "place_order", "args": {"item": "gadget"}}
    assert observe(graph, command, config, verifier=PASS).status == "complete"


def test_a_pending_call_keeps_only_names_that_pass_the_minimization_check():
    from langgraph.types import Interrupt
    from sidewisp_agent.waits import pending_call_of

    pending = Interrupt(
        value={
            "action_requests": [
                {"name": "sk-live-4eC39HqLyjWDarjtT1zdp7dc", "args": {"item": "x", "/home/alice/key": 1, "\u202eq": 2}}
            ],
            "review_configs": [{"action_name": "x", "allowed_decisions": ["approve"]}],
        },
        id="i-1",
    )

    call = pending_call_of("op-names", [pending])

    # Spec v1.3: a tool name is an identifier; a credential-shaped one is stored redacted, not as it is.
    assert call["tool"] == "redacted:" + hashlib.sha256(b"sk-live-4eC39HqLyjWDarjtT1zdp7dc").hexdigest()[:12]
    assert call["arg_types"] == {"item": "str"}
