"""The store port: the one object through which the recording side reaches where evidence is kept.

Everything the recording side writes (the writer's batches) or reads back (a run's stop flag, the parts its
handoffs have, the contracts, its latest declined wait, an operator's decision) goes through `Store`. An app
elsewhere uses the package's `HttpStore` (`sidewisp_agent.http`: the ingest API), whose runs are the server's
(`sidewisp_agent.elsewhere`); the Sidewisp server installs its database store when Django starts
(`agents.apps`, `agents.observe.database`), so its hosted and local observed runs run the same code.
`current()` is the installed store, else an `HttpStore` on the configured server.

Hooks the server sets, never imports of the server (`agents.observe.writer.install`), all no-ops unless set: the
writer's `submitted(entry)` and `stored(entries)` (the server's test-only fault injection), `thread_ended()` (close
the database connection of a thread of the package that ends: the writer's, a store read's worker),
`failed(exc)` and `outage(exc)` (a broken connection is discarded, a database outage retried for as long as it
takes) and `in_callers_transaction()` (write in the caller's transaction, on its thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from .bundle import Contracts
from .entries import Entry


class Store(Protocol):
    """Where the recording side writes its entries and reads back what it needs of its runs.

    Every read is one query at most; the recording side calls them off an event loop (`evidence.run_orm`).
    """

    remote: bool  # True: the runs are a server's (their lifecycle is the server's: no run entries are sent)
    # Optional: how many batches it may be given at once, each on a thread and connection of its own (the
    # writer's lanes, `sidewisp_agent.lanes`); one when absent.
    lanes: int

    def write(self, entries: Sequence[Entry]) -> None:
        """Store `entries` (all or nothing); raise on failure (`bundle.BundleError` names a refused entry)."""

    def auto_continue(self, operation_id: str) -> bool | None:
        """The run's auto-continue flag (False: an operator stopped it); None when there is no such run."""

    def stopped(self, operation_ids: Collection[str]) -> set[str]:
        """The runs among `operation_ids` an operator stopped."""

    def known_parts(self, operation_id: str) -> dict[str, set[str]]:
        """{handoff id: the parts among created, reduced and destination it has} for the run's handoffs."""

    def contracts(self) -> Contracts | None:
        """The current handoff contracts, or None when there are none to read."""

    def declined_resolution(self, operation_id: str) -> str | None:
        """`rejected` or `expired` when the run's latest decided wait was declined, else None."""

    def take_decision(self, operation_id: str, *, has_pending: bool) -> dict | None:
        """Claim the run's next decision for this app, once: `{"type", "resume", "interrupts"}` (the interrupts
        as `{"id", "value"}`, names only), or `{"type": "reopen", "reopen": {"destination", "verifier", "result",
        "token"}}`; None when there is none. ValueError, unclaimed, when it needs the pending interrupts and
        `has_pending` is False (an edit)."""


def _nothing(*_args: object) -> None:
    return None


def _no(*_args: object) -> bool:
    return False


class Hooks:
    """What the host process may hook into the writer (the server's fault injection in its tests)."""

    def __init__(self) -> None:
        self.submitted: Callable[[Entry], None] = _nothing
        self.stored: Callable[[Sequence[Entry]], None] = _nothing
        self.thread_ended: Callable[[], None] = _nothing
        self.failed: Callable[[BaseException], None] = _nothing
        self.outage: Callable[[BaseException], bool] = _no
        self.in_callers_transaction: Callable[[], bool] = _no


hooks = Hooks()
_lock = threading.Lock()
_installed: Callable[[], Store] | None = None


def install(factory: Callable[[], Store] | None) -> None:
    """Make `factory()` the recording side's store in this process (None: back to the configured HTTP store).

    A factory, not a store: the server picks its database or, in its remote mode, a server, as its settings say.
    """
    global _installed
    with _lock:
        _installed = factory


def installed() -> bool:
    return _installed is not None


def remote() -> bool:
    """The runs are a server's: the current store's `remote` (True where no store is installed)."""
    factory = _installed
    return factory is None or bool(factory().remote)


def current() -> Store:
    """The installed store, else an `HttpStore` on `configure()`/SIDEWISP_URL (ConfigurationError when unset)."""
    factory = _installed
    if factory is not None:
        return factory()
    from .http import HttpStore  # the HTTP client only where it is the store

    return HttpStore()
