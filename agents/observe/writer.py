"""The evidence writer on the server: the agent package's writer (`sidewisp_agent.writer`) with the database store.

One implementation: the queue, its batching, back-pressure, retries and loss reports are the package's (read its
docstring); an app elsewhere runs the same writer on the HTTP store. What the server adds is installed when Django
starts (`install`, from `agents.apps`):

- the store: `LocalSink`, this process's database (one transaction and one event publish per batch), or, in
  remote mode (`SIDEWISP_REMOTE_URL`), a Sidewisp server (`agents.observe.remote.RemoteSink`);
- its queue's bounds: `SIDEWISP_WRITER_CAPACITY` and `SIDEWISP_WRITER_WAIT_SECONDS` (settings);
- the hooks: the writer thread closes its own connection as it ends, a broken connection is discarded and a
  database outage retried, a caller inside a transaction (`atomic`) gets its entries written in that
  transaction, and the test-only fault injection (`agents.host.faults`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from django.conf import settings
from django.db import connection, transaction
from sidewisp_agent import store
from sidewisp_agent import writer as agent_writer
from sidewisp_agent.config import WriterLimits
from sidewisp_agent.writer import (  # noqa: F401 - the server's callers read these as writer.X
    FLUSH_TIMEOUT,
    LINGER_SECONDS,
    MAX_ATTEMPTS,
    MAX_BACKOFF_SECONDS,
    MAX_BATCH,
    Sink,
    Stats,
    Writer,
    dropped_report,
    flush,
    get,
    settle,
    shutdown,
    stats,
    submit,
    submit_all,
)

from agents.host import faults
from agents.observe import parking
from agents.observe.transient import TRANSIENT
from receipts.ingest import broadcast, intake, recording

logger = logging.getLogger(__name__)


class LocalSink:
    """This process's database: one transaction per batch, its events published once after commit."""

    remote = False

    def write(self, entries: Sequence[intake.Entry]) -> None:
        # As a local app: a run a remote source created is not this app's (issue 19).
        with broadcast.batched(), transaction.atomic(), recording.writing_as(""):
            intake.apply(entries)
        if not connection.in_atomic_block:
            ended = {entry.operation_id for entry in entries if isinstance(entry, intake.RunEntry) and entry.final}
            _learn_stops({entry.operation_id for entry in entries} - ended)


def _learn_stops(operation_ids: set[str]) -> None:
    """After a batch committed: the stop flags of the runs this process drives among its entries
    (`agents.observe.parking`; not those whose observer has ended), read before the writer says the batch is
    stored. Never fails the batch."""
    try:
        parking.refresh(operation_ids)
    except Exception as exc:  # noqa: BLE001 - the batch is committed; the observer reads the flag itself later
        logger.warning("stop flags not read after a batch: %s", type(exc).__name__)


def remote() -> bool:
    """Receipts go to a Sidewisp server (`SIDEWISP_REMOTE_URL`), not to a local database."""
    return bool(getattr(settings, "SIDEWISP_REMOTE_URL", ""))


def sink() -> Sink:
    if remote():
        from agents.observe.remote import RemoteSink  # only a remote agent needs the HTTP client

        return RemoteSink()
    return LocalSink()


def _discard_broken_connection(exc: BaseException) -> None:
    # A terminated connection fails every later query: the next try opens a fresh one.
    if isinstance(exc, TRANSIENT) and not connection.in_atomic_block:
        with contextlib.suppress(Exception):
            connection.close()


def install() -> None:
    """Make the server's store and hooks the agent package's (Django's start: `agents.apps`)."""
    store.install(lambda: sink())  # looked up at each call: a test may replace `sink`
    agent_writer.limit(WriterLimits(settings.SIDEWISP_WRITER_CAPACITY, settings.SIDEWISP_WRITER_WAIT_SECONDS))
    hooks = store.hooks
    hooks.submitted = lambda entry: faults.submitted(entry)  # tests/faults only (off unless SIDEWISP_FAULT_KILL)
    hooks.stored = lambda entries: faults.stored(entries)
    hooks.thread_ended = lambda: connection.close()  # the writer thread's own (a proxy: read in that thread)
    hooks.failed = _discard_broken_connection
    hooks.outage = lambda exc: isinstance(exc, TRANSIENT)
    hooks.in_callers_transaction = lambda: not remote() and connection.in_atomic_block
