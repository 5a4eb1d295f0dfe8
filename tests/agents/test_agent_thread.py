"""Issue 20 §1: nothing on the agent's thread but handing entries over.

An observed run's agent side reads the database once (its start: the stop flag, the database being the
truth on every start and resume), waits for the evidence writer once (at its end), and hands everything
else — receipts, the run's creation, its status, a wait's pending call — to the writer's FIFO. What a
user sees stays as it was: the run's receipts and status are stored when `observe` returns, a wait is
stored before its run says it waits, and an operator's stop parks the run before its next step.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db.backends import utils
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from sidewisp_agent import barrier, observer, parking
from sidewisp_agent.decisions import resume_value
from sidewisp_agent.failures import STREAM_CLOSED

from agents.host.scripted import Call, Say
from agents.observe import database, writer
from receipts.ingest import intake
from receipts.ingest.signals import handoff_changed
from receipts.models import Handoff, Run
from receipts.verdicts import bundle
from tests.agents import teams
from tests.agents.stored import aobserve, observe

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
WRITER_THREAD = "sidewisp-writer"
ORDER = (Call("place_order", {"item": "widget"}), Say("ordered"))


def ask() -> dict:
    return {"messages": [HumanMessage("hello")]}


def config_for(operation_id: str) -> dict:
    return {"configurable": {"thread_id": f"th-{operation_id}", "operation_id": operation_id}}


@contextmanager
def agent_side() -> Iterator[dict]:
    """Count SQL statements by thread kind (the writer's, everyone else's) and flushes of the writer made by the
    agent's own thread (the one that runs the block: a thread an earlier test left behind is not this run's)."""
    seen: dict = {"queries": Counter(), "flushes": 0, "waits": 0}
    agent = threading.current_thread()
    execute, executemany, flush = utils.CursorWrapper.execute, utils.CursorWrapper.executemany, writer.Writer.flush
    wait_for = writer.Writer.wait_for

    def side() -> str:
        return "writer" if threading.current_thread().name == WRITER_THREAD else "agent"

    def counted_execute(self, *args, **kwargs):
        seen["queries"][side()] += 1
        return execute(self, *args, **kwargs)

    def counted_executemany(self, *args, **kwargs):
        seen["queries"][side()] += 1
        return executemany(self, *args, **kwargs)

    def counted_flush(self, *args, **kwargs):
        seen["flushes"] += threading.current_thread() is agent
        return flush(self, *args, **kwargs)

    def counted_wait_for(self, *args, **kwargs):  # a flush, a checkpoint's or a step's wait for a transfer
        seen["waits"] += 1
        return wait_for(self, *args, **kwargs)

    writer.flush()  # nothing of an earlier test in the counts
    utils.CursorWrapper.execute, utils.CursorWrapper.executemany = counted_execute, counted_executemany
    writer.Writer.flush, writer.Writer.wait_for = counted_flush, counted_wait_for
    try:
        yield seen
    finally:
        utils.CursorWrapper.execute, utils.CursorWrapper.executemany = execute, executemany
        writer.Writer.flush, writer.Writer.wait_for = flush, wait_for


@contextmanager
def operator_stops_on(part: str, operation_id: str) -> Iterator[None]:
    """The operator stops the run the moment its transfer's `part` is stored (a receiver of handoff_changed)."""

    def stop(sender, handoff, cause: str, **kwargs) -> None:
        if cause == part and handoff.run.operation_id == operation_id:
            Run.objects.filter(operation_id=operation_id).update(auto_continue=False)

    uid = f"stop-{operation_id}"
    handoff_changed.connect(stop, weak=False, dispatch_uid=uid)
    try:
        yield
    finally:
        handoff_changed.disconnect(dispatch_uid=uid)


def bob_looks_up(times: int = 2) -> tuple:
    return (*(Call("lookup", {"query": f"q{i}"}) for i in range(times)), Say("bob done"))


def test_an_observed_run_reads_the_database_once_and_does_not_wait_for_the_writer(team_contracts):
    graph = teams.swarm(InMemorySaver(), busy_calls=2, bob_steps=bob_looks_up(), bob_tools=[teams.lookup])
    config = config_for("op-one-read")

    with agent_side() as seen:
        outcome = observer.observe(graph, ask(), config, verifier=PASS)
    writer.flush()

    run = Run.objects.get(operation_id="op-one-read")
    handoff = Handoff.objects.get(run=run)
    # Stored once the writer caught up: the run, its status, the transfer's receipts and its verdict.
    assert (outcome.status, run.status, run.mode) == ("complete", "complete", "observed")
    assert run.thread_id == "th-op-one-read"
    assert handoff.verdict == "HEALTHY"
    assert handoff.verification_part["result"] == "pass"
    # The agent's side: one query (the stop flag at the start), no flush (issue 32); the writer did the rest.
    assert seen["queries"]["agent"] == 1
    assert seen["flushes"] == 0
    assert seen["queries"]["writer"] > 10


def test_a_run_driven_again_reads_its_stop_flag_again_and_still_waits_once(team_contracts):
    graph = teams.swarm(InMemorySaver(), hitl=True, bob_steps=ORDER, bob_tools=[teams.place_order])
    config = config_for("op-again")
    observe(graph, ask(), config, wait_policies=teams.WAIT_POLICIES)

    approval = Command(resume=resume_value(graph.get_state(config).interrupts, {"type": "approve"}))

    with agent_side() as seen:
        outcome = observer.observe(graph, approval, config, verifier=PASS)
    writer.flush()

    run = Run.objects.get(operation_id="op-again")
    assert (outcome.status, run.status, run.pending_call) == ("complete", "complete", None)
    wait = Handoff.objects.get(run=run).wait_part
    assert (wait["resolved"], wait["resolution"]) == (True, "approved")
    # The stop flag, and the parts reconcile compares with the checkpoint (a resumed thread has a history);
    # the resume's decision is known from the resume itself, so no wait is read.
    assert seen["queries"]["agent"] == 2
    assert seen["flushes"] == 0  # it completed: nothing to wait for


def test_a_wait_is_stored_before_its_run_says_it_waits(team_contracts):
    graph = teams.swarm(InMemorySaver(), hitl=True, bob_steps=ORDER, bob_tools=[teams.place_order])
    config = config_for("op-wait-order")
    status_when_the_wait_landed = []

    def look(sender, handoff, cause: str, **kwargs) -> None:
        if cause == "wait" and handoff.run.operation_id == "op-wait-order":
            status_when_the_wait_landed.append(Run.objects.values_list("status", "pending_call").get(pk=handoff.run_id))

    handoff_changed.connect(look, weak=False, dispatch_uid="look-at-wait")
    try:
        with agent_side() as seen:
            outcome = observer.observe(graph, ask(), config, wait_policies=teams.WAIT_POLICIES)
    finally:
        handoff_changed.disconnect(dispatch_uid="look-at-wait")

    run = Run.objects.get(operation_id="op-wait-order")
    assert status_when_the_wait_landed == [("running", None)]
    assert (outcome.status, run.status) == ("waiting", "waiting")
    assert run.pending_call["tool"] == "place_order"
    assert Handoff.objects.get(run=run).wait_open is True
    assert seen["flushes"] == 1  # a waiting run's one wait for the writer, before observe returns


def test_an_operators_stop_parks_the_run_before_its_next_step_without_a_query_per_step(team_contracts):
    graph = teams.swarm(InMemorySaver(), busy_calls=3, bob_steps=bob_looks_up(), bob_tools=[teams.lookup])
    config = config_for("op-stopped")

    with operator_stops_on("created", "op-stopped"), agent_side() as seen:
        outcome = observer.observe(graph, ask(), config, verifier=PASS)
    writer.flush()

    run = Run.objects.get(operation_id="op-stopped")
    assert (outcome.status, run.status, run.auto_continue) == ("parked", "parked", False)
    # bob never started: the transfer's destination is not recorded, and bob's state holds no answer.
    handoff = Handoff.objects.get(run=run)
    assert handoff.created_part is not None and handoff.destination_part is None
    assert "bob done" not in [m.content for m in graph.get_state(config).values["messages"]]
    assert seen["queries"]["agent"] == 1  # the start's read: the stop was known from memory
    assert seen["flushes"] == 0

    Run.objects.filter(pk=run.pk).update(auto_continue=True)  # the operator resumes auto-continue
    assert observe(graph, None, config, verifier=PASS).status == "complete"
    assert Run.objects.get(pk=run.pk).status == "complete"
    assert Handoff.objects.get(run=run).verdict == "HEALTHY"


def test_a_stop_no_receipt_carries_is_read_once_the_memory_is_older_than_its_bound(team_contracts, monkeypatch):
    # A stop made while nothing is stored (no batch to read it after): the check reads the flag itself
    # once what it remembers is older than parking.MAX_AGE_SECONDS (0 here, so at every step).
    monkeypatch.setattr(parking, "MAX_AGE_SECONDS", -1.0)
    graph = teams.swarm(InMemorySaver(), busy_calls=1, bob_steps=bob_looks_up(1), bob_tools=[teams.lookup])
    config = config_for("op-stopped-quietly")
    # The run's row exists before alice's tool stops it (a new run's row is the writer's to create, a moment later).
    Run.objects.create(operation_id="op-stopped-quietly", thread_id="th-op-stopped-quietly")
    original_lookup = teams.lookup.func

    @database.closes_own_connection
    def stop_then_look(query: str) -> str:
        Run.objects.filter(operation_id="op-stopped-quietly").update(auto_continue=False)
        return original_lookup(query)

    monkeypatch.setattr(teams.lookup, "func", stop_then_look)
    outcome = observe(graph, ask(), config)

    assert (outcome.status, Run.objects.get(operation_id="op-stopped-quietly").status) == ("parked", "parked")
    assert Handoff.objects.get(run__operation_id="op-stopped-quietly").destination_part is None


def test_a_stopped_run_parks_at_its_start_and_its_waits_stay_untouched(team_contracts):
    graph = teams.swarm(InMemorySaver())
    Run.objects.create(operation_id="op-parked-first", thread_id="th-op-parked-first", auto_continue=False)

    with agent_side() as seen:
        outcome = observer.observe(graph, ask(), config_for("op-parked-first"))
    writer.flush()

    assert (outcome.status, Run.objects.get(operation_id="op-parked-first").status) == ("parked", "parked")
    assert not Handoff.objects.filter(run__operation_id="op-parked-first").exists()
    assert (seen["queries"]["agent"], seen["flushes"]) == (1, 0)


def test_run_entries_stay_local_the_api_refuses_them():
    entry = intake.RunEntry("op-1", Run.Status.RUNNING, thread_id="th-1")

    with pytest.raises(TypeError, match="locally only"):
        intake.to_json(entry)
    with pytest.raises(bundle.BundleError) as refused:
        intake.parse({"kind": "run", "operation_id": "op-1", "status": "running"})
    assert refused.value.field == "entry.kind"


def test_an_async_caller_who_closes_the_stream_early_leaves_no_run_running(team_contracts):
    config = config_for("op-aclosed")

    async def take_one_and_close() -> None:
        chunks = aobserve.astream(teams.swarm(InMemorySaver()), ask(), config, stream_mode="updates", durable=True)
        await chunks.__anext__()
        await chunks.aclose()

    asyncio.run(take_one_and_close())

    run = Run.objects.get(operation_id="op-aclosed")
    assert (run.status, run.error) == (Run.Status.FAILED, STREAM_CLOSED)


def test_a_guarded_checkpointer_stays_guarded_in_the_clone_langgraph_makes_of_it():
    saver = InMemorySaver()

    assert barrier.guard(saver) and barrier.guard(saver)  # once, and idempotent
    clone = copy.copy(saver)  # what LangGraph's serializer allowlist does (BaseCheckpointSaver.with_allowlist)
    assert isinstance(clone, InMemorySaver) and type(clone) is type(saver)
    assert getattr(clone, barrier.GUARDED) is True
    assert not barrier.guard(None)


def test_a_run_without_a_checkpointer_never_waits_for_the_writer(team_contracts):
    # The bench's shape: agents as nodes, no checkpointer, so no checkpoint or resumed step to keep ahead of.
    with agent_side() as seen:
        outcome = observer.observe(teams.agents_as_nodes(None), ask(), config_for("op-no-saver"), verifier=PASS)
    writer.flush()

    handoff = Handoff.objects.get(run__operation_id="op-no-saver")
    assert (outcome.status, handoff.verdict) == ("complete", "HEALTHY")
    assert (seen["queries"]["agent"], seen["flushes"], seen["waits"]) == (1, 0, 0)
