"""Issue 32 §1: the agent never waits for storage, except where it matters.

`observe` returns as soon as the graph does, while the database is slow; its receipts arrive after. A waiting
outcome is never returned before its wait is stored, and `durable=True` stores every run first. At process
exit the writer stores what was queued. (A full queue drops and reports: tests/sidewisp/test_lost_evidence.py.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import config as agent_config
from sidewisp_agent import observer, writer
from sidewisp_agent import writer as agent_writer

from agents.host.scripted import Call
from receipts.models import Handoff, Run
from tests.agents import teams
from tests.agents.test_agent_thread import ORDER
from tests.agents.test_third_party import ask, config_for
from tests.conftest import wait_until

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
# Well below the writer's flush timeout: a run that waited for a locked database would not return within it.
RETURNS_WITHIN_SECONDS = writer.FLUSH_TIMEOUT / 3


class RunsTableLock:
    """Another session's lock on the runs table against writes (reads go on): the writer's batches wait for it."""

    def __init__(self) -> None:
        self.session = None

    def take(self) -> None:
        database = connections["default"]
        self.session = database.get_new_connection(database.get_connection_params())  # its own transaction
        self.session.execute(f"LOCK TABLE {Run._meta.db_table} IN EXCLUSIVE MODE")

    def release(self) -> None:
        if self.session is not None:
            self.session.rollback()
            self.session.close()
            self.session = None


@pytest.fixture
def runs_lock() -> Iterator[RunsTableLock]:
    lock = RunsTableLock()
    yield lock
    lock.release()


@pytest.fixture
def writer_waited() -> Iterator[threading.Event]:
    """Set when a run waits for the writer (`sidewisp_agent.writer.flush`, as `settle` calls it)."""
    waited, flush = threading.Event(), agent_writer.flush

    def seen_flush(*args, **kwargs) -> bool:
        waited.set()
        return flush(*args, **kwargs)

    agent_writer.flush = seen_flush
    try:
        yield waited
    finally:
        agent_writer.flush = flush


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, dict]:
    """Run `call` on a thread of its own; what it returned or raised lands in the dict."""
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc
        finally:
            connections.close_all()  # this thread's own

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def stored(config: dict) -> Run | None:
    return Run.objects.filter(operation_id=config["configurable"]["operation_id"]).first()


def observed(how: str, graph, config: dict, **kwargs) -> Callable[[], object]:
    if how == "sync":
        return lambda: observer.observe(graph, ask(), config, **kwargs)
    return lambda: asyncio.run(observer.aobserve(graph, ask(), config, **kwargs))


@pytest.mark.parametrize("how", ["sync", "async"])
def test_observe_returns_while_the_database_is_slow_and_the_runs_receipts_arrive_after(team_contracts, runs_lock, how):
    # Without a checkpointer: no checkpoint to keep behind a transfer's receipts, so nothing waits for them.
    config = config_for(f"slow-{how}")
    runs_lock.take()

    thread, result = in_thread(observed(how, teams.agents_as_nodes(None), config, verifier=PASS))
    wait_until(lambda: not thread.is_alive(), what="observe to return", timeout=RETURNS_WITHIN_SECONDS)

    assert result["value"].status == "complete"
    assert stored(config) is None  # nothing of the run could be stored yet
    runs_lock.release()
    assert writer.flush()
    run = stored(config)
    assert (run.status, run.mode) == (Run.Status.COMPLETE, Run.Mode.OBSERVED)
    handoff = Handoff.objects.get(run=run)
    assert (handoff.verdict, handoff.verification_part["result"]) == ("HEALTHY", "pass")


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_waiting_outcome_is_never_returned_before_its_wait_is_stored(
    team_contracts, runs_lock, writer_waited, monkeypatch, how
):
    # The database turns slow in bob's lookup, after the transfer's receipts (which its checkpoints wait for).
    config = config_for(f"wait-{how}")
    steps = (Call("lookup", {"query": "stock"}), *ORDER)
    graph = teams.swarm(InMemorySaver(), hitl=True, bob_steps=steps, bob_tools=[teams.lookup, teams.place_order])
    monkeypatch.setattr(teams.lookup, "func", lambda query: runs_lock.take() or "found")

    def run_then_look() -> tuple:
        outcome = observed(how, graph, config, wait_policies=teams.WAIT_POLICIES)()
        handoff = Handoff.objects.filter(run__operation_id=config["configurable"]["operation_id"]).first()
        return outcome.status, handoff is not None and handoff.wait_open, stored(config).status

    thread, result = in_thread(run_then_look)
    wait_until(lambda: writer_waited.is_set() or not thread.is_alive(), what="observe to wait or return")
    assert runs_lock.session is not None
    assert thread.is_alive()  # waiting for the writer, which cannot store the wait while the table is locked
    runs_lock.release()
    thread.join(60)
    assert "error" not in result

    # What observe's caller could read the moment it returned: the wait, and the run waiting on it.
    assert result["value"] == ("waiting", True, Run.Status.WAITING)


def test_a_durable_run_is_stored_before_observe_returns(team_contracts, runs_lock, writer_waited):
    config = config_for("durable")
    runs_lock.take()

    thread, result = in_thread(observed("sync", teams.agents_as_nodes(None), config, verifier=PASS, durable=True))
    wait_until(lambda: writer_waited.is_set() or not thread.is_alive(), what="observe to wait or return")
    assert thread.is_alive()
    runs_lock.release()
    thread.join(60)

    assert result["value"].status == "complete"
    assert stored(config).status == Run.Status.COMPLETE


def test_at_process_exit_the_writer_stores_what_was_queued(tmp_path: Path):
    # The sink stores nothing until the process exits (an atexit handler registered after the writer's runs
    # first): every entry is still queued when the script ends.
    stored_lines = tmp_path / "stored.txt"
    script = textwrap.dedent(f"""
        import atexit, threading
        from sidewisp_agent import entries, store, writer

        exiting = threading.Event()

        class SlowSink:
            def write(self, batch):
                exiting.wait()
                with open({str(stored_lines)!r}, "a") as out:
                    out.writelines(entry.attempt + "\\n" for entry in batch)

        store.install(SlowSink)
        for n in range(500):
            writer.submit(entries.ReportEntry("op-exit", "observer", "graph_error", {{"error": "E"}}, f"a-{{n}}"))
        atexit.register(exiting.set)
    """)

    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)

    assert sorted(stored_lines.read_text().split()) == sorted(f"a-{n}" for n in range(500))


def test_the_queue_bounds_are_settings(monkeypatch, settings):
    monkeypatch.setenv("SIDEWISP_WRITER_CAPACITY", "25")
    monkeypatch.setenv("SIDEWISP_WRITER_WAIT_SECONDS", "0.5")
    assert agent_config.writer_limits() == agent_config.WriterLimits(capacity=25, wait_seconds=0.5)
    monkeypatch.setenv("SIDEWISP_WRITER_CAPACITY", "0")
    with pytest.raises(agent_config.ConfigurationError, match="SIDEWISP_WRITER_CAPACITY"):
        agent_config.writer_limits()

    # The server passes its own settings (agents.observe.writer.install), read at its start.
    assert (writer.get().capacity, writer.get().submit_timeout) == (
        settings.SIDEWISP_WRITER_CAPACITY,
        settings.SIDEWISP_WRITER_WAIT_SECONDS,
    )
