"""Evidence entries: the one format in which receipts and reports reach the database.

Two producers speak it: this process's batched writer (`agents.observe.writer`, which
hands entries to a sink) and agents that run elsewhere (`POST /api/v1/receipts`,
whose body carries the same entries as JSON). Both end in `apply`, so a
receipt recorded locally and one posted from another host are stored,
classified and announced by the same code.

An entry is either

- a **part**: `{"kind": "part", "operation_id", "handoff_id", "part", "value", "attempt"}`
  (`part` one of spec §1's parts or `final_status`). `handoff_id` may be null for
  the run outcome parts (wait, verification, final_status): the part is then
  attached to the run's latest handoff; a run with none keeps its verification and
  final status itself (spec v1.3: it is judged by its outcome) and drops a wait.
- a **report**: `{"kind": "report", "operation_id", "agent", "report", "detail", "attempt"}`
  (a middleware report: `report` is a `MiddlewareReport.Kind`).
- a **settle**: `{"kind": "settle", "operation_id", "handoff_id"}`: the step in which the
  handoff's missing parts were due has finished, so no more evidence is due and its verdict
  is final (spec v1.2 "Settled"). Idempotent; a settle for a handoff not stored yet stores
  nothing and creates nothing (its flag is False).
- a **run** change (`RunEntry`, local only: `parse` does not read it, the API refuses it): the
  observer's change of its run's lifecycle (started, resumed, waiting, ended), applied by
  `receipts.ingest.lifecycle` in the same FIFO as the receipts, so a wait is stored before its run says waiting.
- a **pending** call: `{"kind": "pending", "operation_id", "pending_call"}`, a remote app's wait's gated tool
  and argument names (never values; `receipts.ingest.pendingcalls`), after the wait's receipts (issue 30 §3).

`parse` validates the shape only (types, names, which keys); the contents are
minimized and validated by `recording` as for every other receipt. Errors name
the field, prefixed with the entry's index (`entries[3].part`).

An entry's ids (operation and handoff id, attempt, agent, thread id, graph) are identifiers (spec v1.3): one
that `bundle.identifier_problem` refuses is replaced by its `redacted:` form when the entry is made, on either
side, so the same value finds the same run everywhere; `apply` files a `value_redacted` report naming it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from sidewisp_agent.entries import (  # noqa: F401 - the entries live in the agent package; read as intake.X
    Entry,
    PartEntry,
    PendingEntry,
    ReportEntry,
    RunEntry,
    SettleEntry,
    to_json,
)

from receipts.ingest import (
    batches,
    lifecycle,
    pendingcalls,
    recording,
    redactions,
    settling,
    setwise,
    silence,
)
from receipts.models import FINAL_STATUS_PART, RECEIPT_PARTS, MiddlewareReport, Run
from receipts.verdicts import bundle

OUTCOME_PARTS = ("wait", "verification", FINAL_STATUS_PART)
MAX_ENTRIES = 500


def parse(obj: object, where: str = "entry") -> Entry:
    """One entry from its JSON object; `bundle.BundleError` names the field (prefixed by `where`)."""
    if not isinstance(obj, Mapping):
        raise bundle.BundleError(where, "must be an object")
    kind = obj.get("kind")
    try:
        operation_id = bundle.parse_required_identifier(obj.get("operation_id"), "operation_id")
        attempt = bundle.parse_required_identifier(obj.get("attempt", "1"), "attempt")
        if kind == "part":
            part = obj.get("part")
            if part not in (*RECEIPT_PARTS, FINAL_STATUS_PART):
                raise bundle.BundleError("part", f"must be one of {', '.join((*RECEIPT_PARTS, FINAL_STATUS_PART))}")
            handoff_id = obj.get("handoff_id")
            if handoff_id is None:
                if part not in OUTCOME_PARTS:
                    raise bundle.BundleError("handoff_id", f"is required for the {part} part")
            else:
                handoff_id = bundle.parse_required_identifier(handoff_id, "handoff_id")
            return PartEntry(operation_id, handoff_id, part, obj.get("value"), attempt)
        if kind == "report":
            detail = obj.get("detail", {})
            if not isinstance(detail, Mapping):
                raise bundle.BundleError("detail", "must be an object")
            report = obj.get("report")
            if not isinstance(report, str):
                raise bundle.BundleError("report", "must be a string")
            agent = bundle.parse_required_identifier(obj.get("agent"), "agent")
            return ReportEntry(operation_id, agent, report, detail, attempt)
        if kind == "settle":
            return SettleEntry(operation_id, bundle.parse_required_identifier(obj.get("handoff_id"), "handoff_id"))
        if kind == "pending":
            return PendingEntry(operation_id, pendingcalls.parse(obj.get("pending_call")))
        raise bundle.BundleError("kind", 'must be "part", "report", "settle" or "pending"')
    except bundle.BundleError as exc:
        raise bundle.BundleError(f"{where}.{exc.field}", exc.message) from None


def parse_many(objs: object, where: str = "entries") -> list[Entry]:
    """A list of entries (at most MAX_ENTRIES); the first invalid one raises, naming its index."""
    if not isinstance(objs, list):
        raise bundle.BundleError(where, "must be a list")
    if len(objs) > MAX_ENTRIES:
        raise bundle.BundleError(where, f"must hold at most {MAX_ENTRIES} entries")
    return [parse(obj, f"{where}[{i}]") for i, obj in enumerate(objs)]


def apply(entries: Sequence[Entry]) -> list[bool]:
    """Store `entries` in order; one flag per entry: True when something new was stored.

    Each entry is minimized and validated by `receipts.ingest.recording` (which raises
    `bundle.BundleError` naming the field); an entry already stored for its
    attempt stores nothing again (idempotent). Callers decide the transaction:
    the API wraps a request in one (all or nothing), the local writer one per batch.
    Inside that transaction the entries are one `batches.batch()`: runs, handoffs and
    contracts read once, each run's health refreshed once. Consecutive part entries are
    recorded as one set (`receipts.ingest.setwise`); the other entries (reports, settles and any
    other kind) are applied in order between those sets, each through `_apply_one`. Values redacted on the
    way in (`receipts.ingest.redactions`) are reported on their runs after the entries, in the same batch.

    A batch of its own inserts its new handoffs once, classified, at its end (`batches.redoable`): when another
    writer created one of them meanwhile, the batch is rolled back to its start and redone with those read
    back as found; at most `REDOS` times, then as a batch inside another one (each inserted when first met).
    """
    own = batches.current() is None  # else an outer batch (the API's) writes at its end: nothing to redo here
    raced: set[str] = set()
    raced_runs: set[str] = set()
    for attempt in range(REDOS + 1):
        try:
            return _apply(entries, raced if own and attempt < REDOS else None, raced_runs)
        except batches.Raced as exc:
            raced |= exc.handoff_ids
            raced_runs |= exc.operation_ids
    raise AssertionError  # unreachable: the last attempt cannot be raced


REDOS = 2


def _apply(entries: Sequence[Entry], raced: set[str] | None, raced_runs: set[str] = frozenset()) -> list[bool]:
    """`apply` once; `raced` (handoff ids found taken before) when the batch may be redone, `raced_runs` (operation
    ids found taken before)."""
    with batches.batch(), redactions.collecting() as redacted:
        batches.prefetch(
            (entry.operation_id for entry in entries),
            (entry.handoff_id for entry in entries if isinstance(entry, PartEntry | SettleEntry) and entry.handoff_id),
            latest_of=(e.operation_id for e in entries if isinstance(e, PartEntry) and not e.handoff_id),
            classify=any(isinstance(entry, PartEntry) for entry in entries),
        )
        found = batches.current().handoffs
        if raced is not None and any(
            isinstance(e, PartEntry) and e.handoff_id and e.handoff_id not in found for e in entries
        ):
            # It creates handoffs: inserted once, at its end; its new runs too when only parts and reports may
            # meet them (a run entry, a settle, a pending call read a run or announce a change as they go).
            batches.redoable(raced, raced_runs, runs=all(isinstance(e, PartEntry | ReportEntry) for e in entries))
        stored: list[bool] = []
        for parts, other in _segments(entries):
            for entry in parts or [other]:
                _note_redacted_ids(entry)
            if not parts:
                batches.writes_now()
            stored += setwise.record_parts(parts) if parts else [_apply_one(other)]
        _report_redacted(redacted)
        runs = batches.current().runs
        silence.heard_from(runs[op] for op in dict.fromkeys(entry.operation_id for entry in entries) if op in runs)
        return stored


def _note_redacted_ids(entry: Entry) -> None:
    if isinstance(entry, PartEntry):
        redactions.note_ids(entry.operation_id, entry.part, handoff_id=entry.handoff_id, attempt=entry.attempt)
    elif isinstance(entry, SettleEntry):
        redactions.note_ids(entry.operation_id, "settle", handoff_id=entry.handoff_id)
    elif isinstance(entry, RunEntry):
        redactions.note_ids(entry.operation_id, "run", thread_id=entry.thread_id, graph=entry.graph)


def _report_redacted(found: dict[tuple[str, str, str], None]) -> None:
    """One `value_redacted` report per run, part and field (once: its attempt is a digest of part and field)."""
    for operation_id, part, field in list(found):
        if batches.current().runs.get(operation_id) is None and not _run_exists(operation_id):
            continue  # nothing of that run was stored (an outcome with no handoff yet): no run to report on
        detail = {"part": part, "field": field[: bundle.MAX_STRING_LENGTH]}
        kind = MiddlewareReport.Kind.VALUE_REDACTED
        attempt = f"redact-{recording.digest(part, field)}"
        recording.record_report(operation_id, recording.OBSERVER, kind, detail, attempt)


def _run_exists(operation_id: str) -> bool:
    return Run.objects.filter(operation_id=operation_id).exists()


def _segments(entries: Sequence[Entry]) -> Iterator[tuple[list[PartEntry], Entry | None]]:
    """The entries in order as (consecutive part entries, None) and ([], one other entry)."""
    parts: list[PartEntry] = []
    for entry in entries:
        if isinstance(entry, PartEntry):
            parts.append(entry)
            continue
        if parts:
            yield parts, None
            parts = []
        yield [], entry
    if parts:
        yield parts, None


def _apply_one(entry: Entry) -> bool:
    if isinstance(entry, ReportEntry):
        report = (entry.operation_id, entry.agent, entry.report, dict(entry.detail), entry.attempt)
        return recording.record_report(*report)
    if isinstance(entry, SettleEntry):
        return settling.settle(handoff_id=entry.handoff_id, operation_id=entry.operation_id)
    if isinstance(entry, RunEntry):
        return lifecycle.apply(entry)
    if isinstance(entry, PendingEntry):
        return pendingcalls.store(entry.operation_id, entry.pending_call)
    handoff_id = entry.handoff_id or batches.latest_handoff_id(entry.operation_id)
    if handoff_id is None:
        return setwise.keep_on_run(entry)
    result = recording.record(
        handoff_id=handoff_id,
        operation_id=entry.operation_id,
        part=entry.part,
        value=entry.value,
        attempt=entry.attempt,
    )
    return result.stored
