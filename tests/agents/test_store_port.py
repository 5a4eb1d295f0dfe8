"""The store port (issue 31 §1): what the recording side reads back of its runs comes from the store, not from a
database it knows. A stand-in store that no database backs parks a stopped run, hands back the decisions it
holds, and says how a run's latest wait was decided; the database is never touched."""

from __future__ import annotations

from collections.abc import Collection
from typing import TypedDict

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from sidewisp_agent import await_decision
from sidewisp_agent.conclusion import verify
from sidewisp_agent.entries import RunEntry

from agents.observe import writer
from tests.agents.stored import observe


class _Store:
    """A local store (its runs are this process's) whose answers the test sets."""

    remote = False

    def __init__(self, *, auto_continue: bool | None = True, decision: dict | None = None) -> None:
        self.flag = auto_continue
        self.decision = decision
        self.written: list = []
        self.declined: str | None = None

    def write(self, entries) -> None:
        self.written.extend(entries)

    def auto_continue(self, operation_id: str) -> bool | None:
        return self.flag

    def stopped(self, operation_ids: Collection[str]) -> set[str]:
        return set(operation_ids) if self.flag is False else set()

    def known_parts(self, operation_id: str) -> dict[str, set[str]]:
        return {}

    def contracts(self):
        return None

    def declined_resolution(self, operation_id: str) -> str | None:
        return self.declined

    def take_decision(self, operation_id: str, *, has_pending: bool) -> dict | None:
        taken, self.decision = self.decision, None
        return taken


@pytest.fixture
def store_in_use(monkeypatch):
    """Installs a stand-in store as the server's (the writer's sink) and refuses every database connection."""

    def install(found: _Store) -> _Store:
        writer.shutdown()
        monkeypatch.setattr(writer, "sink", lambda: found)
        return found

    def refuse(self):
        msg = "the recording side must reach its runs through the store"
        raise RuntimeError(msg)

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refuse)
    yield install
    writer.shutdown()


class _State(TypedDict):
    messages: list


def _graph():
    ran = []
    builder = StateGraph(_State)
    builder.add_node("agent", lambda state: ran.append(1) or {"messages": [AIMessage("done")]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(), ran


def test_a_run_the_store_says_was_stopped_is_parked_before_it_runs(store_in_use):
    stopped = store_in_use(_Store(auto_continue=False))
    graph, ran = _graph()

    outcome = observe(graph, {"messages": []}, {"configurable": {"thread_id": "t-port", "operation_id": "op-port"}})

    assert outcome.status == "parked"
    assert ran == []
    assert [(e.status, e.operation_id) for e in stopped.written if isinstance(e, RunEntry)] == [("parked", "op-port")]


def test_a_run_the_store_knows_nothing_of_runs_and_ends_with_its_lifecycle_in_the_store(store_in_use):
    running = store_in_use(_Store(auto_continue=None))
    graph, ran = _graph()

    outcome = observe(graph, {"messages": []}, {"configurable": {"thread_id": "t-new", "operation_id": "op-new"}})

    assert (outcome.status, ran) == ("complete", [1])
    changes = [(e.status, e.final) for e in running.written if isinstance(e, RunEntry)]
    assert changes == [("running", False), ("complete", True)]


def test_the_decision_the_store_hands_back_is_the_command_that_applies_it(store_in_use):
    interrupt = {
        "id": "i-1",
        "value": {
            "action_requests": [{"name": "place_order"}],
            "review_configs": [{"action_name": "place_order", "allowed_decisions": ["approve", "reject"]}],
        },
    }
    store_in_use(_Store(decision={"type": "approve", "resume": {"type": "approve"}, "interrupts": [interrupt]}))

    command = await_decision("op-decided", timeout=0)

    assert command.resume == {"i-1": {"decisions": [{"type": "approve"}]}}
    assert await_decision("op-decided", timeout=0) is None  # taken once


def test_a_reopen_the_store_hands_back_sends_the_destination_back_to_work(store_in_use):
    reopen = {"destination": "bob", "verifier": "order_exists", "result": "fail", "token": "reopen-7"}
    store_in_use(_Store(decision={"type": "reopen", "reopen": reopen}))

    command = await_decision("op-reopened", timeout=0)

    assert command.goto == "bob"
    assert "order_exists" in command.update["messages"][0].content


def test_the_store_says_whether_the_latest_wait_was_declined(store_in_use):
    declined = store_in_use(_Store())
    declined.declined = "rejected"
    not_placed = lambda op: ("order_check", "fail", "v-1")  # noqa: E731

    assert verify("op-declined", not_placed, attempt="end", final_message="I did not place it") == "pass"
    writer.flush()
    (verification,) = [e.value for e in declined.written if getattr(e, "part", None) == "verification"]
    assert verification["verifier"] == "order_check.declined"
