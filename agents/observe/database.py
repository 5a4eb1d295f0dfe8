"""The server's store: the agent package's recording side (`sidewisp_agent`) on this process's database.

One class, `LocalSink`, answers everything the recording side writes or reads back (`sidewisp_agent.store.Store`):
its entries, in one transaction and one event publish per batch; a run's stop flag; the parts its handoffs
have (what a resumed run reconciles); the contracts; the resolution of its latest wait; and the decisions an
operator made on it. `agents.observe.writer.install` makes it the package's store when Django starts; every
query is the local app's (`source_name=""`): a remote source's runs are its own (issues 19, 29 §4).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict
from functools import wraps
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from sidewisp_agent import parking
from sidewisp_agent.bundle import Contracts
from sidewisp_agent.decisions import DECISION_TYPES, PendingInterrupt
from sidewisp_agent.http import EDIT_NEEDS_PENDING
from sidewisp_agent.outcomes import DECLINED

from receipts.ingest import broadcast, intake, lastwrite, recording
from receipts.ingest.contracts import current_contracts
from receipts.ingest.recording import record_report
from receipts.models import Decision, Handoff, Receipt, Run
from receipts.workers import claims

P = ParamSpec("P")
R = TypeVar("R")
logger = logging.getLogger(__name__)
PARTS = ("created", "reduced", "destination")  # what a resumed run reconciles (sidewisp_agent.reconcile)
# One report per run, agent, kind and attempt: receipts.ingest.recording owns the rules.
add_report = record_report


def closes_own_connection(fn: Callable[P, R]) -> Callable[P, R]:
    """Close the database connection afterwards when this call opened it.

    LangGraph runs tools and hooks in short-lived executor threads; a Django
    connection opened there would otherwise stay open until garbage collection.
    A thread that already holds a connection (the worker's own) keeps it.
    """

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        opened_here = connection.connection is None
        try:
            return fn(*args, **kwargs)
        finally:
            if opened_here and not connection.in_atomic_block:
                connection.close()

    return wrapper


_pausing = threading.Lock()
_pauses = 0  # batches being written with the collector paused by `_collection_paused` (on any thread)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a batch is written (issue 32 §2).

    A batch allocates thousands of short-lived objects (rows, events, model instances), nearly all freed by
    reference counting as it ends; counted as they are allocated, they set off a collection every few hundred,
    and now and then a full one of every object of the process: about a tenth of the writer's CPU. Paused, the
    collector counts only what outlives the batch and collects it later as usual; the memory a batch holds
    meanwhile is its own (and other threads' garbage waits as long). The first batch to begin pauses it and the
    last to end resumes it; a collector that was off when no batch was being written is left alone.
    """
    global _pauses
    with _pausing:
        pausing = _pauses > 0 or gc.isenabled()
        if pausing:
            _pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if pausing:
            with _pausing:
                _pauses -= 1
                if not _pauses:
                    gc.enable()


def _resume_collection_after_fork() -> None:
    # A child forked while a batch was being written has no thread to end that batch: it collects as usual.
    global _pausing, _pauses
    if _pauses:
        gc.enable()
    _pausing, _pauses = threading.Lock(), 0


os.register_at_fork(after_in_child=_resume_collection_after_fork)


class LocalSink:
    """This process's database as the recording side's store (see the module docstring)."""

    remote = False

    @property
    def lanes(self) -> int:
        """Batches the writer may write at once, each on its own thread and connection (`sidewisp_agent.lanes`):
        `SIDEWISP_WRITER_LANES` on PostgreSQL; one on SQLite, which writes one transaction at a time."""
        return settings.SIDEWISP_WRITER_LANES if connection.vendor == "postgresql" else 1

    @_collection_paused()  # no garbage collection while a batch is written
    def write(self, entries: Sequence[intake.Entry]) -> None:
        """One transaction per batch, its events published once after commit."""
        # As a local app: a run a remote source created is not this app's (issue 19).
        with broadcast.batched(), transaction.atomic(), recording.writing_as(""), lastwrite.committing():
            intake.apply(entries)  # its runs' UPDATE goes with the COMMIT
        if not connection.in_atomic_block:
            ended = {entry.operation_id for entry in entries if isinstance(entry, intake.RunEntry) and entry.final}
            _learn_stops({entry.operation_id for entry in entries} - ended)

    def auto_continue(self, operation_id: str) -> bool | None:
        return Run.objects.for_operation(operation_id).values_list("auto_continue", flat=True).first()

    def stopped(self, operation_ids: Collection[str]) -> set[str]:
        runs = Run.objects.filter(source_name="", operation_id__in=operation_ids, auto_continue=False)
        return set(runs.values_list("operation_id", flat=True))

    @closes_own_connection
    def known_parts(self, operation_id: str) -> dict[str, set[str]]:
        flags = {part: ExpressionWrapper(Q(**{f"{part}_part__isnull": False}), BooleanField()) for part in PARTS}
        rows = Handoff.objects.filter(run__source_name="", run__operation_id=operation_id).annotate(**flags)
        return {
            row[0]: {p for p, has in zip(PARTS, row[1:], strict=True) if has}
            for row in rows.values_list("handoff_id", *PARTS)
        }

    @closes_own_connection
    def contracts(self) -> Contracts | None:
        return current_contracts()

    def declined_resolution(self, operation_id: str) -> str | None:
        waits = Receipt.objects.filter(
            handoff__run__source_name="", handoff__run__operation_id=operation_id, part="wait"
        ).order_by("-recorded_at", "-pk")
        for payload in waits.values_list("payload", flat=True)[:50]:
            if isinstance(payload, Mapping) and payload.get("resolved") is True:
                resolution = payload.get("resolution")
                return resolution if resolution in DECLINED else None
        return None

    def take_decision(self, operation_id: str, *, has_pending: bool) -> dict | None:
        run = Run.objects.for_operation(operation_id).first()
        if run is None:
            return None
        for decision in claims.unclaimed(run):
            if decision.kind == Decision.Kind.REOPEN:
                if claims.claim(decision, resumed_by="app"):
                    return {"type": decision.kind, "reopen": reopen_of(decision)}
                continue
            if decision.kind == Decision.Kind.EDIT and not has_pending:
                raise ValueError(EDIT_NEEDS_PENDING)
            if claims.claim(decision, resumed_by="app"):
                interrupts = [asdict(item) for item in remembered_interrupts(run)]
                return {"type": decision.kind, "resume": decision.as_resume(), "interrupts": interrupts}
        return None


def _learn_stops(operation_ids: set[str]) -> None:
    """After a batch committed: the stop flags of the runs this process drives among its entries
    (`sidewisp_agent.parking`; not those whose observer has ended), read before the writer says the batch is
    stored. Never fails the batch."""
    try:
        parking.refresh(operation_ids)
    except Exception as exc:  # noqa: BLE001 - the batch is committed; the observer reads the flag itself later
        logger.warning("stop flags not read after a batch: %s", type(exc).__name__)


def reopen_of(decision: Decision) -> dict[str, str]:
    """The reopen's `sidewisp_agent.reopening.reopen_command` arguments: the destination of the false-complete
    handoff works again, told which verifier failed and its result."""
    found = decision.handoff.verification_part or {}
    verifier, result = str(found.get("verifier") or "unknown"), str(found.get("result") or "fail")
    return {
        "destination": decision.handoff.receiver,
        "verifier": verifier,
        "result": result,
        "token": decision.resume_token_id,
    }


def remembered_interrupts(run: Run) -> list[PendingInterrupt]:
    """The run's pending interrupts rebuilt from `Run.pending_call` (tool names, no argument values)."""
    call = run.pending_call or {}
    tools = [name for name in str(call.get("tool") or "").split(", ") if name]
    allowed = list(call.get("allowed_decisions") or DECISION_TYPES)
    interrupts = []
    for entry in call.get("interrupts") or ():
        names, tools = tools[: entry.get("calls", 0)], tools[entry.get("calls", 0) :]
        value = {
            "action_requests": [{"name": name} for name in names],
            "review_configs": [{"action_name": name, "allowed_decisions": allowed} for name in names],
        }
        interrupts.append(PendingInterrupt(id=str(entry.get("id")), value=value))
    return interrupts


def latest_handoff(operation_id: str) -> Handoff | None:
    return (
        Handoff.objects.filter(run__source_name="", run__operation_id=operation_id).order_by("created_at", "pk").last()
    )
