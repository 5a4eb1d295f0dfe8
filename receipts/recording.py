"""The one entry point that records a receipt part for a handoff.

minimize → validate → persist (append-only receipt + current evidence) →
classify → after commit, publish a minimized event. Validation happens before
anything is written, so bad input never leaves a half-written record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from receipts import broadcast, bundle, health, verdicts
from receipts.contracts import current_contracts
from receipts.models import FINAL_STATUS_PART, RECEIPT_PARTS, Handoff, Receipt, Run, VerdictChange

RECLASSIFIED = "reclassified"


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
    changes nothing.
    """
    stored_value = _minimized(part, value)
    _validate_ids(handoff_id, operation_id, attempt)
    now = now or timezone.now()
    with transaction.atomic():
        run = _run_for(operation_id)
        handoff, new = _locked_handoff(handoff_id, run)
        _, created = Receipt.objects.get_or_create(
            handoff=handoff, part=part, attempt=attempt, defaults={"payload": stored_value, "recorded_at": now}
        )
        if not created:
            return Recorded(handoff, stored=False)
        before = None if new else handoff.verdict
        _apply(handoff, part, stored_value)
        _classify_into(handoff, now)
        handoff.updated_at = now
        handoff.save()
        _note_change(handoff, before, part, now)
        # The handoff event announces the run's new health too: pages re-render the run from the database.
        health.refresh(handoff.run, now=now, publish=False)
        _publish_after_commit(handoff, part, now)
    return Recorded(handoff, stored=True)


def reclassify(handoff: Handoff, *, now: datetime | None = None) -> bool:
    """Classify again at `now` (verdicts that depend on time); True when the verdict changed."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Handoff.objects.select_for_update().select_related("run").get(pk=handoff.pk)
        before = (locked.verdict, locked.boundary)
        _classify_into(locked, now)
        if (locked.verdict, locked.boundary) == before:
            return False
        locked.updated_at = now
        locked.save()
        _note_change(locked, before[0], RECLASSIFIED, now)
        health.refresh(locked.run, now=now, publish=False)
        _publish_after_commit(locked, RECLASSIFIED, now)
    return True


def next_seq(run: Run) -> int:
    """The run's next event sequence number (locks the run row until commit)."""
    Run.objects.filter(pk=run.pk).update(seq=F("seq") + 1)
    return Run.objects.values_list("seq", flat=True).get(pk=run.pk)


def _minimized(part: str, value: object) -> object:
    if part == FINAL_STATUS_PART:
        return bundle.parse_final_status(value)
    if part not in RECEIPT_PARTS:
        raise bundle.BundleError("part", f"must be one of {', '.join(RECEIPT_PARTS)}")
    return bundle.part_to_dict(bundle.parse_part(part, value))


def _validate_ids(handoff_id: object, operation_id: object, attempt: object) -> None:
    # The bundle parser owns the rules for ids (type, length, no paths).
    bundle.parse_bundle({"schema": bundle.SCHEMA, "handoff_id": handoff_id, "operation_id": operation_id})
    if not isinstance(attempt, str) or not 0 < len(attempt) <= 200:
        raise bundle.BundleError("attempt", "must be a non-empty string of at most 200 characters")


def _run_for(operation_id: str) -> Run:
    run, _ = Run.objects.get_or_create(
        operation_id=operation_id, defaults={"thread_id": operation_id, "source": Run.Source.AGENT}
    )
    return run


def _locked_handoff(handoff_id: str, run: Run) -> tuple[Handoff, bool]:
    # A handoff with no evidence yet fails its first boundary; it is classified before commit.
    handoff, new = Handoff.objects.get_or_create(
        handoff_id=handoff_id, defaults={"run": run, "verdict": "ROUTE_REJECTED"}
    )
    locked = Handoff.objects.select_for_update().select_related("run").get(pk=handoff.pk)
    if locked.run_id != run.pk:
        raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
    return locked, new


def _note_change(handoff: Handoff, before: str | None, cause: str, now: datetime) -> None:
    """One history row per verdict change (the first classification is one), caused by `cause`."""
    if handoff.verdict != before:
        VerdictChange.objects.create(
            handoff=handoff, verdict=handoff.verdict, boundary=handoff.boundary, cause=cause, at=now
        )


def _apply(handoff: Handoff, part: str, value: object) -> None:
    if part == FINAL_STATUS_PART:
        handoff.final_status = value or ""
        return
    setattr(handoff, f"{part}_part", value)
    if part == "created":
        handoff.sender = value.get("sender") or ""
        handoff.receiver = value.get("receiver") or ""
        handoff.route_version = value.get("route_version") or ""


def _classify_into(handoff: Handoff, now: datetime) -> None:
    result = verdicts.classify(handoff.to_bundle(), current_contracts(), now)
    handoff.verdict = result.verdict
    handoff.boundary = result.boundary or ""
    handoff.next_move = result.next_move
    handoff.reason = result.reason
    handoff.boundaries = dict(result.boundaries)
    handoff.classified_at = now
    wait = handoff.wait_part or {}
    handoff.wait_open = bool(handoff.wait_part) and wait.get("resolved") is not True
    handoff.wait_owner = wait.get("owner") or ""
    handoff.wait_deadline = bundle.parse_part("wait", wait).deadline_utc if handoff.wait_part else None


def _publish_after_commit(handoff: Handoff, part: str, now: datetime) -> None:
    event: broadcast.HandoffEvent = {
        "type": "handoff.changed",
        "run": handoff.run_id,
        "operation_id": handoff.run.operation_id,
        "seq": next_seq(handoff.run),
        "handoff": handoff.pk,
        "handoff_id": handoff.handoff_id,
        "part": part,
        "verdict": handoff.verdict,
        "boundary": handoff.boundary or None,
        "final_status": handoff.final_status or None,
        "wait_open": handoff.wait_open,
        "dry_run": handoff.run.dry_run,
        "at": now.isoformat(),
    }
    transaction.on_commit(partial(broadcast.publish, event))


def reclassify_overdue_waits(*, now: datetime | None = None) -> int:
    """Re-judge waits whose deadline has passed (a valid wait turns UNCERTAIN); returns how many changed."""
    now = now or timezone.now()
    due = Handoff.objects.filter(wait_open=True, wait_deadline__lte=now, verdict="WAITING_ON_APPROVAL")
    return sum(reclassify(handoff, now=now) for handoff in due.only("pk"))


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
    _publish_after_commit(handoff, cause, now)
