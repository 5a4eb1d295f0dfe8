"""The evidence writer: receipts leave the agent's hot path.

The middleware and the observer `submit()` entries (`sidewisp_agent.entries`) instead of writing them. A
background thread per process (started on first use; a forked child starts its own) takes up to `MAX_BATCH`
entries at a time, in submission order, and hands them to the **sink**, the process's store
(`sidewisp_agent.store`): a Sidewisp server over HTTP (`sidewisp_agent.http.HttpStore`), or, inside the server,
its database (one transaction and one event publish per batch, on the thread's one persistent connection:
`agents.observe.writer.LocalSink`). This is OpenTelemetry's batch span processor, for evidence. A sink with
`lanes` > 1 (the server's PostgreSQL) gets that many threads, the later ones for a backlog (`sidewisp_agent.lanes`).

- **Ordering**: first in, first written (receipts and run changes alike, so a wait is stored before the run
  is marked waiting); under a backlog shared by lanes, in order within each run. `flush()` returns once
  everything submitted before it is written, `wait_for(mark)` once the first `mark` entries are. A run's
  checkpointer waits for the mark of a transfer it would save past (the observer's barrier).
- **Where a run waits** (`settle`, issue 32): `observe` returns as soon as the graph does; its receipts are
  stored after, in batches. It waits for them only before it returns a waiting outcome (an operator must see
  the wait before the app blocks on its decision) and when its caller asked for `durable=True`.
  At process exit `atexit` writes what is queued, for at most `EXIT_TIMEOUT`.
- **Back-pressure**: when `capacity` entries wait (`SIDEWISP_WRITER_CAPACITY`, `config.writer_limits`, or
  `limit()`), `submit` blocks (`stats()["blocked"]`). A buffer full for `submit_timeout` seconds
  (`SIDEWISP_WRITER_WAIT_SECONDS`) drops the entry, and every entry after it until the writer makes room,
  without waiting again: never an unbounded stall. Each is logged, counted (`stats()["dropped"]`), and its run
  gets an `evidence_dropped` report once there is room (the first MAX_BATCH such entries between two batches,
  and the first of each other run, up to MAX_BATCH more: never a silent loss).
- **Failures**: a batch the sink refuses is retried with backoff (an outage keeps the entries until written).
  A batch with an entry that does not validate (`BundleError`) is written entry by entry; the bad one becomes
  an `evidence_dropped` report naming the part and the field (a server's refusal, HTTP 400, says so). An
  entry that keeps failing otherwise is dropped after `MAX_ATTEMPTS`, logged, counted, and reported on its run
  with the error's class or HTTP status: nothing is dropped in silence unless the report cannot be written
  either (then the log line and the count are all).
- A caller inside a database transaction (`atomic`, on the server: its store's `hooks.in_callers_transaction`)
  gets its entries written in that transaction, on its own thread: a thread of ours could not see what the
  transaction has not committed.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TypedDict

from . import entries as intake
from . import losses, store
from .bundle import BundleError
from .config import ConfigurationError, WriterLimits, writer_limits
from .entries import RunNotOwned
from .lanes import Queue
from .losses import dropped_report  # noqa: F401 - read as writer.dropped_report
from .store import hooks

logger = logging.getLogger(__name__)

MAX_BATCH = 200  # entries per transaction
THREAD = "sidewisp-writer"  # every lane's thread's name
# How long a small batch waits for company (not when someone flushes or waits for a mark): long enough for a
# quick run's entries to land in one batch, written after the run returns instead of competing with it for the
# GIL while it runs (issue 32); short beside what a live page may take (300 ms).
LINGER_SECONDS = 0.05
FLUSH_TIMEOUT = 30.0
EXIT_TIMEOUT = 5.0  # how long process exit waits for what is queued
MAX_ATTEMPTS = 3  # tries of an entry whose failure is not an outage
MAX_BACKOFF_SECONDS = 5.0
RETRYABLE: tuple[type[BaseException], ...] = (OSError, TimeoutError)
Sink = store.Store  # what a writer writes to: its `write`, and its `lanes` when it has more than one


def sink() -> Sink:
    """The process's store (`sidewisp_agent.store.current()`): the server's database, or a Sidewisp server."""
    return store.current()


class Stats(TypedDict):
    submitted: int
    written: int
    batches: int
    blocked: int  # submits that had to wait for room
    failed: int  # sink calls that raised
    dropped: int  # entries given up on (each logged)
    queued: int


class Writer:
    """A bounded FIFO buffer and the threads that drain it into `sink` in batches: one per lane
    (`sidewisp_agent.lanes`; `lanes`, else the sink's `lanes`, else one)."""

    def __init__(
        self,
        sink: Sink,
        *,
        capacity: int = WriterLimits.capacity,
        max_batch: int = MAX_BATCH,
        linger: float = LINGER_SECONDS,
        submit_timeout: float = WriterLimits.wait_seconds,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        lanes: int | None = None,
    ) -> None:
        if capacity < 1 or max_batch < 1:
            msg = "capacity and max_batch must be at least 1"
            raise ValueError(msg)
        self.sink = sink
        self.capacity, self.max_batch, self.linger = capacity, max_batch, linger
        self.submit_timeout, self.max_backoff = submit_timeout, max_backoff
        self.lanes = max(1, lanes or getattr(sink, "lanes", 1))
        self._queue = Queue()  # the entries waiting, and those each lane is writing: a flush waits for its mark
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._flushing = 0
        self._lane = threading.local()  # `reporting_loss`: this lane writes the reports of entries given up on
        self._overflowing = False  # an entry was dropped for a full buffer and no room was made since
        self._overflowed: list[intake.Entry] = []  # dropped by a full buffer, reported once there is room
        self._counts = dict.fromkeys(("submitted", "written", "batches", "blocked", "failed", "dropped"), 0)

    def submit(self, entry: intake.Entry) -> bool:
        """Queue `entry` for writing; False only when it was dropped (buffer full too long; logged)."""
        with self._cond:
            if self._stopping:
                msg = "the evidence writer is stopped"
                raise RuntimeError(msg)
            if not self._threads:
                for lane in range(self.lanes):
                    self._threads.append(threading.Thread(target=self._run, args=(lane,), name=THREAD, daemon=True))
                    self._threads[-1].start()
            if len(self._queue) >= self.capacity:
                self._counts["blocked"] += 1
                # Once the buffer stayed full for the whole wait, later entries do not wait again until there is room.
                has_room = lambda: len(self._queue) < self.capacity  # noqa: E731
                room = not self._overflowing and self._cond.wait_for(has_room, self.submit_timeout)
                if not room:
                    self._overflow(entry)
                    return False
            self._queue.append(self._counts["submitted"], entry)
            self._counts["submitted"] += 1
            if len(self._queue) == 1 or self._full_batch():
                self._cond.notify_all()  # the writer waits for a first entry or a full batch, not for each entry
        return True

    def limit(self, limits: WriterLimits) -> None:
        """Take new bounds (a submitter waiting for room sees the new capacity at once)."""
        with self._cond:
            self.capacity, self.submit_timeout = limits.capacity, limits.wait_seconds
            self._cond.notify_all()

    def _full_batch(self) -> bool:
        """Enough queued to stop lingering: a whole batch, or a full buffer (a submitter may be waiting for room)."""
        return len(self._queue) >= min(self.max_batch, self.capacity)

    def _overflow(self, entry: intake.Entry) -> None:
        """Drop `entry` for a full buffer: logged, counted, and kept for its run's loss report (bounded)."""
        self._overflowing = True
        self._counts["dropped"] += 1
        logger.error("%s entry dropped: the evidence buffer stayed full", getattr(entry, "part", "report"))
        losses.keep(self._overflowed, entry, MAX_BATCH)

    def flush(self, timeout: float | None = FLUSH_TIMEOUT) -> bool:
        """Wait until every entry submitted before this call is written (or given up); False on timeout."""
        return self.wait_for(self.mark(), timeout)

    def mark(self) -> int:
        """How many entries were submitted so far: `wait_for(mark)` waits for exactly those."""
        with self._cond:
            return self._counts["submitted"]

    def wait_for(self, mark: int, timeout: float | None = FLUSH_TIMEOUT) -> bool:
        """Wait until the first `mark` entries submitted are written (or given up); False on timeout."""
        if threading.current_thread() in self._threads:
            return True  # the writer itself (a signal receiver) cannot wait for itself
        with self._cond:
            if self._written_through() >= mark:
                return True
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._written_through() >= mark, timeout)
            finally:
                self._flushing -= 1

    def stop(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Write what is queued (within `timeout`), then end the thread and close its connection."""
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def stats(self) -> Stats:
        with self._cond:
            return Stats(**self._counts, queued=len(self._queue))

    # --- the writer thread ---------------------------------------------------

    def _written_through(self) -> int:
        return self._queue.written_through(self._counts["submitted"])

    def _run(self, lane: int) -> None:
        try:
            while (batch := self._next_batch(lane)) is not None:
                self._write(batch)
                with self._cond:
                    self._queue.written(lane)
                    self._cond.notify_all()
                    overflowed, self._overflowed = self._overflowed, []
                if overflowed:
                    self._report_loss(overflowed, losses.BUFFER_FULL)
        finally:
            hooks.thread_ended()  # the server closes this thread's own database connection

    def _next_batch(self, lane: int) -> list[intake.Entry] | None:
        """The next batch for `lane` (`Queue.take`), None once the writer stops and nothing is queued."""
        ready = lambda: self._queue.ready(lane, self.max_batch)  # noqa: E731
        with self._cond:
            batch: list[intake.Entry] = []
            while not batch:  # another lane may take what this one lingered for
                self._cond.wait_for(lambda: ready() or (self._stopping and not self._queue))
                if not ready():
                    return None
                if not self._full_batch() and not self._flushing and not self._stopping:
                    self._cond.wait_for(lambda: self._full_batch() or self._flushing or self._stopping, self.linger)
                batch = self._queue.take(lane, self.max_batch)
            self._overflowing = False
            self._cond.notify_all()  # room for blocked submitters
            return batch

    def _write(self, batch: list[intake.Entry]) -> None:
        attempt = 0
        while True:
            try:
                self.sink.write(batch)
            except BundleError as exc:
                self._split(batch, exc)
                return
            except Exception as exc:  # noqa: BLE001 - the writer outlives any sink failure
                attempt += 1
                self._count("failed")
                hooks.failed(exc)  # the server discards a broken database connection
                if not _outage(exc) and attempt >= MAX_ATTEMPTS:
                    self._split(batch, exc)
                    return
                delay = min(0.05 * 2**attempt, self.max_backoff)
                logger.warning("%d entries not written (%s); retry in %.2f s", len(batch), type(exc).__name__, delay)
                time.sleep(delay)
                continue
            hooks.stored(batch)  # the server's fault injection in its tests (a no-op unless set)
            with self._cond:
                self._counts["written"] += len(batch)
                self._counts["batches"] += 1
            return

    def _split(self, batch: list[intake.Entry], exc: Exception) -> None:
        """Write a refused batch entry by entry: one bad entry must not lose its neighbours. A lone entry
        that does not validate is replaced by its `evidence_dropped` report; any other is given up."""
        if len(batch) > 1:
            for entry in batch:
                self._write([entry])
        elif isinstance(exc, RunNotOwned):
            self._count("dropped")  # another side's run (issue 19): recording logged the refusal; no report there
        elif isinstance(exc, BundleError) and (replacement := losses.replacement(batch[0], exc)) is not None:
            self._write([replacement])
        else:
            self._give_up(batch, exc)

    def _give_up(self, batch: list[intake.Entry], exc: BaseException) -> None:
        self._count("dropped", len(batch))
        logger.error("evidence entry dropped after %d attempts: %s", MAX_ATTEMPTS, losses.reason(exc))
        self._report_loss(batch, exc)

    def _report_loss(self, batch: list[intake.Entry], cause: BaseException | str) -> None:
        if getattr(self._lane, "reporting_loss", False) or not (reports := losses.loss_reports(batch, cause)):
            return  # a loss report that is itself lost: the log line and the count are all
        self._lane.reporting_loss = True
        try:
            self._write(reports)
        finally:
            self._lane.reporting_loss = False

    def _count(self, name: str, n: int = 1) -> None:
        with self._cond:
            self._counts[name] += n


def _outage(exc: BaseException) -> bool:
    """The database or the server is away: retried for as long as it takes (a sink may mark its own errors)."""
    return isinstance(exc, RETRYABLE) or bool(getattr(exc, "transient", False)) or hooks.outage(exc)


# --- this process's writer ---------------------------------------------------------

_lock = threading.Lock()
_writer: Writer | None = None
_limits: WriterLimits | None = None  # set by `limit()`; else the environment's (`writer_limits`)


def get() -> Writer:
    """This process's writer on `sink()`, created on first use with its limits."""
    global _writer
    with _lock:
        if _writer is None:
            limits = _limits or writer_limits()
            _writer = Writer(sink(), capacity=limits.capacity, submit_timeout=limits.wait_seconds)
        return _writer


def limit(limits: WriterLimits) -> None:
    """Bound this process's queue with `limits` instead of the environment's (a Sidewisp server's settings)."""
    global _limits
    with _lock:
        _limits = limits
        if _writer is not None:
            _writer.limit(limits)


def submit(entry: intake.Entry) -> bool:
    """Hand one entry to this process's writer (see the module docstring); never raises for the entry."""
    hooks.submitted(entry)  # the server's fault injection in its tests (a no-op unless set)
    if hooks.in_callers_transaction():
        return _write_in_callers_transaction([entry])
    try:
        return get().submit(entry)
    except ConfigurationError as exc:
        _say_once(exc)  # never an exception inside the user's graph: the log says what to set
        return False


_said: set[str] = set()


def _say_once(exc: ConfigurationError) -> None:
    if str(exc) not in _said:
        _said.add(str(exc))
        logger.error("Sidewisp evidence not recorded: %s", exc)


def submit_all(entries: Sequence[intake.Entry]) -> None:
    for entry in entries:
        submit(entry)


def flush(timeout: float | None = FLUSH_TIMEOUT) -> bool:
    """Wait until everything submitted so far is written; False (and a log line) on timeout."""
    writer = _writer
    if writer is None:
        return True
    written = writer.flush(timeout)
    if not written:
        logger.warning("evidence not written within %s s: %s", timeout, writer.stats())
    return written


def settle(*, waiting: bool = False, durable: bool = False) -> bool:
    """As an observed run returns: wait for its evidence only where it matters (issue 32); False on timeout.

    A waiting run's wait is stored before its caller learns of it (an operator must see the wait before the
    app blocks on the decision); a caller that asked for `durable` gets every run stored. Any other run
    returns at once, its receipts written after it in batches (a crash before then loses them).
    """
    return flush() if waiting or durable else True


def stats() -> Stats:
    writer = _writer
    return writer.stats() if writer is not None else Stats(**dict.fromkeys(Stats.__annotations__, 0))


def shutdown(timeout: float = FLUSH_TIMEOUT) -> None:
    """Write what is queued and stop the thread (process exit, test teardown); the next submit starts anew."""
    global _writer
    with _lock:
        writer, _writer = _writer, None
    if writer is not None:
        writer.stop(timeout)


def _write_in_callers_transaction(entries: list[intake.Entry]) -> bool:
    flush()  # in order: what the writer holds goes first
    try:
        sink().write(entries)  # the server's database: a savepoint in the caller's transaction
    except RunNotOwned:
        return False  # another side's run (issue 19): recording logged the refusal
    except BundleError as exc:
        replacement = losses.replacement(entries[0], exc)
        return replacement is not None and _write_in_callers_transaction([replacement])
    except Exception as exc:  # noqa: BLE001 - recording must never raise into the user's graph
        logger.warning("evidence entry not written: %s", type(exc).__name__)
        return False
    return True


def _forget_after_fork() -> None:
    global _writer, _lock
    _writer, _lock = None, threading.Lock()  # the parent's thread does not exist in the child


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(shutdown, EXIT_TIMEOUT)
