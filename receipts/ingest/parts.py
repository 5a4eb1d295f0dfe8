"""A receipt part's way onto its handoff: minimized and validated, put on the handoff, classified, announced.

Shared by `recording` (one part at a time) and `setwise` (a set of parts): both apply the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime
from functools import partial

from django.conf import settings
from django.utils import timezone

from receipts import verdicts
from receipts.ingest import batches, broadcast
from receipts.models import FINAL_STATUS_PART, RECEIPT_PARTS, Handoff, Run, VerdictChange, handoff_month
from receipts.verdicts import bundle

# What `classify_into` sets.
CLASSIFIED_FIELDS = (
    "verdict",
    "boundary",
    "next_move",
    "reason",
    "boundaries",
    "classified_at",
    "wait_open",
    "wait_owner",
    "wait_deadline",
)


def minimized(part: str, value: object) -> object:
    """The value as stored: parsed and minimized by the bundle parser (`bundle.BundleError` names the field)."""
    return parsed(part, value)[0]


def parsed(part: str, value: object) -> tuple[object, bundle.Part | None]:
    """The value as stored (`minimized`) and the part it parses to (None for a final status).

    Parsing the stored value again gives the same part: text and booleans are kept as they are, lists of
    names become lists of the same names, times are stored in ISO 8601 to the microsecond.
    """
    if part == FINAL_STATUS_PART:
        return bundle.parse_final_status(value), None
    if part not in RECEIPT_PARTS:
        raise bundle.BundleError("part", f"must be one of {', '.join(RECEIPT_PARTS)}")
    found = bundle.parse_part(part, value)
    return bundle.part_to_dict(found), found


def validate_ids(handoff_id: object, operation_id: object, attempt: object) -> tuple[str, str, str]:
    """The ids as stored (a refused one `redacted`, spec v1.3); `bundle.BundleError` naming the field when an
    id is not a non-empty string."""
    # The bundle parser owns the rules for ids (`parse_bundle` reads a bundle's two ids so, in this order).
    return (
        bundle.parse_required_identifier(handoff_id, "handoff_id"),
        bundle.parse_required_identifier(operation_id, "operation_id"),
        bundle.parse_required_identifier(attempt, "attempt"),
    )


def apply_part(handoff: Handoff, part: str, value: object) -> list[str]:
    """Put `value` on the handoff; the fields it changed."""
    if part == FINAL_STATUS_PART:
        handoff.final_status = value or ""
        return ["final_status"]
    setattr(handoff, f"{part}_part", value)
    if part == "created":
        handoff.sender = value.get("sender") or ""
        handoff.receiver = value.get("receiver") or ""
        handoff.route_version = value.get("route_version") or ""
        return ["created_part", "sender", "receiver", "route_version"]
    return [f"{part}_part"]


def unsettled_by(handoff: Handoff, part: str, value: object) -> list[str]:
    """A wait resolved on a run that goes on makes evidence due again (the resumed run's next final status):
    the handoff is no longer settled. The fields it changed."""
    resolved = part == "wait" and isinstance(value, dict) and value.get("resolved") is True
    if not resolved or handoff.settled_at is None or ended_at(handoff.run) is not None:
        return []
    handoff.settled_at = None
    return ["settled_at"]


def timezone_clock() -> Callable[[], datetime]:
    """`django.utils.timezone.now` with the setting it reads read once: a set of parts reads the clock per part
    (reading `USE_TZ` each time cost more than the clock)."""
    return partial(datetime.now, UTC if settings.USE_TZ else None)


def ended_at(run: Run) -> datetime | None:
    """When the run ended (its handoffs are settled from then on), None while it goes on."""
    # receipts.ingest.runs.ENDED, read here: runs imports settling, which imports this module.
    ended = run.status in (Run.Status.COMPLETE, Run.Status.FAILED)
    return (run.finished_at or timezone.now()) if ended else None


def note_change(handoff: Handoff, before: str | None, cause: str, now: datetime) -> None:
    """One history row per verdict change (the first classification is one), caused by `cause`."""
    if handoff.verdict != before:
        VerdictChange.objects.create(**history_row(handoff, cause, now))


def history_row(handoff: Handoff, cause: str, now: datetime) -> dict[str, object]:
    """The verdict history row of the handoff's verdict now, caused by `cause`: a row to insert
    (`receipts.ingest.sqlsets`), or a `VerdictChange`'s keyword arguments."""
    return {
        "handoff_id": handoff.pk,
        "verdict": handoff.verdict,
        "boundary": handoff.boundary,
        "cause": cause,
        "at": now,
    }


def receipt_row(handoff: Handoff, part: str, attempt: str, value: object, now: datetime) -> dict[str, object]:
    """The receipt of `value` on the handoff as a row to insert (`receipts.ingest.sqlsets`), its partition's
    month given (`Receipt.fill_handoff_month`'s value)."""
    month = handoff_month(handoff.created_at)
    return {
        "handoff_id": handoff.pk,
        "part": part,
        "attempt": attempt,
        "payload": value,
        "recorded_at": now,
        "handoff_month": month,
    }


def classify_into(handoff: Handoff, now: datetime, found: bundle.Bundle | None = None) -> None:
    """Classify the handoff's evidence at `now` into its fields; `found` is that evidence as a bundle when the
    caller has it (`bundle_of`: a set of parts keeps its handoffs' parts parsed), else it is parsed here."""
    found = handoff.to_bundle() if found is None else found
    result = verdicts.classify(found, batches.contracts(), now)
    handoff.verdict = result.verdict
    handoff.boundary = result.boundary or ""
    handoff.next_move = result.next_move
    handoff.reason = result.reason
    handoff.boundaries = result.boundaries.copy()  # a dict of its own (the verdict's is shared, read-only)
    handoff.classified_at = now
    wait = handoff.wait_part or {}
    handoff.wait_open = bool(handoff.wait_part) and wait.get("resolved") is not True
    handoff.wait_owner = wait.get("owner") or ""
    handoff.wait_deadline = found.wait.deadline_utc if handoff.wait_part else None


def parsed_parts(handoff: Handoff, parse: Callable[[str, object], bundle.Part]) -> list[bundle.Part | None]:
    """The handoff's parts as `bundle_of` takes them (in `bundle.PARTS` order, None for a missing one), each
    parsed by `parse` (name, stored value -> part: the stored values are minimized, parsing one again gives the
    same part)."""
    return [None if (value := getattr(handoff, field)) is None else parse(name, value) for name, field in _PART_FIELDS]


def bundle_of(handoff: Handoff, operation_id: str, parts: list[bundle.Part | None]) -> bundle.Bundle:
    """`handoff.to_bundle()` from its `parsed_parts` (ids and status were validated when stored)."""
    return _make_bundle(handoff.handoff_id, operation_id, *parts, handoff.final_status or None, None)


PART_INDEX = {name: index for index, name in enumerate(bundle.PARTS)}  # a part's place in `parsed_parts`
_PART_FIELDS = [(name, f"{name}_part") for name in bundle.PARTS]  # `Handoff.part`'s fields
# `bundle_of` gives a Bundle its fields by position (keywords cost twice as much, once per part classified).
_BUNDLE_ORDER = ["handoff_id", "operation_id", *bundle.PARTS, "final_status", "expect"]
assert [field.name for field in fields(bundle.Bundle)] == _BUNDLE_ORDER
_make_bundle = bundle.by_position(bundle.Bundle)


def publish_after_commit(handoff: Handoff, part: str, now: datetime) -> None:
    """Announce the handoff's change (a minimized `handoff.changed` event) once the transaction commits."""
    run = handoff.run
    event: broadcast.HandoffEvent = {
        "type": "handoff.changed",
        "run": handoff.run_id,
        "operation_id": run.operation_id,
        "seq": 0,  # set by batches.sequenced
        "handoff": handoff.pk,
        "handoff_id": handoff.handoff_id,
        "part": part,
        "verdict": handoff.verdict,
        "boundary": handoff.boundary or None,
        "final_status": handoff.final_status or None,
        "wait_open": handoff.wait_open,
        "dry_run": run.dry_run,
        "at": now.isoformat(),
    }
    batches.sequenced(run, event)
    batches.after_commit(partial(broadcast.publish, event))
