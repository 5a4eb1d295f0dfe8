"""The one entry point that records a receipt part or a middleware report for a run.

minimize → validate → persist (append-only receipt + current evidence) →
classify → after commit, publish a minimized event. Validation happens before
anything is written, so bad input never leaves a half-written record.

The pieces live beside it: `batches` (one unit of work: `batch`, `prefetch`), `parts` (a part's way onto
its handoff), `settling` (settled verdicts), `sides` (whose runs a side may write) and `sequence` (event
sequence numbers). This module re-exports the names its callers read as `recording.X`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.db import IntegrityError, transaction
from django.utils import timezone
from sidewisp_agent.entries import OBSERVER, digest

from receipts.ingest import batches, broadcast, health, parts, redactions, signals
from receipts.ingest.batches import batch, prefetch  # noqa: F401
from receipts.ingest.sequence import next_seq  # noqa: F401
from receipts.ingest.settling import SETTLED, note_settlement, settle, settle_run  # noqa: F401
from receipts.ingest.sides import RunNotOwned, current_side, namespace, owner_problem, writing_as  # noqa: F401
from receipts.models import Handoff, MiddlewareReport, Run
from receipts.verdicts import bundle
from receipts.verdicts.bundle import (
    BundleError,
    identifier_problem,
    parse_report_detail,
    parse_required_identifier,
    redacted_fields,
)

RECLASSIFIED = "reclassified"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorded:
    handoff: Handoff
    stored: bool  # False when this part was already recorded for this attempt


def record(
    *,
    handoff_id: str,
    operation_id: str,
    part: str,
    value: object,
    attempt: str = "1",
    now: datetime | None = None,
) -> Recorded:
    """Record `value` as the `part` of a handoff (a spec §1 part object, or a final status).

    Raises `bundle.BundleError` naming the field when the input is not valid;
    nothing is stored then. Recording the same part for the same attempt again
    changes nothing. A refused id or name is stored `redacted` (and noted, `receipts.ingest.redactions`).
    """
    stored_value = parts.minimized(part, value)
    handoff_id, operation_id, attempt = parts.validate_ids(handoff_id, operation_id, attempt)
    redactions.note(operation_id, part, stored_value)
    now = now or timezone.now()
    with batches.atomic(), batches.batch():
        run = _run_for(operation_id)
        handoff, new = _locked_handoff(handoff_id, run)
        # The handoff row is locked: no other transaction can add this receipt meanwhile.
        stored = batches.stored_parts(handoff, new)
        if (part, attempt) in stored:
            return Recorded(handoff, stored=False)
        stored.add((part, attempt))
        batches.current().receipts.append(parts.receipt_row(handoff, part, attempt, stored_value, now))
        before = None if new else handoff.verdict
        state_before = None if new else signals.HandoffState.of(handoff)
        changed = parts.apply_part(handoff, part, stored_value)
        changed += parts.unsettled_by(handoff, part, stored_value)
        parts.classify_into(handoff, now)
        handoff.updated_at = now
        # The row, its history and the signal go with the batch's other changes, in order, at its end.
        fields = [*changed, *parts.CLASSIFIED_FIELDS, "updated_at"]
        history = [] if handoff.verdict == before else [parts.history_row(handoff, part, now)]
        change = signals.Change(signals.snapshot(handoff), part, state_before, signals.HandoffState.of(handoff), now)
        batches.changed_handoffs([handoff], fields, history, [change])
        # The handoff event announces the run's new health too: pages re-render the run from the database.
        batches.refresh_health(handoff.run, now)
        parts.publish_after_commit(handoff, part, now)
    return Recorded(handoff, stored=True)


def reclassify(handoff: Handoff, *, now: datetime | None = None) -> bool:
    """Classify again at `now` (verdicts that depend on time); True when the verdict changed."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Handoff.objects.select_for_update().select_related("run").get(pk=handoff.pk)
        before = (locked.verdict, locked.boundary)
        state_before = signals.HandoffState.of(locked)
        parts.classify_into(locked, now)
        if (locked.verdict, locked.boundary) == before:
            return False
        locked.updated_at = now
        locked.save(update_fields=[*parts.CLASSIFIED_FIELDS, "updated_at"])
        parts.note_change(locked, before[0], RECLASSIFIED, now)
        health.refresh(locked.run, now=now, publish=False)
        signals.send_handoff_changed(locked, cause=RECLASSIFIED, before=state_before, now=now)
        parts.publish_after_commit(locked, RECLASSIFIED, now)
    return True


def reclassify_overdue_waits(*, now: datetime | None = None) -> int:
    """Re-judge waits whose deadline has passed (a valid wait turns UNCERTAIN); returns how many changed."""
    now = now or timezone.now()
    due = Handoff.objects.filter(wait_open=True, wait_deadline__lte=now, verdict="WAITING_ON_APPROVAL")
    return sum(reclassify(handoff, now=now) for handoff in due.only("pk"))


def _run_for(operation_id: str) -> Run:
    """The run of `operation_id`, created when new (call inside a batch)."""
    current = batches.current()
    if operation_id not in current.runs:
        # issue 29 §4: the run is keyed by the side's namespace and the id.
        lookup, defaults = {"source_name": namespace(), "operation_id": operation_id}, {"thread_id": operation_id}
        current.runs[operation_id] = (
            _created(Run, lookup, {**defaults, "source": Run.Source.AGENT})[0]
            if f"run:{operation_id}" in current.absent
            else Run.objects.get_or_create(**lookup, defaults={**defaults, "source": Run.Source.AGENT})[0]
        )
    if problem := owner_problem(current.runs[operation_id]):
        logger.warning("receipt refused: %s", problem)
        raise RunNotOwned("operation_id", problem)
    return current.runs[operation_id]


def _created(model, lookup: dict, defaults: dict) -> tuple:
    """(a new row of `model`, True) where none was seen, or (the row another transaction created meanwhile, False)."""
    try:
        with transaction.atomic():
            return model.objects.create(**lookup, **defaults), True
    except IntegrityError:
        found = model.objects.select_for_update().filter(**lookup).first()
        if found is None:
            raise  # another unique field clashed
        return found, False


def _locked_handoff(handoff_id: str, run: Run) -> tuple[Handoff, bool]:
    """The handoff locked for update, and whether it is new (a row this transaction inserted is its own)."""
    current = batches.current()
    locked = current.handoffs.get(handoff_id)
    if locked is None and f"handoff:{handoff_id}" not in current.absent:
        locked = Handoff.objects.select_for_update().filter(source_name=namespace(), handoff_id=handoff_id).first()
    new = False
    if locked is None:
        # A handoff with no evidence yet fails its first boundary; it is classified before commit. One that
        # arrives after its run ended is settled from the start: nothing more is due.
        defaults = {"run": run, "verdict": "ROUTE_REJECTED", "settled_at": parts.ended_at(run)}
        locked, new = _created(Handoff, {"source_name": namespace(), "handoff_id": handoff_id}, defaults)
    current.handoffs[handoff_id] = locked
    if locked.run_id != run.pk:
        raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
    locked.run = run
    return locked, new


def record_report(operation_id: str, agent: str, kind: str, detail: dict, attempt: str) -> bool:
    """Append one MiddlewareReport (once per run, agent, kind and attempt) and announce it.

    Its operation id, agent, attempt and detail values are names: one that
    `bundle.identifier_problem` refuses is stored `redacted` and a
    `value_redacted` report names it. A report that is not valid otherwise (an
    unknown kind, a value that is not a string, a detail key that is not a
    name) is dropped: logged by field name, never by value, and an
    `evidence_dropped` report naming the field takes its place where the run
    and agent are valid. Bad input never raises; False when nothing new was
    stored.
    """
    try:
        operation_id = parse_required_identifier(operation_id, "operation_id")
        agent = parse_required_identifier(agent, "agent")
        if kind not in MiddlewareReport.Kind.values:
            raise BundleError("kind", "is not a known report kind")
        detail = parse_report_detail(detail)
        attempt = parse_required_identifier(attempt, "attempt")
    except BundleError as exc:
        logger.warning("middleware report dropped: %s %s", exc.field, exc.message)
        _report_dropped(operation_id, agent, kind, exc.field)
        return False
    with batches.atomic(), batches.batch():
        run = _run_for(operation_id)
        report, created = MiddlewareReport.objects.get_or_create(
            run=run, agent=agent, kind=kind, attempt=attempt, defaults={"detail": detail}
        )
        if created:
            event: broadcast.ReportEvent = {
                "type": "report.added",
                "run": run.pk,
                "operation_id": run.operation_id,
                "seq": 0,  # set by batches.sequenced
                "agent": agent,
                "kind": kind,
                "dry_run": run.dry_run,
                "at": report.recorded_at.isoformat(),
            }
            batches.sequenced(run, event)
            transaction.on_commit(partial(broadcast.publish, event))
            batches.reported(run, kind, detail)
            batches.refresh_health(run, None)  # the report event announces it
    if created and kind != MiddlewareReport.Kind.VALUE_REDACTED:
        _report_redacted(
            operation_id, {"operation_id": operation_id, "agent": agent, "attempt": attempt, "detail": detail}
        )
    return created


def _report_redacted(operation_id: str, values: dict) -> None:
    """A `value_redacted` report for each of a stored report's values that were redacted (once per field; the
    operation id as the run's, as `receipts.ingest.intake` reports it for receipts)."""
    for found in redacted_fields(values, "report"):
        part, field = ("run", "operation_id") if found == "report.operation_id" else ("report", found[7:])
        detail = {"part": part, "field": field[:200]}
        kind = MiddlewareReport.Kind.VALUE_REDACTED
        record_report(operation_id, OBSERVER, kind, detail, f"redact-{digest(part, field)}")


def _report_dropped(operation_id: object, agent: object, kind: object, field: str) -> None:
    if field == "operation_id" or kind == MiddlewareReport.Kind.EVIDENCE_DROPPED:
        return  # no run to attach it to, or the replacement itself failed: the log line is all
    valid_agent = isinstance(agent, str) and agent != "" and identifier_problem(agent) is None
    record_report(
        str(operation_id),
        agent if valid_agent else OBSERVER,
        MiddlewareReport.Kind.EVIDENCE_DROPPED,
        {"part": "report", "field": field},
        f"drop-{digest('report', kind, field)}",
    )
