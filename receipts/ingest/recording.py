"""The one entry point that records a receipt part for a handoff.

minimize → validate → persist (append-only receipt + current evidence) →
classify → after commit, publish a minimized event. Validation happens before
anything is written, so bad input never leaves a half-written record.

Inside `batch()` (the batched writer and the receipts API record many entries
in one transaction) the contracts are read once, runs are looked up once, and
each touched run's health is refreshed once at the end instead of per receipt.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Subquery
from django.utils import timezone

from receipts import verdicts
from receipts.ingest import broadcast, health, signals
from receipts.ingest.contracts import current_contracts
from receipts.models import (
    FINAL_STATUS_PART,
    RECEIPT_PARTS,
    Handoff,
    MiddlewareReport,
    Receipt,
    Run,
    VerdictChange,
)
from receipts.verdicts import bundle
from receipts.verdicts.bundle import BundleError, parse_name, parse_report_detail, text_problem

RECLASSIFIED = "reclassified"
# The cause of a settle (a settle entry, or the run's end) that made an in-progress verdict final.
SETTLED = "settled"
# The agent a report is filed under when the agent named in it is not a valid name.
OBSERVER = "observer"
logger = logging.getLogger(__name__)


class RunNotOwned(BundleError):
    """The run belongs to another side (issue 19): a local app may not record into a source's run, nor a source
    into a local run or another source's. Nothing is written; the message names the run and its owner."""


# Which app is recording: "" a local app (the evidence writer's LocalSink), a source's name (the receipts
# API); None, the default, is the server itself (operator actions, sweeps), which writes any run.
_side: contextvars.ContextVar[str | None] = contextvars.ContextVar("sidewisp_recording_side", default=None)


@contextlib.contextmanager
def writing_as(source_name: str) -> Iterator[None]:
    """Record as a local app ("") or as the remote source `source_name`: only that side's runs accept it."""
    reset = _side.set(source_name)
    try:
        yield
    finally:
        _side.reset(reset)


def owner_problem(run: Run, side: str | None = None, *, act: str = "record into it") -> str:
    """Why `side` (default: the current one) may not `act` on `run` ("" when it may): a run is its creator's."""
    side = _side.get() if side is None else side
    if side is None or run.source_name == side:
        return ""
    owner = f"was created by source {run.source_name}" if run.source_name else "is a local run"
    writer = f"source {side}" if side else "a local app"
    return f"run {run.operation_id} {owner}; {writer} may not {act}"


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
    with _atomic(), batch():
        run = _run_for(operation_id)
        handoff, new = _locked_handoff(handoff_id, run)
        # The handoff row is locked: no other transaction can add this receipt meanwhile.
        stored = _stored_parts(handoff, new)
        if (part, attempt) in stored:
            return Recorded(handoff, stored=False)
        stored.add((part, attempt))
        receipt = Receipt(handoff=handoff, part=part, attempt=attempt, payload=stored_value, recorded_at=now)
        _current().receipts.append(receipt)
        before = None if new else handoff.verdict
        state_before = None if new else signals.HandoffState.of(handoff)
        changed = _apply(handoff, part, stored_value)
        changed += _unsettled_by(handoff, part, stored_value)
        _classify_into(handoff, now)
        handoff.updated_at = now
        handoff.save(update_fields=[*changed, *CLASSIFIED_FIELDS, "updated_at"])
        _note_change(handoff, before, part, now)
        # The handoff event announces the run's new health too: pages re-render the run from the database.
        _refresh_health(handoff.run, now)
        signals.send_handoff_changed(handoff, cause=part, before=state_before, now=now)
        _publish_after_commit(handoff, part, now)
    return Recorded(handoff, stored=True)


@dataclass
class _Batch:
    """What one batch reads once and writes together (see `batch`)."""

    contracts: bundle.Contracts | None = None
    runs: dict[str, Run] = field(default_factory=dict)  # operation id -> run
    handoffs: dict[str, Handoff] = field(default_factory=dict)  # handoff id -> handoff, locked
    absent: set[str] = field(default_factory=set)  # operation and handoff ids `prefetch` found no row for
    stored: dict[int, set[tuple[str, str]]] = field(default_factory=dict)  # handoff pk -> (part, attempt)s
    receipts: list[Receipt] = field(default_factory=list)  # inserted together at the end
    events: dict[int, tuple[Run, list[dict]]] = field(default_factory=dict)  # run pk -> events awaiting a seq
    stale: dict[int, tuple[Run, datetime | None]] = field(default_factory=dict)  # runs whose health to refresh
    latest: dict[str, str | None] = field(default_factory=dict)  # operation id -> its latest handoff's id


_local = threading.local()


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Record several receipts and reports as one unit of work; call inside a transaction.

    Contracts are read once; runs, locked handoffs and their stored parts are read
    once (`prefetch` reads them for many entries in one query each). At the end of
    the block, before the caller commits, the receipts are inserted together, each
    run takes its events' sequence numbers in one update and its health is
    refreshed once. A handoff's own row and verdict history are written per
    receipt, before `handoff_changed` is sent, so receivers see them. Nested
    blocks join the outer one.
    """
    if _current() is not None:
        yield
        return
    _local.batch = current = _Batch()
    try:
        yield
        Receipt.objects.bulk_create(current.receipts)
        _number_events(current.events.values())
        _refresh_stale(list(current.stale.values()))
    finally:
        _local.batch = None


def _number_events(pending: Iterable[tuple[Run, list[dict]]]) -> None:
    """Give each run's events of the batch their sequence numbers: one UPDATE for all the runs."""
    pending = [(run, events) for run, events in pending if events]
    if not pending:
        return
    last = next_seqs({run.pk: len(events) for run, events in pending})
    for run, events in pending:
        for seq, event in enumerate(events, start=last[run.pk] - len(events) + 1):
            event["seq"] = seq


def _refresh_stale(stale: list[tuple[Run, datetime | None]]) -> None:
    """Each touched run's health and summary: `health.refresh` for one run, `health.refresh_many` for several."""
    if len(stale) == 1:
        run, now = stale[0]
        health.refresh(run, now=now, publish=False)
    elif stale:
        health.refresh_many([run for run, _ in stale], now=max((now for _, now in stale if now), default=None))


def prefetch(operation_ids: Iterable[str], handoff_ids: Iterable[str], latest_of: Iterable[str] = ()) -> None:
    """Read (and lock, in primary-key order) the runs, handoffs and stored parts a batch will record into;
    for the runs in `latest_of` (outcome parts without a handoff id) their latest handoff too."""
    current = _current()
    latest_of = set(latest_of)
    operation_ids = (set(operation_ids) | latest_of) - set(current.runs)
    runs = Run.objects.filter(operation_id__in=operation_ids)
    if latest_of:
        newest = Handoff.objects.filter(run=OuterRef("pk")).order_by("-created_at", "-pk").values("handoff_id")[:1]
        runs = runs.annotate(latest_handoff=Subquery(newest))
    for run in runs:
        current.runs[run.operation_id] = run
        if run.operation_id in latest_of:
            current.latest[run.operation_id] = run.latest_handoff
    current.latest.update((op, None) for op in latest_of - set(current.runs))
    current.absent |= {f"run:{op}" for op in operation_ids - set(current.runs)}
    handoff_ids = {*handoff_ids, *(current.latest[op] for op in latest_of if current.latest.get(op))}
    wanted = set(handoff_ids) - set(current.handoffs)
    if not wanted:
        return
    locked = list(Handoff.objects.select_for_update().filter(handoff_id__in=wanted).order_by("pk"))
    current.handoffs.update((handoff.handoff_id, handoff) for handoff in locked)
    current.absent |= {f"handoff:{handoff_id}" for handoff_id in wanted - set(current.handoffs)}
    stored: dict[int, set[tuple[str, str]]] = {handoff.pk: set() for handoff in locked}
    for pk, part, attempt in Receipt.objects.filter(handoff__in=stored).values_list("handoff_id", "part", "attempt"):
        stored[pk].add((part, attempt))
    current.stored.update(stored)


def _current() -> _Batch | None:
    return getattr(_local, "batch", None)


def _atomic() -> transaction.Atomic:
    # Inside a batch a failure fails the whole batch (the writer then retries entry by entry; the API
    # refuses the request): no savepoint per receipt.
    return transaction.atomic(savepoint=_current() is None)


def _refresh_health(run: Run, now: datetime | None) -> None:
    _current().stale[run.pk] = (run, now)


def _stored_parts(handoff: Handoff, new: bool) -> set[tuple[str, str]]:
    current = _current()
    if handoff.pk not in current.stored:
        found = () if new else Receipt.objects.filter(handoff=handoff).values_list("part", "attempt")
        current.stored[handoff.pk] = set(found)
    return current.stored[handoff.pk]


def _contracts() -> bundle.Contracts:
    current = _current()
    if current is None:
        return current_contracts()
    if current.contracts is None:
        current.contracts = current_contracts()
    return current.contracts


def reclassify(handoff: Handoff, *, now: datetime | None = None) -> bool:
    """Classify again at `now` (verdicts that depend on time); True when the verdict changed."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Handoff.objects.select_for_update().select_related("run").get(pk=handoff.pk)
        before = (locked.verdict, locked.boundary)
        state_before = signals.HandoffState.of(locked)
        _classify_into(locked, now)
        if (locked.verdict, locked.boundary) == before:
            return False
        locked.updated_at = now
        locked.save(update_fields=[*CLASSIFIED_FIELDS, "updated_at"])
        _note_change(locked, before[0], RECLASSIFIED, now)
        health.refresh(locked.run, now=now, publish=False)
        signals.send_handoff_changed(locked, cause=RECLASSIFIED, before=state_before, now=now)
        _publish_after_commit(locked, RECLASSIFIED, now)
    return True


def next_seqs(counts: dict[int, int]) -> dict[int, int]:
    """Take `n` event sequence numbers for each run (pk -> n) in one UPDATE; pk -> the last of them."""
    if len(counts) == 1 or not connection.features.can_return_columns_from_insert:
        return {pk: next_seq(Run(pk=pk), n) for pk, n in counts.items()}
    table, seq, pk = (connection.ops.quote_name(n) for n in (Run._meta.db_table, "seq", Run._meta.pk.column))
    rows = ", ".join(["(%s, %s)"] * len(counts))
    cast = "::bigint" if connection.vendor == "postgresql" else ""
    sql = (
        f"UPDATE {table} SET {seq} = {seq} + v.column2{cast} FROM (VALUES {rows}) AS v "
        f"WHERE {table}.{pk} = v.column1{cast} RETURNING {table}.{pk}, {table}.{seq}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for item in sorted(counts.items()) for value in item])
        return dict(cursor.fetchall())


def next_seq(run: Run, n: int = 1) -> int:
    """Take the run's next `n` event sequence numbers; the last of them (locks the run row until commit)."""
    if connection.features.can_return_columns_from_insert:  # PostgreSQL, SQLite >= 3.35: UPDATE … RETURNING
        table, seq, pk = (connection.ops.quote_name(n) for n in (Run._meta.db_table, "seq", Run._meta.pk.column))
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {seq} = {seq} + %s WHERE {pk} = %s RETURNING {seq}", [n, run.pk])
            return cursor.fetchone()[0]
    Run.objects.filter(pk=run.pk).update(seq=F("seq") + n)
    return Run.objects.values_list("seq", flat=True).get(pk=run.pk)


def _sequenced(run: Run, event: dict) -> None:
    """Give `event` the run's next sequence number: now, or at the end of the current batch."""
    current = _current()
    if current is None:
        event["seq"] = next_seq(run)
    else:
        current.events.setdefault(run.pk, (run, []))[1].append(event)


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
    """The run of `operation_id`, created when new (call inside a batch)."""
    current = _current()
    if operation_id not in current.runs:
        defaults = {"thread_id": operation_id, "source": Run.Source.AGENT, "source_name": _side.get() or ""}
        current.runs[operation_id] = (
            _created(Run, {"operation_id": operation_id}, defaults)[0]
            if f"run:{operation_id}" in current.absent
            else Run.objects.get_or_create(operation_id=operation_id, defaults=defaults)[0]
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
    current = _current()
    locked = current.handoffs.get(handoff_id)
    if locked is None and f"handoff:{handoff_id}" not in current.absent:
        locked = Handoff.objects.select_for_update().filter(handoff_id=handoff_id).first()
    new = False
    if locked is None:
        # A handoff with no evidence yet fails its first boundary; it is classified before commit. One that
        # arrives after its run ended is settled from the start: nothing more is due.
        defaults = {"run": run, "verdict": "ROUTE_REJECTED", "settled_at": _ended_at(run)}
        locked, new = _created(Handoff, {"handoff_id": handoff_id}, defaults)
    current.handoffs[handoff_id] = locked
    if locked.run_id != run.pk:
        raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
    locked.run = run
    return locked, new


def _unsettled_by(handoff: Handoff, part: str, value: object) -> list[str]:
    """A wait resolved on a run that goes on makes evidence due again (the resumed run's next final status):
    the handoff is no longer settled. The fields it changed."""
    resolved = part == "wait" and isinstance(value, dict) and value.get("resolved") is True
    if not resolved or handoff.settled_at is None or _ended_at(handoff.run) is not None:
        return []
    handoff.settled_at = None
    return ["settled_at"]


def _ended_at(run: Run) -> datetime | None:
    # receipts.ingest.runs.ENDED, read here: runs imports this module.
    ended = run.status in (Run.Status.COMPLETE, Run.Status.FAILED)
    return (run.finished_at or timezone.now()) if ended else None


def _note_change(handoff: Handoff, before: str | None, cause: str, now: datetime) -> None:
    """One history row per verdict change (the first classification is one), caused by `cause`."""
    if handoff.verdict != before:
        VerdictChange.objects.create(
            handoff=handoff, verdict=handoff.verdict, boundary=handoff.boundary, cause=cause, at=now
        )


def _apply(handoff: Handoff, part: str, value: object) -> list[str]:
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


# What `_classify_into` sets.
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


def _classify_into(handoff: Handoff, now: datetime, parse: Callable[[str, object], bundle.Part] | None = None) -> None:
    """Classify the handoff's evidence at `now` into its fields; `parse` (name, stored value -> part) may reuse
    parts parsed before (the stored values are minimized: parsing one again gives the same part)."""
    found = handoff.to_bundle() if parse is None else _bundle_of(handoff, parse)
    result = verdicts.classify(found, _contracts(), now)
    handoff.verdict = result.verdict
    handoff.boundary = result.boundary or ""
    handoff.next_move = result.next_move
    handoff.reason = result.reason
    handoff.boundaries = dict(result.boundaries)
    handoff.classified_at = now
    wait = handoff.wait_part or {}
    handoff.wait_open = bool(handoff.wait_part) and wait.get("resolved") is not True
    handoff.wait_owner = wait.get("owner") or ""
    handoff.wait_deadline = found.wait.deadline_utc if handoff.wait_part else None


def _bundle_of(handoff: Handoff, parse: Callable[[str, object], bundle.Part]) -> bundle.Bundle:
    """`handoff.to_bundle()` with its parts parsed by `parse` (ids and status were validated when stored)."""
    parts = {name: None if (value := handoff.part(name)) is None else parse(name, value) for name in bundle.PARTS}
    return bundle.Bundle(
        handoff.handoff_id, handoff.run.operation_id, **parts, final_status=handoff.final_status or None
    )


def _publish_after_commit(handoff: Handoff, part: str, now: datetime) -> None:
    event: broadcast.HandoffEvent = {
        "type": "handoff.changed",
        "run": handoff.run_id,
        "operation_id": handoff.run.operation_id,
        "seq": 0,  # set by _sequenced
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
    _sequenced(handoff.run, event)
    transaction.on_commit(partial(broadcast.publish, event))


def record_report(operation_id: str, agent: str, kind: str, detail: dict, attempt: str) -> bool:
    """Append one MiddlewareReport (once per run, agent, kind and attempt) and announce it.

    Every string in it (operation id, agent, attempt, each detail key and
    value) passes `bundle.text_problem`. A report that does not is dropped:
    logged by field name, never by value, and an `evidence_dropped` report
    naming the field takes its place where the run and agent are valid. Bad
    input never raises; False when nothing new was stored.
    """
    try:
        operation_id = parse_name(operation_id, "operation_id")
        agent = parse_name(agent, "agent")
        if kind not in MiddlewareReport.Kind.values:
            raise BundleError("kind", "is not a known report kind")
        detail = parse_report_detail(detail)
        attempt = parse_name(attempt, "attempt")
    except BundleError as exc:
        logger.warning("middleware report dropped: %s %s", exc.field, exc.message)
        _report_dropped(operation_id, agent, kind, exc.field)
        return False
    with _atomic(), batch():
        run = _run_for(operation_id)
        report, created = MiddlewareReport.objects.get_or_create(
            run=run, agent=agent, kind=kind, attempt=attempt, defaults={"detail": detail}
        )
        if created:
            event: broadcast.ReportEvent = {
                "type": "report.added",
                "run": run.pk,
                "operation_id": run.operation_id,
                "seq": 0,  # set by _sequenced
                "agent": agent,
                "kind": kind,
                "dry_run": run.dry_run,
                "at": report.recorded_at.isoformat(),
            }
            _sequenced(run, event)
            transaction.on_commit(partial(broadcast.publish, event))
            _refresh_health(run, None)  # the report event announces it
    return created


def _report_dropped(operation_id: object, agent: object, kind: object, field: str) -> None:
    if field == "operation_id" or kind == MiddlewareReport.Kind.EVIDENCE_DROPPED:
        return  # no run to attach it to, or the replacement itself failed: the log line is all
    valid_agent = isinstance(agent, str) and agent != "" and text_problem(agent) is None
    record_report(
        str(operation_id),
        agent if valid_agent else OBSERVER,
        MiddlewareReport.Kind.EVIDENCE_DROPPED,
        {"part": "report", "field": field},
        f"drop-{digest('report', kind, field)}",
    )


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
    state = signals.HandoffState.of(handoff)
    signals.send_handoff_changed(handoff, cause=cause, before=state, now=now)
    _publish_after_commit(handoff, cause, now)


# --- settled verdicts (spec v1.2) ------------------------------------------------------------------


def settle(*, handoff_id: str, operation_id: str, now: datetime | None = None) -> bool:
    """Settle one handoff: the agent side reports that the step its missing parts were due in has finished.

    True when it was not settled before. A handoff (or run) that does not exist yet is not created and
    nothing is stored (False): a settle proves nothing on its own. `bundle.BundleError` when the ids are not
    valid or the handoff belongs to another operation. A verdict that was in progress becomes final:
    history row, health, `handoff_changed` (alert rules fire now) and a live event; a handoff with nothing
    due only keeps the time.
    """
    _validate_ids(handoff_id, operation_id, "1")
    now = now or timezone.now()
    with _atomic(), batch():
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
            handoff.save(update_fields=["settled_at"])
            return True
        handoff.updated_at = now
        handoff.save(update_fields=["settled_at", "updated_at"])
        _announce_settled([(handoff, before)], now)
        _refresh_health(run, now)
    return True


def settle_run(run: Run, now: datetime) -> int:
    """Settle every handoff of `run`, which ended, in one UPDATE (call inside its transaction); how many were
    in progress. Those become final as `settle` makes them: history, `handoff_changed` and a live event each."""
    pending = list(Handoff.objects.select_for_update().filter(run=run).filter(health.due_condition()).order_by("pk"))
    Handoff.objects.filter(run=run, settled_at__isnull=True).update(settled_at=now)
    if pending:
        Handoff.objects.filter(pk__in=[h.pk for h in pending]).update(updated_at=now)
    changed = []
    for handoff in pending:
        handoff.run = run
        before = signals.HandoffState.of(handoff)
        handoff.settled_at, handoff.updated_at = now, now
        changed.append((handoff, before))
    current = _current()
    for cached in current.handoffs.values() if current is not None else ():
        if cached.run_id == run.pk and cached.settled_at is None:
            cached.settled_at = now  # a batch that ends the run keeps its handoffs as they now are
    _announce_settled(changed, now)
    return len(changed)


def _existing_run(operation_id: str) -> Run | None:
    current = _current()
    if operation_id in current.runs:
        return current.runs[operation_id]
    if f"run:{operation_id}" in current.absent:
        return None
    return Run.objects.filter(operation_id=operation_id).first()


def _existing_handoff(handoff_id: str) -> Handoff | None:
    current = _current()
    if handoff_id not in current.handoffs and f"handoff:{handoff_id}" not in current.absent:
        found = Handoff.objects.select_for_update().filter(handoff_id=handoff_id).first()
        if found is not None:
            current.handoffs[handoff_id] = found
    return current.handoffs.get(handoff_id)


def _announce_settled(changed: list[tuple[Handoff, signals.HandoffState]], now: datetime) -> None:
    """What made verdicts final: a history row each (the verdict it keeps), the signal, the live event."""
    VerdictChange.objects.bulk_create(
        VerdictChange(handoff=h, verdict=h.verdict, boundary=h.boundary, cause=SETTLED, at=now) for h, _ in changed
    )
    signals.send_changes([signals.Change(h, SETTLED, before, signals.HandoffState.of(h), now) for h, before in changed])
    for handoff, _ in changed:
        _publish_after_commit(handoff, SETTLED, now)


def digest(*parts: object) -> str:
    """A short stable digest of `parts` (ids of dropped-evidence reports, handoff ids)."""
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]
