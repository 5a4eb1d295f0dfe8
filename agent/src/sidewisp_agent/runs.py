"""The run's lifecycle as the observer hands it to the writer: its start, its stop flag, parking and final status.

Every change is a `sidewisp_agent.entries.RunEntry` in the writer's FIFO, after the run's receipts
(the server's `receipts.ingest.lifecycle` applies it), so a wait is stored before the run shows as waiting. A
store elsewhere (`store.remote`) keeps its runs' lifecycle itself: no run entry is sent there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from langgraph.types import Command

from . import bundle, elsewhere, evidence, parking, store, writer
from .entries import RunEntry
from .kinds import RunStatus
from .outcomes import Policy
from .waits import UNREAD, declined_by, resolution_of, resume_token_id

logger = logging.getLogger(__name__)


def required_operation_id(config: dict) -> str:
    """The run's operation id from `config` (its thread id when it names none); ValueError without either."""
    operation_id = evidence.operation_id_of(config)
    if operation_id is None:
        msg = "config needs configurable.operation_id or configurable.thread_id"
        raise ValueError(msg)
    return operation_id


@dataclass(frozen=True)
class Start:
    """How a run's start went: parked, or driven (with what `verify` needs to know of its waits)."""

    parked: bool  # an operator stopped the run: it is not driven
    declined: object = UNREAD  # the run's latest decided wait's resolution when declined, when known


def begin(operation_id: str, config: dict, graph_input: Any, policy: Policy) -> Start:
    """Read the run's stop flag (the database is the truth at every start and resume) and hand its start
    to the writer: created when new, its waits resolved on a resume, running; parked when stopped.

    One indexed query on the caller's thread (two for an existing run that is not resumed and has a
    verifier: its latest decided wait); the run's writes go to the writer, in the receipts' FIFO.
    """
    # Unread (the database away): driven as not stopped, as observation never stops the observed.
    exists, is_stopped = evidence.guarded(operation_id, "run", partial(_stop_flag, operation_id)) or (True, False)
    configurable = config.get("configurable") or {}
    thread_id = str(configurable.get("thread_id") or operation_id)
    # issue 22 §2: `configurable.graph_name` names the graph, whose team owns the run (receipts.org.teams).
    graph = _graph_name(configurable.get("graph_name"))
    if is_stopped:
        logger.info("run %s parked: auto-continue stopped", operation_id)
        submit_run(operation_id, RunStatus.PARKED, thread_id=thread_id, graph=graph)
        return Start(parked=True)
    resumed = None
    declined: object = None
    if isinstance(graph_input, Command) and graph_input.resume is not None:
        decided = resolution_of(graph_input.resume)
        resumed = {resume_token_id(operation_id, key) if key is not None else None: v for key, v in decided.items()}
        declined = declined_by(decided)
        elsewhere.remember_resume(operation_id, declined)
    elif exists and policy.verifier is not None:
        declined = UNREAD  # decided in an earlier call: read when the verifier runs
    submit_run(operation_id, RunStatus.RUNNING, thread_id=thread_id, resumed=resumed, graph=graph)
    return Start(parked=False, declined=declined)


def _stop_flag(operation_id: str) -> tuple[bool, bool]:
    """(the run exists, an operator stopped it), read from the store and remembered (`parking`)."""
    read_at = time.monotonic()
    flag = store.current().auto_continue(operation_id)
    parking.learn({operation_id: flag is False}, read_at)
    return flag is not None, flag is False


def submit_run(operation_id: str, status: str, **change: Any) -> None:
    """Hand a change of the run's lifecycle to the writer (`receipts.ingest.lifecycle`), after its receipts; a store
    elsewhere keeps its runs' lifecycle itself."""
    if not store.remote():
        writer.submit(RunEntry(operation_id, status, **change))


def record_final(operation_id: str, status: str, attempt: str) -> None:
    evidence.submit_outcome(operation_id, "final_status", status, attempt=f"{status}-{attempt}")


def _graph_name(value: object) -> str:
    """The observed run's graph name, or "" (none given, or not a name: logged by class, never by value)."""
    if value is None:
        return ""
    try:
        return bundle.parse_name(value, "graph_name")[:100]
    except bundle.BundleError:
        logger.warning("configurable.graph_name is not a name; the run is recorded without one")
        return ""


def parked_now(operation_id: str) -> bool:
    """Before a root step: an operator stopped the run (from memory; the database when that is stale).

    The run is then left at its last checkpoint (durability "sync") before the step starts, parked;
    resuming auto-continue drives it on from there.
    """
    is_stopped = parking.stopped(operation_id)
    if is_stopped is None:
        is_stopped = bool(evidence.guarded(operation_id, "run", partial(evidence.run_orm, parking.read, operation_id)))
    return is_stopped and _park(operation_id)


async def aparked_now(operation_id: str) -> bool:
    """`parked_now` for `aobserve`: a database read, when due, off the event loop."""
    is_stopped = parking.stopped(operation_id)
    if is_stopped is None:
        read = partial(evidence.arun_orm, parking.read, operation_id)
        try:
            is_stopped = await read()
        except Exception as exc:  # noqa: BLE001 - observation never breaks the observed graph
            logger.warning("run %s: stop flag not read: %s", operation_id, type(exc).__name__)
            is_stopped = False
    return is_stopped and await asyncio.to_thread(_park, operation_id)


def _park(operation_id: str) -> bool:
    logger.info("run %s parked: auto-continue stopped", operation_id)
    submit_run(operation_id, RunStatus.PARKED, final=True)
    return True


@dataclass
class Applied:
    """A checkpointed run's applied transfers: their `reduced` is stored before the next root step starts.

    The crash promise of "Evidence after a crash": a worker killed in the step after a transfer leaves the
    resumed run a checkpoint history from which `sidewisp_agent.reconcile` re-derives what that step left unstored;
    the transfer's `reduced` (submitted once the parent saved the step that applied it) is not among it. So
    the step after a transfer waits for the writer to reach the mark after that `reduced` (a wait only in
    steps that follow a transfer, only with a checkpointer). A run without one has no history to resume
    from and never waits here.
    """

    checkpointed: bool
    mark: int | None = None

    def submit(self, entries: list) -> None:
        writer.submit_all(entries)
        if self.checkpointed and any(getattr(entry, "part", None) == "reduced" for entry in entries):
            self.mark = writer.get().mark()

    def due(self) -> bool:
        return self.mark is not None

    def stored_before_the_step(self) -> None:
        if self.mark is not None:
            mark, self.mark = self.mark, None
            writer.get().wait_for(mark)
