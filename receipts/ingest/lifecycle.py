"""An observed run's lifecycle, applied by the evidence writer in the same FIFO as the run's receipts.

The observer (`sidewisp_agent.observer`) hands its run changes over as `receipts.ingest.intake.RunEntry` instead of
writing them on the agent's thread: the run created or found when `observe` starts (the waits a
resume decided marked resolved, its pending call cleared), its status set running, waiting, parked,
queued for a retry or ended, and a wait's pending call. Entries are written in submission order, so
a wait's receipt is stored before (or with) the status that says the run waits, and the run's last
receipts before the status that ends it. Status changes go through `receipts.ingest.runs.set_status`, the
one place that changes and announces a run's status.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from receipts.ingest import batches, newrows, recording, runs
from receipts.ingest.recording import OBSERVER, digest
from receipts.ingest.sides import RunNotOwned, namespace, owner_problem
from receipts.models import Handoff, MiddlewareReport, Run
from receipts.verdicts.bundle import BundleError

if TYPE_CHECKING:  # intake applies run entries through this module
    from receipts.ingest.intake import RunEntry

logger = logging.getLogger(__name__)


def apply(entry: RunEntry) -> bool:
    """Apply one run change; True when a run was changed (False: no such run, nothing to create it from).

    Raises `RunNotOwned` for a run another side created (issue 19): nothing is written then.
    """
    run = _run(entry)
    if run is None:
        return False
    if problem := owner_problem(run):
        logger.warning("run change refused: %s", problem)
        raise RunNotOwned("operation_id", problem)
    if entry.resumed is not None:
        _resolve_waits(run, entry.resumed)
    if entry.pending_call is not None or entry.resumed is not None:
        run.pending_call = dict(entry.pending_call) if entry.pending_call is not None else None
        if not batches.changed_run(run, ["pending_call"]):
            run.save(update_fields=["pending_call", "updated_at"])
    if entry.final and entry.status != Run.Status.WAITING and not _has_handoff(run):
        detail = {"status": str(entry.status)}  # the observer's outcome: parked, failed or complete
        kind = MiddlewareReport.Kind.NO_HANDOFF
        recording.record_report(run.operation_id, OBSERVER, kind, detail, f"end-{entry.status}")
    runs.set_status(run, entry.status, error=entry.error)
    return True


def _run(entry: RunEntry) -> Run | None:
    """The entry's run; a start (it names the thread) creates it as an observed run when new."""
    current = batches.current()
    if current is not None and entry.operation_id in current.runs:
        return current.runs[entry.operation_id]  # read (or made) once per batch: the batch's receipts use it too
    if entry.thread_id is None:
        if current is not None and f"run:{entry.operation_id}" in current.absent:
            return None
        return Run.objects.for_operation(entry.operation_id, namespace()).first()
    mode, source = Run.Mode.OBSERVED, Run.Source.AGENT
    defaults = {"thread_id": entry.thread_id, "mode": mode, "source": source, "graph": entry.graph}
    # Many runs may share a thread (issue 28: a chat app's new operation id per user turn); the run is keyed by
    # the side's namespace and its operation id (issue 29 §4).
    lookup = {"source_name": namespace(), "operation_id": entry.operation_id}
    made = newrows.insert_new(Run, [Run(**lookup, **defaults)], "operation_id")  # one statement, no savepoint
    run = made[0] if made else Run.objects.get_or_create(**lookup, defaults=defaults)[0]
    if current is not None:
        current.runs[entry.operation_id] = run  # the batch's later receipts record into this row
        current.absent.discard(f"run:{entry.operation_id}")
        if made:
            current.made.add(run.pk)
    return run


def _resolve_waits(run: Run, resumed: dict) -> None:
    """Mark the run's open waits resolved with the resume's decision (by resume token, else for all)."""
    for handoff in _open_waits(run):
        token = (handoff.wait_part or {}).get("resume_token_id")
        wait = {**handoff.wait_part, "resolved": True, "resolution": resumed.get(token, resumed.get(None))}
        try:
            recording.record(
                handoff_id=handoff.handoff_id,
                operation_id=run.operation_id,
                part="wait",
                value=wait,
                attempt=f"resolved-{digest(token)}",
            )
        except BundleError as exc:  # the wait stays open, which is the truth; the run still changes
            detail = {"part": "wait", "field": exc.field[:200]}
            kind = MiddlewareReport.Kind.EVIDENCE_DROPPED
            recording.record_report(run.operation_id, OBSERVER, kind, detail, f"drop-{digest('wait', exc.field)}")


def _open_waits(run: Run) -> list[Handoff]:
    """The run's handoffs with an open wait: this batch's as it holds them (their rows are written at its end),
    the others as stored."""
    current = batches.current()
    mine = [handoff for handoff in (current.handoffs.values() if current else ()) if handoff.run_id == run.pk]
    stored = run.handoffs.filter(wait_open=True).exclude(pk__in=[handoff.pk for handoff in mine])
    found = [*(handoff for handoff in mine if handoff.wait_open), *stored]
    return sorted(found, key=lambda handoff: handoff.pk)


def _has_handoff(run: Run) -> bool:
    current = batches.current()
    if current is not None and any(handoff.run_id == run.pk for handoff in current.handoffs.values()):
        return True  # one of this batch's
    return Handoff.objects.filter(run=run).exists()
