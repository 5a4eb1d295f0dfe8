"""The evidence writer on the server: the agent package's writer (`sidewisp_agent.writer`) with the database store.

One implementation: the queue, its batching, back-pressure, retries and loss reports are the package's (read its
docstring); an app elsewhere runs the same writer on the HTTP store. What the server adds is installed when Django
starts (`install`, from `agents.apps`):

- the store: `agents.observe.database.LocalSink`, this process's database (one transaction and one event
  publish per batch, and what the recording side reads back of its runs), or, in
  remote mode (`SIDEWISP_REMOTE_URL`), a Sidewisp server (`agents.observe.remote.RemoteSink`);
- its queue's bounds: `SIDEWISP_WRITER_CAPACITY` and `SIDEWISP_WRITER_WAIT_SECONDS` (settings);
- the hooks: the writer thread closes its own connection as it ends, a broken connection is discarded and a
  database outage retried, a caller inside a transaction (`atomic`) gets its entries written in that
  transaction, and the test-only fault injection (`agents.host.faults`).
"""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.db import connection
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
from agents.observe.database import LocalSink
from agents.observe.transient import TRANSIENT


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
    hooks.thread_ended = lambda: connection.close()  # a thread of the package ends (a proxy: read in that thread)
    hooks.failed = _discard_broken_connection
    hooks.outage = lambda exc: isinstance(exc, TRANSIENT)
    hooks.in_callers_transaction = lambda: not remote() and connection.in_atomic_block
