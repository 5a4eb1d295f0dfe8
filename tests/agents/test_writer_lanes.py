"""The evidence writer's lanes (issue 32 §2): under a backlog a second thread writes its own batches beside the
first, never two batches of one run at once, each run's entries in the order they were submitted, and a flush
still waits for everything before its mark."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from sidewisp_agent import writer
from sidewisp_agent.elsewhere import Elsewhere

from agents.observe import database
from receipts.ingest.intake import PartEntry, ReportEntry
from receipts.models import Receipt
from tests.factories import healthy_parts

BATCH = 4


class LanedSink(Elsewhere):
    """A store that takes two batches at once; a batch holding an entry of a run in `held` waits for `gate`."""

    lanes = 2

    def __init__(self, held: set[str] = frozenset()) -> None:
        self.held, self.gate = set(held), threading.Event()
        self.lock = threading.Lock()
        self.writing: dict[int, set[str]] = {}  # thread id -> runs of the batch it is writing
        self.overlaps: list[set[str]] = []  # runs seen in two lanes' batches at once (must stay empty)
        self.concurrent = 0  # batches that began while another lane was writing
        self.batches: list[tuple[str, list]] = []  # (thread name and id, entries) in the order they ended

    def write(self, entries) -> None:
        runs = {entry.operation_id for entry in entries}
        me = threading.get_ident()
        with self.lock:
            others = [r for thread, rs in self.writing.items() if thread != me for r in rs]
            self.concurrent += bool(others)
            if overlap := runs & set(others):
                self.overlaps.append(overlap)
            self.writing[me] = runs
        try:
            if runs & self.held:
                assert self.gate.wait(10), "the test never opened the gate"
        finally:
            with self.lock:
                self.writing.pop(me)
                self.batches.append((f"{threading.current_thread().name}-{me}", list(entries)))

    def order_of(self, run: str) -> list[str]:
        return [entry.attempt for _, batch in self.batches for entry in batch if entry.operation_id == run]


def _entry(run: str, n: int) -> ReportEntry:
    return ReportEntry(run, "alice", "retry", {}, f"{n}")


def _wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_backlog_is_written_by_a_second_lane_while_the_first_waits_on_its_batch():
    sink = LanedSink(held={"op-slow"})
    buffer = writer.Writer(sink, max_batch=BATCH, linger=0)
    for n in range(BATCH):
        buffer.submit(_entry("op-slow", n))
    _wait_until(lambda: sink.writing)  # the first lane holds op-slow's batch
    for n in range(3 * BATCH):
        buffer.submit(_entry(f"op-quick-{n % 3}", n))
    # The second lane writes the other runs' backlog while the first lane's batch is still being written.
    _wait_until(lambda: len(sink.order_of("op-quick-0")) == BATCH)
    assert not sink.order_of("op-slow"), "op-slow's batch was held: nothing of it is written yet"
    assert not buffer.flush(timeout=0.05), "a flush waits for the held batch, submitted before the rest"
    sink.gate.set()
    assert buffer.flush(timeout=5)
    buffer.stop()
    assert sink.concurrent >= 1
    assert len({thread for thread, _ in sink.batches}) == 2, "two lanes, each on a thread of its own"
    assert sink.overlaps == []


def test_a_runs_entries_stay_in_one_lane_at_a_time_and_in_submission_order():
    sink = LanedSink(held={"op-a"})
    buffer = writer.Writer(sink, max_batch=BATCH, linger=0)
    buffer.submit(_entry("op-a", 0))
    _wait_until(lambda: sink.writing)  # op-a's first entry is being written (held)
    for n in range(1, 6 * BATCH):  # a backlog: op-a's later entries among op-b's
        buffer.submit(_entry("op-a" if n % 2 else "op-b", n))
    _wait_until(lambda: len(sink.order_of("op-b")) >= 2 * BATCH)
    assert sink.order_of("op-a") == [], "no lane takes op-a's later entries while its first is being written"
    sink.gate.set()
    buffer.stop()
    assert sink.overlaps == []
    assert sink.order_of("op-a") == ["0"] + [str(n) for n in range(1, 6 * BATCH, 2)]
    assert sink.order_of("op-b") == [str(n) for n in range(2, 6 * BATCH, 2)]


def test_a_writer_that_keeps_up_writes_in_one_lane_in_submission_order():
    sink = LanedSink()
    buffer = writer.Writer(sink, max_batch=BATCH, linger=0)
    for n in range(5 * BATCH):
        buffer.submit(_entry(f"op-{n % 5}", n))
        buffer.flush(timeout=5)  # never a backlog: each entry is written before the next is submitted
    buffer.stop()
    assert len({thread for thread, _ in sink.batches}) == 1
    assert [entry.attempt for _, batch in sink.batches for entry in batch] == [str(n) for n in range(5 * BATCH)]


@pytest.mark.django_db(transaction=True)
def test_the_database_sink_stores_a_backlog_in_two_lanes_as_in_one(contracts, settings):
    """On PostgreSQL; SQLite writes one transaction at a time: its sink has one lane, which stores it all."""
    entries = [
        PartEntry(f"op-lanes-{i}", f"h-lanes-{i}", part, value)
        for i in range(60)
        for part, value in [*healthy_parts().items(), ("final_status", "complete")]
    ]
    settings.SIDEWISP_WRITER_LANES = 2
    sink = database.LocalSink()
    lanes = 2 if connection.vendor == "postgresql" else 1
    assert sink.lanes == lanes
    buffer = writer.Writer(sink, max_batch=40, linger=0)
    threads = set()
    original = sink.write

    def write(batch):
        threads.add(threading.get_ident())
        original(batch)

    sink.write = write
    for entry in entries:
        buffer.submit(entry)
    buffer.stop()
    assert Receipt.objects.filter(handoff__handoff_id__startswith="h-lanes-").count() == len(entries)
    assert len(threads) == lanes, "the backlog was shared by every lane"
