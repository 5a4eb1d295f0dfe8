"""The batched evidence writer: what an agent hands it reaches the database (or a server), in order,
without the agent waiting on the database, and nothing is lost quietly."""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import writer as package_writer  # the one writer; the server module re-exports it
from sidewisp_agent.elsewhere import Elsewhere

from agents.observe import database, writer
from receipts.ingest.intake import PartEntry, ReportEntry
from receipts.models import ContractVersion, Handoff, MiddlewareReport, Receipt
from tests.agents import teams
from tests.agents.stored import observe
from tests.factories import healthy_parts

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731


class CapturingSink(Elsewhere):
    """Stands in for the database or the server (a store elsewhere, as the server's is to the recording side):
    keeps what it was given, optionally after a gate opens."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.batches: list[list] = []

    def write(self, entries) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append(list(entries))

    @property
    def entries(self) -> list:
        return [entry for batch in self.batches for entry in batch]


class FlakySink(writer.LocalSink):
    """The local database, unreachable for the first `outages` writes (as during a failover)."""

    def __init__(self, outages: int) -> None:
        self.outages = outages

    def write(self, entries) -> None:
        if self.outages:
            self.outages -= 1
            msg = "server closed the connection unexpectedly"
            raise OperationalError(msg)
        super().write(entries)


def _part(handoff_id: str, part: str, value=None, operation_id: str = "op-w") -> PartEntry:
    return PartEntry(operation_id, handoff_id, part, healthy_parts()[part] if value is None else value)


@pytest.fixture
def team(transactional_db, contracts):
    ContractVersion.objects.create(version=teams.ROUTE_VERSION, routes=teams.ROUTES)


def _wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _config() -> dict:
    token = uuid.uuid4().hex[:8]
    return {"configurable": {"thread_id": f"th-w-{token}", "operation_id": f"op-w-{token}"}, "recursion_limit": 50}


def test_a_runs_receipts_are_all_in_the_database_when_observe_returns(team):
    config = _config()

    outcome = observe(teams.swarm(InMemorySaver()), {"messages": [HumanMessage("hi")]}, config, verifier=PASS)

    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    parts = set(Receipt.objects.filter(handoff=handoff).values_list("part", flat=True))
    assert outcome.status == "complete"
    assert parts == {"created", "reduced", "destination", "verification", "final_status"}
    assert (handoff.final_status, handoff.verdict, handoff.run.status) == ("complete", "HEALTHY", "complete")
    assert writer.stats()["queued"] == 0


def test_a_full_buffer_blocks_the_agent_and_counts_it_rather_than_dropping():
    gate = threading.Event()
    sink = CapturingSink(gate)
    buffer = writer.Writer(sink, capacity=2, max_batch=1, linger=0)
    buffer.submit(_part("h-1", "created"))
    _wait_until(lambda: buffer.stats()["queued"] == 0)  # taken by the writer, which waits at the gate
    buffer.submit(_part("h-2", "created"))
    buffer.submit(_part("h-3", "created"))
    late = threading.Thread(target=buffer.submit, args=(_part("h-4", "created"),))
    late.start()
    late.join(0.3)
    blocked_while_full = late.is_alive()

    gate.set()
    late.join(5)
    buffer.stop()

    assert blocked_while_full
    assert [e.handoff_id for e in sink.entries] == ["h-1", "h-2", "h-3", "h-4"]  # first in, first written
    assert buffer.stats()["blocked"] == 1
    assert buffer.stats()["dropped"] == 0


class TimedSink(CapturingSink):
    """Notes when each batch was written."""

    def __init__(self) -> None:
        super().__init__()
        self.written_at: list[float] = []

    def write(self, entries) -> None:
        self.written_at.append(time.monotonic())
        super().write(entries)


# An observed scripted two-agent run (bench/overhead.py) from its first entry to its last: 15-25 ms median on two
# loaded cores. Its entries are written after it returns, in one batch, instead of competing with it for the GIL.
QUICK_RUN_SECONDS = 0.04


def test_a_quick_runs_entries_wait_for_company_and_are_written_as_one_batch_after_it():
    sink = TimedSink()
    buffer = writer.Writer(sink)  # the process writer's linger
    first_submitted = time.monotonic()
    for part in ("created", "reduced", "destination"):
        buffer.submit(_part("h-quick", part))
    _wait_until(lambda: sink.batches)
    buffer.stop()

    assert [[entry.part for entry in batch] for batch in sink.batches] == [["created", "reduced", "destination"]]
    assert sink.written_at[0] - first_submitted >= QUICK_RUN_SECONDS


@pytest.mark.django_db(transaction=True)
def test_a_database_outage_mid_batch_keeps_the_entries_and_writes_them_later(contracts):
    buffer = writer.Writer(FlakySink(outages=2), max_backoff=0.05)
    for part in ("created", "reduced", "destination"):
        buffer.submit(_part("h-out", part))

    assert buffer.flush(10)
    buffer.stop()

    assert sorted(Receipt.objects.filter(handoff__handoff_id="h-out").values_list("part", flat=True)) == [
        "created",
        "destination",
        "reduced",
    ]
    assert buffer.stats()["failed"] == 2
    assert buffer.stats()["dropped"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_bad_entry_does_not_lose_its_neighbours_and_becomes_evidence_dropped(contracts):
    # A value of the wrong type (spec v1.3: an unsafe string is only redacted, never a bad entry).
    bad = {**healthy_parts()["created"], "receiver": {"path": "/etc/sales"}}
    buffer = writer.Writer(writer.LocalSink(), linger=0.2)  # long enough for one batch of all three
    buffer.submit(_part("h-good", "created"))
    buffer.submit(_part("h-bad", "created", bad))
    buffer.submit(ReportEntry("op-w", "triage", MiddlewareReport.Kind.TOOL_ERROR, {"tool": "lookup"}, "t-1"))

    assert buffer.flush(10)
    buffer.stop()

    assert Handoff.objects.filter(handoff_id="h-good").exists()
    assert not Handoff.objects.filter(handoff_id="h-bad").exists()
    reports = dict(MiddlewareReport.objects.filter(run__operation_id="op-w").values_list("kind", "agent"))
    dropped = MiddlewareReport.objects.get(kind="evidence_dropped")
    assert reports == {"tool_error": "triage", "evidence_dropped": "triage"}
    assert dropped.detail == {"part": "created", "field": "created.receiver"}
    assert "/etc" not in repr(dropped.detail)


def test_in_remote_mode_a_swarm_handoff_reaches_the_sink_and_no_database_is_touched(settings, monkeypatch):
    settings.SIDEWISP_REMOTE_URL = "https://sidewisp.example"
    sink = CapturingSink()
    writer.shutdown()
    monkeypatch.setattr(writer, "sink", lambda: sink)
    touched: list[str] = []

    def refuse(self):
        touched.append(threading.current_thread().name)
        msg = "remote mode must not touch a database"
        raise RuntimeError(msg)

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refuse)
    config = _config()
    try:
        outcome = observe(teams.swarm(InMemorySaver()), {"messages": [HumanMessage("hi")]}, config, verifier=PASS)
    finally:
        writer.shutdown()

    parts = [(e.part, e.handoff_id is None) for e in sink.entries if isinstance(e, PartEntry)]
    assert touched == []
    assert outcome.status == "complete"
    assert parts == [
        ("created", False),
        ("reduced", False),
        ("destination", False),
        ("verification", True),  # for the run's latest handoff, which only the server knows
        ("final_status", True),
    ]
    assert {e.operation_id for e in sink.entries} == {config["configurable"]["operation_id"]}


def test_a_forked_child_starts_its_own_writer():
    buffer = writer.get()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's writer thread does not exist here
        os.write(write, b"fresh" if package_writer._writer is None else b"inherited")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"fresh"
    assert writer.get() is buffer


def test_a_batch_is_written_with_the_garbage_collector_paused_then_resumed(contracts, monkeypatch):
    # Issue 32 §2: collections set off by a batch's short-lived objects cost about a tenth of the writer's CPU.
    collecting: list[bool] = []
    real_apply = database.intake.apply
    monkeypatch.setattr(
        database.intake, "apply", lambda entries: collecting.append(gc.isenabled()) or real_apply(entries)
    )

    writer.LocalSink().write([_part("h-gc", "created")])
    resumed = gc.isenabled()
    gc.disable()  # someone else's choice: a batch leaves it as it was
    try:
        writer.LocalSink().write([_part("h-gc", "reduced")])
        left_off = not gc.isenabled()
    finally:
        gc.enable()

    assert collecting == [False, False]
    assert resumed and left_off
    assert Receipt.objects.filter(handoff__handoff_id="h-gc").count() == 2


def test_a_child_forked_while_a_batch_is_written_collects_garbage(contracts, monkeypatch):
    found: list[bytes] = []

    def fork_meanwhile(entries):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the batch that paused the collector goes on in the parent only
            os.write(write, b"on" if gc.isenabled() else b"off")
            os._exit(0)
        os.waitpid(pid, 0)
        found.append(os.read(read, 16))

    monkeypatch.setattr(database.intake, "apply", fork_meanwhile)

    writer.LocalSink().write([_part("h-gc-fork", "created")])

    assert found == [b"on"]
    assert gc.isenabled()
