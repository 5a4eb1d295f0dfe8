"""One batch of recording: what it reads once (contracts, runs, locked handoffs) and writes together at its end.

Inside `batch()` (the batched writer and the receipts API record many entries in one transaction) the
contracts are read once, runs are looked up once, and each touched run's health is refreshed once at the end
instead of per receipt. `recording` and `setwise` record into the current batch.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F, JSONField, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from receipts.ingest import healthsets, runwrites, signals, sqlsets
from receipts.ingest.contracts import current_contracts, current_contracts_sent
from receipts.ingest.sequence import next_seq
from receipts.ingest.sides import namespace
from receipts.models import Handoff, Receipt, Run, VerdictChange
from receipts.queries.compiled import Compiled, slot
from receipts.queries.lookups import AnyOf
from receipts.verdicts import bundle


@dataclass
class Batch:
    """What one batch reads once and writes together (see `batch`)."""

    contracts: bundle.Contracts | None = None
    runs: dict[str, Run] = field(default_factory=dict)  # operation id -> run (of the side recording: `namespace`)
    handoffs: dict[str, Handoff] = field(default_factory=dict)  # handoff id -> handoff (the side's), locked
    absent: set[str] = field(default_factory=set)  # operation and handoff ids `prefetch` found no row for
    stored: dict[int, set[tuple[str, str]]] = field(default_factory=dict)  # handoff pk -> (part, attempt)s
    receipts: list[dict] = field(default_factory=list)  # rows (`parts.receipt_row`) inserted together at the end
    events: dict[int, tuple[Run, list[dict]]] = field(default_factory=dict)  # run pk -> events awaiting a seq
    db: object = None  # this thread's connection (a BaseDatabaseWrapper), looked up once (`after_commit`)
    stale: dict[int, tuple[Run, datetime | None]] = field(default_factory=dict)  # runs whose health to refresh
    latest: dict[str, str | None] = field(default_factory=dict)  # operation id -> its latest handoff's id
    dirty: dict[int, dict[str, object]] = field(default_factory=dict)  # run pk -> fields to write at the end
    made: set[int] = field(default_factory=set)  # pks of the runs this batch created: their handoffs are its own
    rewrite: dict[int, Handoff] = field(default_factory=dict)  # pk -> a handoff whose row to write at the end
    rewrite_fields: set[str] = field(default_factory=set)  # the fields of them to write
    history: list[dict] = field(default_factory=list)  # verdict history rows (`parts.history_row`), inserted at the end
    changes: list = field(default_factory=list)  # `signals.Change`s, sent at the end once their rows are written
    redo: bool = False  # set by `redoable`: new handoffs are inserted at the end, classified
    savepoint: str | None = None  # where a redone batch starts again (`savepoint`), kept until commit
    announced: int = 0  # how many after-commit callbacks the transaction had at the savepoint
    raced: set[str] = field(default_factory=set)  # handoff ids a previous attempt found taken: read them back
    create: dict[int, Handoff] = field(default_factory=dict)  # pk -> a new handoff to insert whole at the end
    runs_later: bool = False  # set by `redoable`: new runs are inserted at the end too, with their health
    new_runs: dict[int, Run] = field(default_factory=dict)  # pk -> a new run to insert whole at the end
    raced_runs: set[str] = field(default_factory=set)  # operation ids a previous attempt found taken
    alarms: dict[int, list[tuple[str, dict]]] = field(default_factory=dict)  # run pk -> reports made: (kind, detail)
    written: dict[int, int] = field(default_factory=dict)  # new run pk -> the seq it was inserted with
    judged: set[int] = field(default_factory=set)  # new runs whose health was judged when inserted
    judged_at: datetime | None = None  # when they were (`runwrites.new_rows`)
    # The active verdict alert rules, when read with the contracts (`contracts.current_contracts_sent`)
    verdict_rules: list[tuple] | None = None


class Raced(Exception):
    """New handoffs (or runs, by operation id) another writer created after the batch looked for them: its
    savepoint was rolled back."""

    def __init__(self, handoff_ids: set[str], operation_ids: set[str] = frozenset()) -> None:
        super().__init__(f"{len(handoff_ids)} handoff(s), {len(operation_ids)} run(s) created meanwhile")
        self.handoff_ids, self.operation_ids = handoff_ids, set(operation_ids)


_local = threading.local()


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Record several receipts and reports as one unit of work; call inside a transaction.

    Contracts are read once; runs, locked handoffs and their stored parts are read
    once (`prefetch` reads them for many entries in one query each). At the end of
    the block, before the caller commits, the receipts are inserted together, and
    the runs' rows are written once (`receipts.ingest.runwrites`: the fields the
    batch changed, each run's health judged once, its events' sequence numbers).
    A handoff's own row and verdict history are written per receipt, before
    `handoff_changed` is sent, so receivers see them. Nested blocks join the outer one.
    """
    if current() is not None:
        yield
        return
    _local.batch = found = Batch()
    try:
        yield
        # The handoffs' rows are locked by this transaction: writing every changed field of each from memory is
        # what each change would have written. One round trip with the history and the receipts, the new
        # handoffs inserted in it whole (their keys taken before: `setwise`).
        rewrite = [handoff for pk, handoff in found.rewrite.items() if pk not in found.create]
        handoffs = (Handoff, rewrite, sorted(found.rewrite_fields))
        # The new runs whole, their health judged from the batch's own rows (every handoff of a new run is new).
        new = [(Handoff, found.create.values()), (Run, runwrites.new_rows(found))]
        with sqlsets.together():  # the writes, then what the runs' health is judged from: one round trip
            made = sqlsets.write_together([handoffs], [(VerdictChange, found.history), (Receipt, found.receipts)], new)
            judged = healthsets.read(found.stale)
        made_handoffs, made_runs = made()
        raced = {handoff.handoff_id for pk, handoff in found.create.items() if pk not in made_handoffs}
        raced_runs = {run.operation_id for pk, run in found.new_runs.items() if pk not in made_runs}
        if raced or raced_runs:
            # Another writer created them after this batch looked: nothing of this batch is kept (its events
            # neither), its caller redoes it with those handoffs and runs read back as found.
            connection.savepoint_rollback(found.savepoint)
            del connection.run_on_commit[found.announced :]  # this batch's events: never sent
            raise Raced(raced, raced_runs)
        signals.send_changes(found.changes)  # receivers read the rows as they now are
        runwrites.finish(found, judged)
    finally:
        _local.batch = None


def redoable(raced: Iterable[str] = (), raced_runs: Iterable[str] = (), *, runs: bool = False) -> None:
    """Let the current batch insert its new handoffs once, classified, at its end: its caller redoes it
    whole if another writer created one of them meanwhile (`Raced`). Call after `prefetch`, before anything of
    the batch is written; `savepoint` must then precede its first write (`writes_now` else). `raced`: handoff
    ids a previous attempt found taken, read back locked when the batch does not find them (`setwise`).
    With `runs` (nothing of the batch reads a run from the database) its new runs too, with their health
    (`runwrites.new_rows`); `raced_runs`: operation ids found taken before, inserted when first met.
    PostgreSQL only (elsewhere the new handoffs are inserted when first met, then updated: nothing to redo),
    not in autocommit.
    """
    found = current()
    found.raced, found.raced_runs = set(raced), set(raced_runs)
    found.redo = connection.vendor == "postgresql" and connection.in_atomic_block
    found.runs_later = found.redo and runs


def writes_now() -> None:
    """The current batch writes a row now (an entry that is not a part): a redoable batch whose savepoint is not
    open yet inserts its handoffs as it meets them from now on (its savepoint would cost a round trip alone)."""
    found = current()
    if found.savepoint is None:
        found.redo = found.runs_later = False


def savepoint() -> None:
    """Open the savepoint a redoable batch (`redoable`) is rolled back to, unless open already: sent now (inside
    a `sqlsets.together` block, with the statements after it). Nothing for another batch."""
    found = current()
    if found.redo and found.savepoint is None:
        found.savepoint = connection.savepoint()
        found.announced = len(connection.run_on_commit)  # the after-commit work registered before it


def prefetch(
    operation_ids: Iterable[str], handoff_ids: Iterable[str], latest_of: Iterable[str] = (), *, classify: bool = False
) -> None:
    """Read (and lock, in primary-key order) the runs, handoffs and stored parts a batch will record into;
    for the runs in `latest_of` (outcome parts without a handoff id) their latest handoff too; with `classify`
    (the batch has parts to classify) the current contracts.

    On PostgreSQL the reads go together (`sqlsets.together`): one round trip with the transaction's BEGIN, or
    two when `latest_of` names runs (their latest handoffs are known once the runs are read).
    """
    found = current()
    latest_of = set(latest_of)
    operation_ids = (set(operation_ids) | latest_of) - set(found.runs)
    handoff_ids = set(handoff_ids)
    side = namespace()
    with sqlsets.together():
        runs = _read("runs+latest" if latest_of else "runs", side, operation_ids)
        if latest_of:
            _found_runs(runs(), operation_ids, latest_of)
            handoff_ids |= {found.latest[op] for op in latest_of if found.latest.get(op)}
        wanted = handoff_ids - set(found.handoffs)
        handoffs = _read("handoffs", side, wanted)
        checked = None
        if classify and found.contracts is None and connection.vendor == "postgresql":
            # The cache's check goes with the reads; elsewhere it is read when first needed (no round trip to share).
            checked = current_contracts_sent()
    # Read once every statement of the block was answered (the block's end waits for that once; a read inside
    # it would wait alone first).
    if checked is not None:
        found.contracts, found.verdict_rules = checked()
    if not latest_of:
        _found_runs(runs(), operation_ids, latest_of)
    locked = handoffs()  # the side's ids (issue 29 §4)
    found.handoffs.update((handoff.handoff_id, handoff) for handoff, _ in locked)
    found.absent |= {f"handoff:{handoff_id}" for handoff_id in wanted - set(found.handoffs)}
    found.stored.update((handoff.pk, {(part, attempt) for part, attempt in stored or ()}) for handoff, stored in locked)


def _found_runs(rows: Iterable[tuple], operation_ids: set[str], latest_of: set[str]) -> None:
    """Keep the runs `prefetch` read (and their latest handoffs' ids for those in `latest_of`)."""
    found = current()
    for run, latest in rows:
        found.runs[run.operation_id] = run
        if run.operation_id in latest_of:
            found.latest[run.operation_id] = latest
    found.latest.update((op, None) for op in latest_of - set(found.runs))
    found.absent |= {f"run:{op}" for op in operation_ids - set(found.runs)}


def _read(name: str, side: str, ids: Iterable) -> Callable[[], list[tuple]]:
    """Run `prefetch`'s query `name` (`_query`) for the side's `ids`; a function giving its rows once fetched,
    each (instance, its extra column): a run's latest handoff's id ("runs+latest"), a handoff's stored
    (part, attempt)s, else None. On PostgreSQL the query is sent now (fetched when asked, `sqlsets.together`)
    and compiled once per process (`_compiled`): compiling anew cost more than running it. Its ids are bound by
    the server (`receipts.queries.prepared`), not quoted into its text."""
    ids = list(ids)
    if not ids:
        return list
    if connection.vendor != "postgresql":  # no array parameter: the ORM's query, ids inlined, run when asked
        model, query = _query(name, side, lambda field: Q(**{f"{field}__in": ids}))
        return functools.partial(_each, model, query)
    query = _compiled(name)
    return functools.partial(_fetched, query.send(bound=True, side=side, ids=ids), query)


def _each(model: type, query: QuerySet) -> list[tuple]:
    """`_read`'s rows from the ORM (not PostgreSQL): the handoffs' stored parts in a query of their own."""
    if model is not Handoff:
        return [(obj, getattr(obj, "latest_handoff", None)) for obj in query]
    handoffs = list(query)
    stored: dict[int, list] = {handoff.pk: [] for handoff in handoffs}
    for pk, part, attempt in Receipt.objects.filter(handoff__in=stored).values_list("handoff_id", "part", "attempt"):
        stored[pk].append((part, attempt))
    return [(handoff, stored[handoff.pk]) for handoff in handoffs]


def _fetched(cursor, query: Compiled) -> list[tuple]:
    with cursor:
        found = query.instances(cursor.fetchall())
    return [(obj, _extra(obj)) for obj in found]


def _extra(obj) -> object:
    return obj.stored if isinstance(obj, Handoff) else getattr(obj, "latest_handoff", None)


def _stored_parts() -> RawSQL:
    """A handoff's stored receipts' [part, attempt] pairs as one JSON array (NULL for none), read with the
    handoff in the same statement."""
    receipts, handoffs = (connection.ops.quote_name(model._meta.db_table) for model in (Receipt, Handoff))
    sql = (
        f"SELECT jsonb_agg(jsonb_build_array(r.part, r.attempt)) FROM {receipts} r"
        f" WHERE r.handoff_id = {handoffs}.{connection.ops.quote_name(Handoff._meta.pk.column)}"
    )
    return RawSQL(sql, [], output_field=JSONField())


@functools.cache
def _compiled(name: str) -> Compiled:
    """`_query(name)` compiled once, its side and ids slots (the ids one array parameter)."""
    ids = slot("ids", "%s::text[]")
    return Compiled.of(_query(name, slot("side"), lambda field: AnyOf(F(field), ids))[1])


def _query(name: str, side, among: Callable) -> tuple[type, QuerySet]:
    """`prefetch`'s queries: the side's runs (with their latest handoff's id: "runs+latest"), and its handoffs
    locked in primary-key order (on PostgreSQL with their stored (part, attempt)s: `_stored_parts`); with the model
    their rows are of. `among` gives the condition that a field's value is one of the ids."""
    if name == "handoffs":
        handoffs = Handoff.objects.filter(among("handoff_id"), source_name=side)
        if connection.vendor == "postgresql":
            handoffs = handoffs.annotate(stored=_stored_parts())
        return Handoff, handoffs.select_for_update().order_by("pk")
    runs = Run.objects.filter(among("operation_id"), source_name=side)
    if name == "runs+latest":
        newest = Handoff.objects.filter(run=OuterRef("pk")).order_by("-created_at", "-pk").values("handoff_id")
        runs = runs.annotate(latest_handoff=Subquery(newest[:1]))
    return Run, runs


def current() -> Batch | None:
    """The batch open on this thread, None outside `batch()`."""
    return getattr(_local, "batch", None)


def atomic() -> transaction.Atomic:
    # Inside a batch a failure fails the whole batch (the writer then retries entry by entry; the API
    # refuses the request): no savepoint per receipt.
    return transaction.atomic(savepoint=current() is None)


def changed_run(run: Run, names) -> bool:
    """Write the fields `names` of `run` (their values now) at the end of the current batch; False outside one
    (the caller writes them itself)."""
    found = current()
    if found is None:
        return False
    found.dirty.setdefault(run.pk, {}).update((name, getattr(run, name)) for name in names)
    return True


def changed_handoffs(handoffs: Iterable[Handoff], names: Iterable[str], history=(), changes=()) -> bool:
    """Write the fields `names` of `handoffs` (locked rows of this batch) at the end of the current batch, with
    the verdict `history` rows, then send `changes` (`signals.Change`, in order); False outside a batch."""
    found = current()
    if found is None:
        return False
    found.rewrite.update((handoff.pk, handoff) for handoff in handoffs)
    found.rewrite_fields.update(names)
    found.history += history
    found.changes += changes
    return True


def reported(run: Run, kind: str, detail: dict) -> None:
    """A report made on `run` in the current batch: a new run's health is judged from them (`runwrites.new_rows`)."""
    if run.pk in (found := current()).new_runs:
        found.alarms.setdefault(run.pk, []).append((kind, detail))


def refresh_health(run: Run, now: datetime | None) -> None:
    """Refresh `run`'s health once, at the end of the current batch."""
    current().stale[run.pk] = (run, now)


def stored_parts(handoff: Handoff, new: bool) -> set[tuple[str, str]]:
    """The (part, attempt)s stored for `handoff`, read once per batch (none for a handoff it created)."""
    found = current()
    if handoff.pk not in found.stored:
        rows = () if new else Receipt.objects.filter(handoff=handoff).values_list("part", "attempt")
        found.stored[handoff.pk] = set(rows)
    return found.stored[handoff.pk]


def contracts() -> bundle.Contracts:
    """The current contracts, read once per batch."""
    found = current()
    if found is None:
        return current_contracts()
    if found.contracts is None:
        found.contracts = current_contracts()
    return found.contracts


def sequenced(run: Run, event: dict) -> None:
    """Give `event` the run's next sequence number: now, or at the end of the current batch."""
    found = current()
    if found is None:
        event["seq"] = next_seq(run)
    else:
        found.events.setdefault(run.pk, (run, []))[1].append(event)


def after_commit(func: Callable[[], object]) -> None:
    """`transaction.on_commit(func)`; in a batch on its connection looked up once (per receipt, looking it up
    cost as much as the rest of announcing the receipt's event)."""
    found = current()
    if found is None:
        transaction.on_commit(func)
        return
    if found.db is None:
        found.db = transaction.get_connection()
    found.db.on_commit(func)


def latest_handoff_id(operation_id: str) -> str | None:
    """The id of the run's latest handoff (by creation), None when the run has none."""
    latest = (
        Handoff.objects.filter(run__source_name=namespace(), run__operation_id=operation_id)
        .order_by("-created_at", "-pk")
        .values_list("handoff_id", flat=True)
        .first()
    )
    return latest
