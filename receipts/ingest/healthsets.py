"""Many runs' health at the end of one recording batch: `health.refresh`'s rules, read for all the runs at once.

`receipts.ingest.batches` calls `judge` for the runs a batch touched (one run or two hundred: the same few
queries, grouped by run) and writes what changed together with the run fields the batch changed itself
(`receipts.ingest.runwrites`): a run's status set in the batch is judged as it will be stored (`pending`).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from django.db.models.expressions import RawSQL

from receipts.ingest.assessment import SETTLED_FALSE_COMPLETE, SETTLEMENT_CAUSES, assess, run_outcome
from receipts.ingest.due import due_condition, due_of_verdict, latest_code
from receipts.ingest.health import ALARM_KINDS, SUMMARY_FIELDS, UNPROBLEMATIC
from receipts.queries.lookups import AnyOf

# The run fields `judge` reads as stored; a batch that changed one of them gives its new value (`pending`).
OWN_FIELDS = ("status", "error", "final_status", "verification")
WRITTEN = ("health", "health_reasons", "updated_at", *SUMMARY_FIELDS)


def judge(
    runs, now: datetime, pending: Mapping[int, Mapping[str, object]] | None = None, started: Read | None = None
) -> dict[int, dict]:
    """Each run's new health and summary, set on the run objects; pk -> the fields to store (`WRITTEN`) of the
    runs whose health or summary changed (none for the others).

    `pending` (pk -> field values the batch will write) stands in for the stored `OWN_FIELDS`; `started` is
    what `read` started for these runs, if it did (sent with the statements before it).
    """
    runs = {run.pk: run for run in runs}
    if not runs:
        return {}
    if started is None or started.runs != set(runs):
        started = read(runs)
    inputs = started.rows()
    rows = {row["pk"]: row for row in inputs["stored"]}
    for pk, values in (pending or {}).items():
        if pk in rows:
            rows[pk].update((name, value) for name, value in values.items() if name in OWN_FIELDS)
    counts = _verdict_counts(inputs["counts"])
    settled: dict[int, set[int]] = {}
    for run_id, pk in inputs["settled"]:
        settled.setdefault(run_id, set()).add(pk)
    reports: dict[int, list[tuple[str, Mapping | None, int]]] = {}
    for run_id, kind, detail, n in inputs["reports"]:
        reports.setdefault(run_id, []).append((kind, detail, n))
    changed: dict[int, dict] = {}
    for pk, row in rows.items():
        verdicts, in_progress = counts.get(pk, ({}, {}))
        facts = _facts(row, verdicts, in_progress, settled.get(pk, set()), reports.get(pk, []))
        found = assess(**facts)
        kept = _summary_of(row, facts["verdicts"], in_progress)
        run = runs[pk]
        run.health, run.health_reasons = found.level, found.reasons
        for name, value in kept.items():
            setattr(run, name, value)
        same = (row["health"], row["health_reasons"]) == (found.level, found.reasons)
        if not same or any(row[name] != value for name, value in kept.items()):
            run.updated_at = now
            changed[pk] = {name: getattr(run, name) for name in WRITTEN}
    return changed


def _facts(row: Mapping, verdicts: dict, in_progress: dict, settled: set[int], reports: list) -> dict:
    """`assess`'s keyword arguments for one run, as `inputs` gives them."""
    verdicts = dict(verdicts)
    if verdicts.get("FALSE_COMPLETE"):
        verdicts["FALSE_COMPLETE"] -= len(settled)
        verdicts[SETTLED_FALSE_COMPLETE] = len(settled)
    latest = None
    if row["status"] == "complete" and verdicts:
        latest = "settled" if row["latest_pk"] in settled else (row["latest_verification"] or {}).get("result")
    return {
        "status": row["status"],
        "error": row["error"],
        "verdicts": verdicts,
        "reports": reports,
        "latest_verification": latest,
        "in_progress": in_progress,
        **(run_outcome(row["status"], row["final_status"], row["verification"]) if not verdicts else {}),
    }


def _summary_of(row: Mapping, verdicts: Mapping[str, int], in_progress: Mapping[str, int]) -> dict:
    """`summary` from verdict counts and the newest handoff read with the run."""
    total = sum(verdicts.values())
    newest = row["newest_verdict"]
    due = due_of_verdict(newest) if row["newest_due"] else None
    return {
        "handoff_count": total,
        "problem_count": total - sum(verdicts.get(v, 0) for v in UNPROBLEMATIC) - sum(in_progress.values()),
        "open_false_count": verdicts.get("FALSE_COMPLETE", 0),
        "latest_verdict": latest_code(newest, due) if total and newest else "",
    }


class Read:
    """What `judge` reads of the runs `runs` (pks): started, its rows given by `rows()`."""

    def __init__(self, runs: Iterable[int], rows: Callable[[], dict[str, list]]) -> None:
        self.runs, self.rows = set(runs), rows


def read(runs: Iterable[int]) -> Read:
    """Start reading what `judge` needs of `runs` (pks): their stored rows (dicts), verdict counts,
    operator-settled false completions and alarming reports (tuples). On PostgreSQL in one statement
    (`_statement`), sent now so that it can go with others (`sqlsets.together`: it reads the rows as the
    statements sent before it left them), each query's rows as JSON (`row_to_json`, the same values the ORM
    reads: no timestamp among them); elsewhere one query each, run when the rows are asked for."""
    from django.db import connection

    from receipts.queries import prepared

    ids = list(runs)
    if connection.vendor != "postgresql":
        return Read(ids, functools.partial(_read_each, ids))
    if not ids:
        return Read(ids, lambda: {name: [] for name in READ})
    sql, params = _statement()
    cursor = prepared.cursor(prepare=False)  # bound by the server; its plan depends on the tables
    cursor.execute(sql, [ids if param is _RUN_IDS else param for param in params])
    return Read(ids, functools.partial(_fetched, cursor))


def in_memory(runs: Iterable, handoffs: Iterable, history: Iterable[Mapping], alarms: Mapping[int, list]) -> Read:
    """What `read` would read of `runs` (Run objects not stored yet) once the batch's rows are written, taken from
    those rows: `handoffs` (every handoff of these runs), the verdict `history` rows and the reports made on them
    (`alarms`: pk -> (kind, detail)s). A new run's key is the batch's own: no other row refers to it."""
    from receipts.ingest.due import due_part

    runs = {run.pk: run for run in runs}
    found: dict[str, list] = {name: [] for name in READ}
    mine: dict[int, list] = {pk: [] for pk in runs}
    for handoff in handoffs:
        if handoff.run_id in mine:
            mine[handoff.run_id].append(handoff)
    causes: dict[int, tuple] = {}  # handoff pk -> (at, order, cause) of its latest verdict change
    for order, row in enumerate(history):  # the latest by time, then by key (inserted in this order)
        seen = causes.get(row["handoff_id"])
        if seen is None or (row["at"], order) >= seen[:2]:
            causes[row["handoff_id"]] = (row["at"], order, row["cause"])
    for pk, run in runs.items():
        own = mine[pk]
        newest = max(own, key=lambda h: (h.updated_at, h.pk), default=None)
        latest = max(own, key=lambda h: (h.created_at, h.pk), default=None)
        row = dict(zip(_ROW_FIELDS, _row_values(run), strict=True))
        row["newest_verdict"] = newest.verdict if newest else None
        row["newest_due"] = due_part(newest) is not None if newest else None
        row["latest_pk"] = latest.pk if latest else None
        row["latest_verification"] = latest.verification_part if latest else None
        found["stored"].append(row)
        counted: dict[str, list[int]] = {}
        for handoff in own:
            n = counted.setdefault(handoff.verdict, [0, 0])
            n[0] += 1
            n[1] += due_part(handoff) is not None
            if handoff.verdict == "FALSE_COMPLETE" and causes.get(handoff.pk, ("", 0, ""))[2] in SETTLEMENT_CAUSES:
                found["settled"].append((pk, handoff.pk))
        found["counts"] += [(pk, verdict, n, due) for verdict, (n, due) in counted.items()]
        grouped: dict[str, tuple[str, dict, int]] = {}
        for kind, detail in alarms.get(pk, ()):
            if kind in ALARM_KINDS:
                key = json.dumps([kind, detail], sort_keys=True)  # as the database groups jsonb: keys unordered
                grouped[key] = (kind, detail, grouped.get(key, (kind, detail, 0))[2] + 1)
        found["reports"] += [(pk, *report) for report in grouped.values()]
    return Read(runs, lambda: found)


# What `in_memory` reads of a run, as `read` reads a stored run's row (pk, its own fields, health and summary).
_ROW_FIELDS = ("pk", *OWN_FIELDS, "health", "health_reasons", *SUMMARY_FIELDS)
_row_values = operator.attrgetter(*_ROW_FIELDS)


def _fetched(cursor) -> dict[str, list]:
    found: dict[str, list] = {name: [] for name in READ}
    with cursor:
        for name, row in cursor.fetchall():
            row = json.loads(row) if isinstance(row, str) else row
            found[name].append(row if name == "stored" else tuple(row.values()))
    return found


def _read_each(runs: list[int]) -> dict[str, list]:
    found = {name: list(query) for name, query in _queries(runs).items() if name != "settled"}
    counted = _verdict_counts(found["counts"])
    false_complete = [pk for pk, (verdicts, _) in counted.items() if verdicts.get("FALSE_COMPLETE")]
    found["settled"] = list(_settled_query(false_complete)) if false_complete else []
    return found


READ = ("stored", "counts", "settled", "reports")
_RUN_IDS = object()  # where the run ids go among `_statement`'s parameters
_ANY = object()  # `_queries`' runs as `_statement` gives them: the one array parameter


def _among(field: str, runs):
    """The condition that `field` is one of `runs` (pks, or `_ANY`): `= ANY(array)` for the array parameter, an index
    lookup of each id (`IN (SELECT unnest(…))` had the planner scan every run and handoff, growing with the tables,
    as `AnyOf` says)."""
    from django.db.models import F, Q

    if runs is _ANY:
        return AnyOf(F(field), RawSQL("%s::bigint[]", [_RUN_IDS]))
    return Q(**{f"{field}__in": runs})


@functools.cache
def _statement() -> tuple[str, tuple]:
    """`read`'s one PostgreSQL statement and its parameters, compiled once per process: the runs are one array
    parameter (`_RUN_IDS` stands for it), so the SQL is the same however many runs a batch judges. Compiling
    the four queries anew cost more than judging a batch's runs."""
    parts, params = [], []
    for name, query in _queries(_ANY).items():
        sql, values = query.query.sql_with_params()
        parts.append(f"SELECT '{name}', row_to_json(q) FROM ({sql}) AS q")  # our own names, never input
        params += values
    return " UNION ALL ".join(parts), tuple(params)


def _queries(runs) -> dict[str, object]:
    """`READ`'s querysets for `runs` (run pks, or an expression giving them)."""
    return {
        "stored": _stored_query(runs),
        "counts": _counts_query(runs),
        "settled": _settled_query(runs),
        "reports": _reports_query(runs),
    }


def _stored_query(runs: Iterable[int]):
    """Each run's stored health and summary, with its newest (updated) and latest (created) handoff's facts."""
    from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Subquery

    from receipts.models import Handoff, Run

    newest = Handoff.objects.filter(run_id=OuterRef("pk")).order_by("-updated_at", "-pk")
    latest = Handoff.objects.filter(run_id=OuterRef("pk")).order_by("-created_at", "-pk")
    due = ExpressionWrapper(due_condition(), BooleanField())
    return (
        Run.objects.filter(_among("pk", runs))
        .order_by()
        .values(
            "pk",
            "status",
            "error",
            "health",
            "health_reasons",
            "final_status",
            "verification",
            *SUMMARY_FIELDS,
            newest_verdict=Subquery(newest.values("verdict")[:1]),
            newest_due=Subquery(newest.annotate(due=due).values("due")[:1]),
            latest_pk=Subquery(latest.values("pk")[:1]),
            latest_verification=Subquery(latest.values("verification_part")[:1]),
        )
    )


def _counts_query(runs: Iterable[int]):
    from django.db.models import Count

    from receipts.models import Handoff

    counted = Handoff.objects.filter(_among("run_id", runs)).order_by().values_list("run_id", "verdict")
    return counted.annotate(n=Count("pk"), due=Count("pk", filter=due_condition()))


def _verdict_counts(rows: Iterable[tuple]) -> dict[int, tuple[dict[str, int], dict[str, int]]]:
    """Per run: (handoffs per verdict, those of them in progress per verdict)."""
    found: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
    for run_id, verdict, n, pending in rows:
        verdicts, in_progress = found.setdefault(run_id, ({}, {}))
        verdicts[verdict] = n
        if pending:
            in_progress[verdict] = pending
    return found


def _settled_query(run_ids: Iterable[int]):
    """The runs' false-complete handoffs whose latest verdict change is an operator's settlement (run, pk)."""
    from django.db.models import OuterRef, Subquery

    from receipts.models import Handoff, VerdictChange

    latest = VerdictChange.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk").values("cause")[:1]
    found = Handoff.objects.filter(_among("run_id", run_ids), verdict="FALSE_COMPLETE").annotate(cause=Subquery(latest))
    return found.filter(cause__in=SETTLEMENT_CAUSES).order_by().values_list("run_id", "pk")


def _reports_query(runs: Iterable[int]):
    from django.db.models import Count

    from receipts.models import MiddlewareReport

    return (
        MiddlewareReport.objects.filter(_among("run_id", runs), kind__in=ALARM_KINDS)
        .order_by()
        .values_list("run_id", "kind", "detail")
        .annotate(n=Count("pk"))
    )
