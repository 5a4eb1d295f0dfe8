"""Consecutive part entries of a batch recorded as one set: the same rules as `recording.record`, fewer queries.

`record` stores one receipt with a handful of statements; a batch of hundreds did that per receipt. Here a
run of part entries is checked in order first (the same errors, naming the same field, as entry by entry),
then the runs and handoffs it needs are created in bulk, every part is applied and classified in memory
in order, and the result is written with one UPDATE of the handoffs and one INSERT of the verdict
history, announced by one `handoffs_changed` signal. In a batch that can be redone (`batches.redoable`, on
PostgreSQL) a new handoff is not inserted when first met but once, classified, with the batch's other rows
(its key taken from the sequence with the new runs' INSERT); in such a batch of parts and reports a new run too,
with its health (`runwrites.new_rows`). The receipts, the events' sequence numbers and each
run's health follow at the end of the batch (`batches.batch`). Call inside `batches.batch()`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple

from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.utils import timezone

from receipts.ingest import batches, newrows, redactions, signals, sqlsets
from receipts.ingest.parts import (
    CLASSIFIED_FIELDS,
    PART_INDEX,
    apply_part,
    bundle_of,
    classify_into,
    ended_at,
    history_row,
    parsed,
    parsed_parts,
    publish_after_commit,
    receipt_row,
    timezone_clock,
    unsettled_by,
    validate_ids,
)
from receipts.ingest.sides import RunNotOwned, namespace, owner_problem
from receipts.models import FINAL_STATUS_PART, Handoff, Receipt, Run
from receipts.verdicts import bundle

logger = logging.getLogger(__name__)


class _Part(NamedTuple):
    """A part entry that passed its checks: where it goes, its minimized value (a tuple: one per receipt)."""

    index: int
    handoff_id: str
    operation_id: str
    part: str
    value: object
    attempt: str


def record_parts(entries: Sequence) -> list[bool]:
    """Store `entries` (intake.PartEntry) in order; one flag per entry: True when something new was stored.

    Raises `bundle.BundleError` (or `sides.RunNotOwned`) for the first entry, in order, that
    `recording.record` would refuse; nothing of the set is kept then (the caller's transaction fails).
    """
    stored = [False] * len(entries)
    with transaction.atomic(savepoint=False):
        parse = _PartCache()
        parts = _checked(entries, parse)
        if not parts:
            return stored
        # The runs and handoffs the set creates are created at one instant (ties in time are broken by key,
        # given in the order they are made, as the order of their times was).
        now = timezone.now()
        current = batches.current()
        new = _new_handoffs(parts)
        # A batch that can be redone takes the new handoffs' keys now and inserts them at its end (`batches.redoable`).
        count = len(new.keys() - current.raced) if current.redo else None
        missing = {p.operation_id for p in parts} - set(current.runs)
        # Such a batch inserts its new runs at its end too, with their health (`batches.Batch.new_runs`), but
        # those a previous attempt found taken: inserted now, read back locked.
        later = missing - current.raced_runs if count and current.runs_later else set()
        with sqlsets.together() if missing or count else contextlib.nullcontext():
            if count:
                batches.savepoint()  # before the batch's first write, in the same round trip
            sent = _send_runs(missing - later, count, len(later), now)
        keys = _create_runs(missing - later, sent, later, now)  # read once the block's statements were answered
        fresh = _create_handoffs(new, keys, now)
        changed, history, changes = _applied(parts, fresh, stored, parse)
        # Written, and the signal sent, at the end of the batch with its other rows (receipts.ingest.batches).
        batches.changed_handoffs(changed.values(), _fields_of(parts), history, changes)
    return stored


def _checked(entries: Sequence, parse: _PartCache) -> list[_Part]:
    """The entries that will be recorded, checked in order as `record` checks each (first problem raises);
    `parse` learns the part each stored value parses to.

    An outcome part without a handoff id goes to its run's latest handoff (one this batch creates counts) and
    is dropped when the run has none. A run this batch does not find is created as the writer's own.
    """
    current = batches.current()
    owner: dict[str, str] = {}  # handoff id -> operation id, for handoffs this set creates
    valid: set[tuple[str, str, str]] = set()  # (handoff, operation, attempt) ids checked already
    parts = []
    for index, entry in enumerate(entries):
        handoff_id = entry.handoff_id or _latest(entry.operation_id)
        if handoff_id is None:
            keep_on_run(entry)  # a run with no handoff keeps its outcome itself (spec v1.3)
            continue
        value, part = parsed(entry.part, entry.value)
        if part is not None:
            parse.learn(entry.part, value, part)
        redactions.note(entry.operation_id, entry.part, value)
        if (ids := (handoff_id, entry.operation_id, entry.attempt)) not in valid:
            validate_ids(*ids)
            valid.add(ids)
        run = current.runs.get(entry.operation_id)
        if run is not None and (problem := owner_problem(run)):
            logger.warning("receipt refused: %s", problem)
            raise RunNotOwned("operation_id", problem)
        handoff = current.handoffs.get(handoff_id)
        if handoff is None and handoff_id not in owner:
            owner[handoff_id] = entry.operation_id  # created by this set: its run's latest handoff from now on
            current.latest[entry.operation_id] = handoff_id
        if handoff is None:
            belongs = owner[handoff_id] == entry.operation_id
        else:
            belongs = run is not None and handoff.run_id == run.pk
        if not belongs:
            raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
        parts.append(_Part(index, handoff_id, entry.operation_id, entry.part, value, entry.attempt))
    return parts


def keep_on_run(entry) -> bool:
    """Keep an outcome part (verification, final status) on its run, which has no handoff to carry it.

    Spec v1.3 "Runs with no handoff": such a run is judged by its outcome (check 7 on the run). A wait stays
    dropped (a run waits through a handoff's wait receipt); so does a part for a run this batch does not know.
    True when the run's stored outcome changed; the run's health is refreshed at the end of the batch.
    """
    if entry.part not in ("verification", FINAL_STATUS_PART):
        return False
    run = batches.current().runs.get(entry.operation_id)
    if run is None:
        return False
    if problem := owner_problem(run):
        logger.warning("receipt refused: %s", problem)
        raise RunNotOwned("operation_id", problem)
    value, _ = parsed(entry.part, entry.value)
    validate_ids("run-outcome", entry.operation_id, entry.attempt)
    field = "verification" if entry.part == "verification" else "final_status"
    if getattr(run, field) == value:
        return False
    setattr(run, field, value)
    batches.changed_run(run, [field])  # written with the batch's runs at its end (receipts.ingest.runwrites)
    batches.refresh_health(run, None)
    return True


def _latest(operation_id: str) -> str | None:
    current = batches.current()
    if operation_id not in current.latest:
        current.latest[operation_id] = batches.latest_handoff_id(operation_id)
    return current.latest[operation_id]


def _send_runs(operation_ids: set[str], keys: int | None, later: int, now: datetime):
    """Send the INSERT of the runs no batch entry found (with `keys`, that many new handoff keys taken in the
    same statement, and `later` new run keys: `newrows.send_new`); a function giving what it made (and the
    keys)."""
    new = [_new_run(op, now) for op in operation_ids]
    wanted = [(Handoff, keys), (Run, later)] if keys is not None else None
    return newrows.send_new(Run, new, "operation_id", keys=wanted)


def _new_run(operation_id: str, now: datetime) -> Run:
    # issue 29 §4: the run is keyed by the side's namespace and the id
    return newrows.built(
        Run,
        operation_id=operation_id,
        thread_id=operation_id,
        source=Run.Source.AGENT,
        source_name=namespace(),
        created_at=now,
    )


def _create_runs(operation_ids: set[str], sent, later: set[str], now: datetime) -> list[int] | None:
    """Keep the runs `_send_runs` created; read back locked those another transaction created meanwhile; refuse
    another side's. Make those of `later` in memory, their keys taken: inserted whole, with their health, at
    the end of the batch (`batches.Batch.new_runs`), which is redone if another writer created one meanwhile.
    The new handoff keys it took (None when it took none)."""
    made = sent()
    made, taken = made if isinstance(made, tuple) else (made, [None, []])
    if operation_ids:
        _found_runs(operation_ids, made)
    if later:
        current = batches.current()
        for op, pk in zip(sorted(later), taken[1], strict=True):
            run = _new_run(op, now)
            run.pk = pk
            run._state.adding, run._state.db = False, DEFAULT_DB_ALIAS  # as `newrows.send_new` leaves one inserted
            current.new_runs[pk] = run
            current.made.add(pk)
            current.runs[op] = run
    return taken[0]


def _found_runs(operation_ids: set[str], made: list[Run]) -> None:
    """Keep the runs `_create_runs` made, and those another transaction created meanwhile (read back locked)."""
    current = batches.current()
    side = namespace()
    found = {run.operation_id: run for run in made}
    current.made.update(run.pk for run in found.values())  # not those read back below: another's
    if missing := operation_ids - set(found):
        raced = Run.objects.select_for_update().filter(source_name=side, operation_id__in=missing)
        found.update((run.operation_id, run) for run in raced)
    for op in sorted(operation_ids):
        if op not in found:
            raise IntegrityError(f"run {op} could not be created")  # another unique field clashed
        if problem := owner_problem(found[op]):
            logger.warning("receipt refused: %s", problem)
            raise RunNotOwned("operation_id", problem)
    current.runs.update(found)


def _new_handoffs(parts: Iterable[_Part]) -> dict[str, str]:
    """The handoffs no batch entry found: handoff id -> operation id, in the order first met."""
    current = batches.current()
    return {p.handoff_id: p.operation_id for p in parts if p.handoff_id not in current.handoffs}


def _create_handoffs(new: dict[str, str], keys: list[int] | None, now: datetime) -> set[int]:
    """Create the handoffs `new` (handoff id -> operation id); the pks of those this made.

    With `keys` (theirs, from the sequence: the batch can be redone, `batches.redoable`)
    they are made in memory, and inserted whole, classified, at the end of the batch (`batches.batch`), which is
    redone if another writer created one of them meanwhile; those a previous attempt found taken
    (`batches.Batch.raced`) are read back locked. Else they are inserted now (one INSERT), and a handoff another
    transaction created meanwhile is read back locked. Either way one read back is taken as found (its stored
    parts read too).
    """
    current = batches.current()
    wanted = {hid: current.runs[op] for hid, op in new.items()}
    if not wanted:
        return set()
    new_handoffs = [
        newrows.built(
            Handoff,
            handoff_id=hid,
            source_name=run.source_name,
            run=run,
            verdict="ROUTE_REJECTED",
            settled_at=ended_at(run),
            created_at=now,
            updated_at=now,
        )
        for hid, run in wanted.items()
        if keys is None or hid not in current.raced
    ]
    if keys is None:
        made = newrows.insert_new(Handoff, new_handoffs, "handoff_id")
    else:
        for handoff, pk in zip(new_handoffs, keys, strict=True):
            handoff.pk = pk  # the row is inserted at the end of the batch, whole
            current.create[pk] = handoff
        made = new_handoffs
    found = sorted(made, key=lambda handoff: handoff.pk)
    if missing := set(wanted) - {handoff.handoff_id for handoff in made}:
        raced = Handoff.objects.filter(source_name=namespace(), handoff_id__in=missing)
        found += raced.select_for_update().order_by("pk")
    for handoff in found:
        if handoff.run_id != wanted[handoff.handoff_id].pk:
            raise bundle.BundleError("operation_id", "does not match the operation this handoff belongs to")
        current.handoffs[handoff.handoff_id] = handoff
    # Only the recording path creates handoffs and it classifies them before commit: unclassified is ours.
    fresh = {handoff.pk for handoff in found if handoff.classified_at is None}
    current.stored.update((handoff.pk, set()) for handoff in found)
    if raced := [handoff.pk for handoff in found if handoff.pk not in fresh]:
        receipts = Receipt.objects.filter(handoff__in=raced).values_list("handoff_id", "part", "attempt")
        for pk, part, attempt in receipts:
            current.stored[pk].add((part, attempt))
    return fresh


def _applied(parts: list[_Part], fresh: set[int], stored: list[bool], parse: _PartCache):
    """Apply and classify every part in order, in memory: (changed handoffs, history rows, signal changes)."""
    current = batches.current()
    changed: dict[int, Handoff] = {}
    history: list[dict] = []
    changes: list[signals.Change] = []
    states: dict[int, signals.HandoffState] = {}  # pk -> the state the handoff's last change here left it in
    held: dict[int, list] = {}  # pk -> the handoff's parts, parsed (`parts.parsed_parts`), as applied so far
    clock = timezone_clock()  # each part's own time: a handoff's `updated_at` orders its changes
    for p in parts:
        run = current.runs[p.operation_id]
        handoff = current.handoffs[p.handoff_id]
        if handoff._state.fields_cache.get("run") is not run:  # `Handoff.run`'s cache, read once
            handoff.run = run
        pk = handoff.pk
        seen = current.stored[pk]
        if (p.part, p.attempt) in seen:
            continue
        seen.add((p.part, p.attempt))
        now = clock()
        current.receipts.append(receipt_row(handoff, p.part, p.attempt, p.value, now))
        first = pk in fresh
        fresh.discard(pk)
        before = None if first else handoff.verdict
        state_before = None if first else states.get(pk) or signals.HandoffState.of(handoff)
        if (found := held.get(pk)) is None:
            found = held[pk] = parsed_parts(handoff, parse)
        apply_part(handoff, p.part, p.value)
        if p.part in PART_INDEX:
            found[PART_INDEX[p.part]] = parse(p.part, p.value)
        unsettled_by(handoff, p.part, p.value)
        classify_into(handoff, now, bundle_of(handoff, run.operation_id, found))
        handoff.updated_at = now
        changed[pk] = handoff
        if handoff.verdict != before:
            history.append(history_row(handoff, p.part, now))
        batches.refresh_health(run, now)
        states[pk] = after = signals.HandoffState.of(handoff)
        changes.append(signals.Change(signals.snapshot(handoff), p.part, state_before, after, now))
        publish_after_commit(handoff, p.part, now)
        stored[p.index] = True
    return changed, history, changes


class _PartCache:
    """`bundle.parse_part` once per stored value of the set: a handoff is classified again after each part.

    A value this set minimized comes with the part it was minimized from (`learn`; `parts.parsed`: parsing
    the stored value again gives the same part); one read from the database is parsed on first use.
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, int], tuple[object, bundle.Part]] = {}

    def __call__(self, name: str, value: object) -> bundle.Part:
        hit = self._found.get((name, id(value)))
        if hit is None or hit[0] is not value:  # the value is kept with its part: its id stays its own
            hit = self._found[(name, id(value))] = (value, bundle.parse_part(name, value))
        return hit[1]

    def learn(self, name: str, value: object, part: bundle.Part) -> None:
        self._found[(name, id(value))] = (value, part)


def _fields_of(parts: Iterable[_Part]) -> list[str]:
    """The handoff fields the set's parts may have changed (`parts.apply_part`, `unsettled_by`, classifying)."""
    names = {"updated_at", "settled_at", *CLASSIFIED_FIELDS}
    for p in parts:
        if p.part == "final_status":
            names.add("final_status")
        elif p.part == "created":
            names |= {"created_part", "sender", "receiver", "route_version"}
        else:
            names.add(f"{p.part}_part")
    return sorted(names)
