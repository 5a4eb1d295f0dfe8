"""Settled verdicts (spec v1.2): a settle entry, a run's end or an operator's settlement makes verdicts final."""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from receipts.ingest import batches, health, parts, signals, sqlsets
from receipts.ingest.due import due_condition, due_part
from receipts.ingest.sides import RunNotOwned, namespace, owner_problem
from receipts.models import Handoff, Run, VerdictChange
from receipts.verdicts import bundle

# The cause of a settle (a settle entry, or the run's end) that made an in-progress verdict final.
SETTLED = "settled"
# Settling is part of recording: its log lines keep recording's logger name.
logger = logging.getLogger("receipts.ingest.recording")


def settle(*, handoff_id: str, operation_id: str, now: datetime | None = None) -> bool:
    """Settle one handoff: the agent side reports that the step its missing parts were due in has finished.

    True when it was not settled before. A handoff (or run) that does not exist yet is not created and
    nothing is stored (False): a settle proves nothing on its own. `bundle.BundleError` when the ids are not
    valid or the handoff belongs to another operation. A verdict that was in progress becomes final:
    history row, health, `handoff_changed` (alert rules fire now) and a live event; a handoff with nothing
    due only keeps the time.
    """
    handoff_id, operation_id, _ = parts.validate_ids(handoff_id, operation_id, "1")
    now = now or timezone.now()
    with batches.atomic(), batches.batch():
        run = _existing_run(operation_id)
        if run is not None and (problem := owner_problem(run)):
            logger.warning("settle refused: %s", problem)
            raise RunNotOwned("operation_id", problem)
        handoff = _existing_handoff(handoff_id) if run is not None else None
        if handoff is None:
            return False
        if handoff.run_id != run.pk:
            raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
        handoff.run = run
        if handoff.settled_at is not None:
            return False
        before = signals.HandoffState.of(handoff)
        handoff.settled_at = now
        if not before.due:
            _write([handoff], ["settled_at"])
            return True
        handoff.updated_at = now
        _write([handoff], ["settled_at", "updated_at"])
        _announce_settled([(handoff, before)], now)
        batches.refresh_health(run, now)
    return True


def _write(handoffs: list[Handoff], names: list[str]) -> None:
    """In a batch with its other rows at its end (one UPDATE for all), else now."""
    if not batches.changed_handoffs(handoffs, names):
        for handoff in handoffs:
            handoff.save(update_fields=names)


def settle_run(run: Run, now: datetime) -> int:
    """Settle every handoff of `run`, which ended, in one UPDATE (call inside its transaction); how many were
    in progress. Those become final as `settle` makes them: history, `handoff_changed` and a live event each."""
    current = batches.current()
    # A batch's own handoffs of the run are settled as it holds them (their rows are written at its end); the
    # run's others as stored, unless the batch created the run (then every handoff of it is the batch's).
    mine = [h for h in (current.handoffs.values() if current is not None else ()) if h.run_id == run.pk]
    pending = [(h, signals.HandoffState.of(h)) for h in mine if due_part(h) is not None]
    if current is None or run.pk not in current.made:
        others = Handoff.objects.filter(run=run).exclude(pk__in=[h.pk for h in mine])
        stored = list(others.select_for_update().filter(due_condition()).order_by("pk"))
        others.filter(settled_at__isnull=True).update(settled_at=now)
        if stored:
            Handoff.objects.filter(pk__in=[h.pk for h in stored]).update(updated_at=now)
        for handoff in stored:
            handoff.run = run
            pending.append((handoff, signals.HandoffState.of(handoff)))
    unsettled = [h for h in mine if h.settled_at is None]
    for handoff in unsettled:
        handoff.settled_at = now
    for handoff, _ in pending:
        handoff.settled_at, handoff.updated_at = now, now
    if unsettled:
        batches.changed_handoffs(unsettled, ["settled_at", "updated_at"])
    changed = sorted(pending, key=lambda item: item[0].pk)
    _announce_settled(changed, now)
    return len(changed)


def note_settlement(handoff: Handoff, cause: str, now: datetime) -> None:
    """An operator settled the handoff (receipts.actions.settle): a history row with the verdict it keeps.

    Call inside the action's transaction; the live pages hear of it after commit.
    """
    VerdictChange.objects.create(
        handoff=handoff, verdict=handoff.verdict, boundary=handoff.boundary, cause=cause, at=now
    )
    handoff.updated_at = now
    handoff.save(update_fields=["updated_at"])
    health.refresh(handoff.run, now=now, publish=False)
    state = signals.HandoffState.of(handoff)
    signals.send_handoff_changed(handoff, cause=cause, before=state, now=now)
    parts.publish_after_commit(handoff, cause, now)


def _existing_run(operation_id: str) -> Run | None:
    current = batches.current()
    if operation_id in current.runs:
        return current.runs[operation_id]
    if f"run:{operation_id}" in current.absent:
        return None
    return Run.objects.for_operation(operation_id, namespace()).first()


def _existing_handoff(handoff_id: str) -> Handoff | None:
    current = batches.current()
    if handoff_id not in current.handoffs and f"handoff:{handoff_id}" not in current.absent:
        found = Handoff.objects.select_for_update().filter(source_name=namespace(), handoff_id=handoff_id).first()
        if found is not None:
            current.handoffs[handoff_id] = found
    return current.handoffs.get(handoff_id)


def _announce_settled(changed: list[tuple[Handoff, signals.HandoffState]], now: datetime) -> None:
    """What made verdicts final: a history row each (the verdict it keeps), the signal, the live event."""
    history = [parts.history_row(h, SETTLED, now) for h, _ in changed]
    # A batch sends the signal at its end: each receiver gets the handoff as it is now (later parts change it).
    changes = [
        signals.Change(signals.snapshot(h), SETTLED, before, signals.HandoffState.of(h), now) for h, before in changed
    ]
    if not batches.changed_handoffs([], [], history, changes):  # in a batch: with its other rows at its end
        sqlsets.insert_rows(VerdictChange, history)
        signals.send_changes(changes)
    for handoff, _ in changed:
        parts.publish_after_commit(handoff, SETTLED, now)
