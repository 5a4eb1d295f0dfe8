"""The run rows a recording batch changed, written once at its end: status, heartbeat, health, sequence numbers.

Inside a batch (`receipts.ingest.batches`) nothing writes a run's row as it goes: a status set
(`receipts.ingest.runs.set_status`), a heartbeat (`silence.heard_from`), an outcome kept on a run with no
handoff (`setwise.keep_on_run`) note their fields (`batches.changed_run`); the run's health is judged once
(`healthsets.judge`, with those fields as they will be stored) and the events the batch announces on it take
their sequence numbers. All of it goes to the database in one UPDATE per distinct set of fields written (one
in a typical batch: every run of it writes the same fields), which also takes the sequence numbers
(`UPDATE … RETURNING`). The batch's transaction holds the run rows from then until it commits.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from datetime import datetime

from django.utils import timezone

from receipts.ingest import healthsets, lastwrite, sqlsets
from receipts.models import Run


def new_rows(found) -> list[dict]:
    """The rows of the batch `found`'s new runs (`batches.Batch.new_runs`), inserted whole with its other rows:
    what inserting each when first met, then `finish`'s UPDATE, stored (its fields as the batch changed them, its
    health judged from the batch's rows: `healthsets.in_memory`, its events' sequence numbers). `finish` then
    leaves them out, but for what changes them afterwards (a signal's receiver)."""
    if not found.new_runs:
        return []
    found.judged_at = now = _now(found)
    stale = [run for pk, run in found.new_runs.items() if pk in found.stale]
    read = healthsets.in_memory(stale, found.handoffs.values(), found.history, found.alarms)
    judged = healthsets.judge(stale, now, found.dirty, read)
    rows = []
    names, values_of = _columns()
    for pk, run in found.new_runs.items():
        row = dict(zip(names, values_of(run), strict=True))
        for name, value in (*found.dirty.pop(pk, {}).items(), *judged.get(pk, {}).items()):
            row[_attname(name)] = value
        row["updated_at"] = row["updated_at"] or timezone.now()  # auto_now: when inserted, if nothing set it
        row["seq"] = found.written[pk] = len(found.events.get(pk, (run, []))[1])
        if found.stale.pop(pk, None) is not None:
            found.judged.add(pk)
        rows.append(row)
    return rows


@functools.cache
def _columns() -> tuple[tuple[str, ...], Callable]:
    """A run's fields' attribute names, and a function giving their values of a run (as `getattr` each, in C)."""
    names = tuple(field.attname for field in Run._meta.concrete_fields)
    return names, operator.attrgetter(*names)


@functools.cache
def _attname(name: str) -> str:
    """The attribute name of the run's field `name`, looked up once."""
    return Run._meta.get_field(name).attname


def _now(found) -> datetime:
    """The time a batch's runs are judged at: its latest part's, else now."""
    return max((at for _, at in found.stale.values() if at), default=None) or found.judged_at or timezone.now()


def finish(found, read: healthsets.Read | None = None) -> None:
    """Judge, write and number the batch `found` (a `batches.Batch`) at its end, before its transaction commits;
    `read` is the runs' health inputs if they were read already (`healthsets.read`)."""
    stale = list(found.stale.values())
    now = max(filter(None, (_now(found), found.judged_at)))
    judged = healthsets.judge([run for run, _ in stale], now, found.dirty, read)
    writes = {pk: dict(values) for pk, values in found.dirty.items()}
    for pk, values in judged.items():
        writes.setdefault(pk, {}).update(values)
    written = found.written  # the new runs' events numbered when inserted (`new_rows`)
    counts = {pk: n for pk, (_, events) in found.events.items() if (n := len(events) - written.get(pk, 0))}
    healths = {pk: run.health for pk, (run, _) in found.stale.items()}
    healths |= {pk: found.new_runs[pk].health for pk in found.judged if pk not in healths}

    def numbered(last: Mapping[int, int]) -> None:
        last = {**written, **last}
        for pk, (_, events) in found.events.items():
            for seq, event in enumerate(events, start=last.get(pk, 0) - len(events) + 1):
                event["seq"] = seq
                if event["type"] == "run.changed" and pk in healths:
                    event["health"] = healths[pk]  # as judged now: the status it announces was set in this batch

    _write(writes, counts, numbered)


def _write(writes: Mapping[int, Mapping[str, object]], counts: Mapping[int, int], then: Callable) -> None:
    """One UPDATE per distinct set of fields; each counted run's `seq` grows by its count. `then` is given
    pk -> its new seq once known: the last UPDATE may wait for the commit and go with it (`lastwrite.update_last`)."""
    meta = Run._meta
    groups: dict[tuple[str, ...], list[dict]] = {}
    for pk in sorted({*writes, *counts}):  # in primary-key order, as every writer of runs locks them
        values = writes.get(pk, {})
        # A row to write, not a Run (`sqlsets`: building a Run costs more than writing its row).
        row = {meta.pk.attname: pk, "seq": counts.get(pk, 0)}
        row.update((_attname(name), value) for name, value in values.items())
        groups.setdefault(tuple(sorted(values)), []).append(row)
    last: dict[int, int] = {}
    groups = {names: rows for names, rows in groups.items() if names or any(row["seq"] for row in rows)}
    if not groups:
        then(last)
        return
    *first, (names, rows) = groups.items()
    for names_, rows_ in first:
        last |= sqlsets.update_rows(Run, rows_, names_, add=_added(rows_))
    lastwrite.update_last(Run, rows, names, add=_added(rows), then=lambda found: then(last | found))


def _added(rows: list[dict]) -> str | None:
    return "seq" if any(row["seq"] for row in rows) else None
