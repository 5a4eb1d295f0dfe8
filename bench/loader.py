"""Build a large, realistic evidence data set fast: runs, handoffs, receipts, verdict history, reports, audit.

On PostgreSQL rows go in with `COPY ... FROM STDIN` (psycopg 3): 50k runs / 100k handoffs / 1M receipts in
about a minute on two cores; elsewhere (SQLite, the tests' tiny sizes) with multi-row INSERTs. Every run's
stored summary (health, counts, latest verdict) is what `receipts.ingest.health` computes and the overview's
rollups are rebuilt from the loaded handoffs (`receipts.queries.rollups.rebuild`), so the pages read what recording
would have left. The data is deterministic for a given size.

The columns come from the models: a column the loader does not fill gets its model default (or NULL when
nullable), so a new column with a default needs no change here; a new required column without a default
stops the load before any row is written, naming it.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_scale_bench python -m bench.loader --handoffs 100000

From code (a migrated database; tests and the bench's smoke test use a tiny size): `load(handoffs=200)`.
It only ever replaces its own data: it refuses to touch a database holding runs it did not make.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PREFIX = "bench-"
AGENTS = ("triage", "researcher", "billing", "refunds", "writer")
GRAPHS = ("demo", "support", "billing")
OWNERS = ("oncall", "ops-lead", "approver")
ROUTE_VERSIONS = ("routes-v1", "routes-v2")
RECEIPTS_PER_HANDOFF = 10  # five parts (or four and a final status), two attempts each
REPORT_KINDS = ("tool_error", "call_limit", "summarized")
AUDIT_ACTIONS = ("wait.approve", "wait.reject", "task.reopen", "task.accept", "run.stop", "wait.reassign")
# Verdict shares among handoffs, the way a mostly healthy team looks.
VERDICT_WEIGHTS = {
    "HEALTHY": 78,
    "WAITING_ON_APPROVAL": 5,
    "FALSE_COMPLETE": 3,
    "UNCERTAIN": 3,
    "ROUTE_REJECTED": 2,
    "STALE_CONTROL": 2,
    "OPEN_TOOL_PROTOCOL": 2,
    "CONTEXT_INCOMPLETE": 3,
    "DESTINATION_NOT_STARTED": 2,
}
SPAN = timedelta(days=30)  # runs are spread over the last 30 days


@dataclass(frozen=True)
class Loaded:
    runs: int
    handoffs: int
    receipts: int
    seconds: float


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
    import django

    django.setup()


class SchemaMismatch(SystemExit):
    """The models ask for a column the loader cannot fill (or it fills one they no longer have)."""


def load(handoffs: int = 100_000, *, seed: int = 13) -> Loaded:
    """Replace the loader's data with `handoffs` handoffs (half as many runs, ten receipts each)."""
    from django.db import connection, transaction

    started = time.perf_counter()
    rng = random.Random(seed)
    now = datetime.now(UTC)
    runs, hands = _generate(rng, handoffs, now)
    tables = _tables()  # checked against the models before anything is written
    with transaction.atomic():
        cursor = connection.cursor()
        _clear(cursor)
        writer = _Writer(cursor)
        writer.write(tables["run"], _run_rows(runs))
        writer.write(tables["handoff"], _handoff_rows(hands))
        receipts = writer.write(tables["receipt"], _receipt_rows(hands))
        writer.write(tables["verdictchange"], _verdict_change_rows(hands))
        writer.write(tables["middlewarereport"], _report_rows(runs))
        writer.write(tables["auditentry"], _audit_rows(rng, hands))
        writer.reset_sequences(tables.values())
        _rebuild_rollups()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # fresh statistics, as autovacuum would have them
            for table in tables.values():
                cursor.execute(f"VACUUM ANALYZE {table.name}")
    return Loaded(len(runs), len(hands), receipts, time.perf_counter() - started)


def _rebuild_rollups() -> None:
    try:
        from receipts.queries import rollups
    except ImportError:  # a schema without the overview's rollups
        return
    rollups.rebuild()


# --- the tables, from the models ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """A model's table: the columns the loader fills, then every other column with its model default."""

    name: str
    columns: tuple[str, ...]
    filler: tuple
    given: int  # how many of a generated row's values are used (an optional column the model lacks is not)


# The columns the loader fills, per model, in the order its row generators yield them; after "|" the
# optional ones, filled only when the model has them (a schema before or after the change that added them).
FILLED = {
    "run": (
        "id operation_id thread_id source status dry_run auto_continue seq deliveries error created_at updated_at "
        "started_at finished_at graph mode health health_reasons handoff_count problem_count open_false_count "
        "latest_verdict pending_call"
    ),
    "handoff": (
        "id handoff_id sender receiver route_version created_part reduced_part destination_part wait_part "
        "verification_part final_status verdict boundary boundaries classified_at wait_open wait_owner "
        "wait_deadline created_at updated_at settled_at run_id"
    ),
    "receipt": "id part attempt payload recorded_at handoff_id | handoff_month",  # the month: issue 22 §3
    "verdictchange": "id verdict boundary cause at handoff_id",
    "middlewarereport": "id agent kind detail attempt recorded_at run_id",
    "auditentry": "id at actor_name action object_type object_id verdict reason outcome detail handoff_id run_id",
}


def _tables() -> dict[str, _Table]:
    from django.apps import apps

    tables = {}
    for name, columns in FILLED.items():
        model = apps.get_model("receipts", name)
        required, _, optional = columns.partition("|")
        known = {f.column for f in model._meta.concrete_fields}
        tables[name] = _table(model, tuple(required.split()), tuple(c for c in optional.split() if c in known))
    return tables


def _table(model, filled: tuple[str, ...], optional: tuple[str, ...] = ()) -> _Table:
    from django.db.models import JSONField

    fields = {f.column: f for f in model._meta.concrete_fields}
    given = len(filled)
    filled = (*filled, *optional)
    if unknown := [c for c in filled if c not in fields]:
        msg = f"bench.loader: {model._meta.label} has no column {', '.join(unknown)} any more; update bench/loader.py"
        raise SchemaMismatch(msg)
    columns, filler = [], []
    for column, f in fields.items():
        if column in filled:
            continue
        value = f.get_default()  # what the ORM would insert: the default, "" for a blank text field, else None
        auto = getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        if value is None and not f.null and not auto:
            msg = (
                f"bench.loader: {model._meta.label}.{f.name} is required (NOT NULL, no default) and the loader "
                "does not fill it; add it to bench/loader.py"
            )
            raise SchemaMismatch(msg)
        if auto and value is None:
            value = datetime.now(UTC)
        columns.append(column)
        filler.append(json.dumps(value) if isinstance(f, JSONField) and value is not None else value)
    return _Table(model._meta.db_table, (*filled, *columns), tuple(filler), given + len(optional))


class _Writer:
    """Rows into tables: COPY on PostgreSQL, multi-row INSERTs of `BATCH` rows elsewhere."""

    BATCH = 500

    def __init__(self, cursor) -> None:
        self.cursor = cursor
        self.copying = cursor.db.vendor == "postgresql"

    def write(self, table: _Table, rows) -> int:
        return self._copy(table, rows) if self.copying else self._insert(table, rows)

    def _copy(self, table: _Table, rows) -> int:
        count = 0
        with self.cursor.cursor.copy(f"COPY {table.name} ({', '.join(table.columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row[: table.given], *table.filler))
                count += 1
        return count

    def _insert(self, table: _Table, rows) -> int:
        ops = self.cursor.db.ops
        one = f"({', '.join(['%s'] * len(table.columns))})"

        def adapted(row: tuple) -> list:
            values = (*row[: table.given], *table.filler)
            return [ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v for v in values]

        count, batch = 0, []
        for row in rows:
            batch.extend(adapted(row))
            count += 1
            if count % self.BATCH == 0:
                self._insert_batch(table, one, self.BATCH, batch)
                batch = []
        if batch:
            self._insert_batch(table, one, count % self.BATCH, batch)
        return count

    def _insert_batch(self, table: _Table, one: str, size: int, values: list) -> None:
        sql = f"INSERT INTO {table.name} ({', '.join(table.columns)}) VALUES {', '.join([one] * size)}"
        self.cursor.execute(sql, values)

    def reset_sequences(self, tables) -> None:
        if not self.copying:  # SQLite's AUTOINCREMENT follows explicit ids by itself
            return
        for table in tables:
            self.cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), (SELECT COALESCE(MAX(id), 1) FROM "
                f"{table.name}))"
            )


def _clear(cursor) -> None:
    from receipts.models import Run

    if Run.objects.exclude(operation_id__startswith=PREFIX).exists():
        msg = "bench.loader: this database holds runs the loader did not make; point it at a bench database"
        raise SystemExit(msg)
    models = _dependents_first(Run)
    if cursor.db.vendor == "postgresql":
        cursor.execute(f"TRUNCATE {', '.join(m._meta.db_table for m in models)} CASCADE")
        return
    for model in models:
        cursor.execute(f"DELETE FROM {model._meta.db_table}")


def _dependents_first(model, seen: list | None = None) -> list:
    """`model` and every model that refers to it (through any chain of foreign keys), referrers first."""
    seen = [] if seen is None else seen
    for relation in model._meta.related_objects:
        if relation.related_model not in seen and relation.related_model is not model:
            _dependents_first(relation.related_model, seen)
    if model not in seen:
        seen.append(model)
    return seen


@dataclass
class _Run:
    id: int
    created_at: datetime
    status: str
    graph: str
    verdicts: list[str]
    reports: list[tuple[str, str]]  # (agent, kind)
    fields: dict


@dataclass
class _Handoff:
    id: int
    run: _Run
    verdict: str
    sender: str
    receiver: str
    created_at: datetime
    updated_at: datetime
    wait_open: bool


def _generate(rng: random.Random, total: int, now: datetime) -> tuple[list[_Run], list[_Handoff]]:
    from receipts.ingest import health

    verdicts = list(VERDICT_WEIGHTS)
    weights = list(VERDICT_WEIGHTS.values())
    runs: list[_Run] = []
    hands: list[_Handoff] = []
    expected_runs = max(total // 2, 1)
    while len(hands) < total:
        i = len(runs)
        created = now - SPAN * max(1 - i / expected_runs, 0) + timedelta(seconds=rng.random())
        size = min(rng.choice((1, 2, 2, 3)), total - len(hands))  # two handoffs a run on average
        run_verdicts = rng.choices(verdicts, weights, k=size)
        status = _status(rng, run_verdicts)
        reports = [(rng.choice(AGENTS), rng.choice(REPORT_KINDS))] if rng.random() < 0.05 else []
        run = _Run(i + 1, created, status, rng.choice(GRAPHS), run_verdicts, reports, {})
        first = len(hands)
        for n, verdict in enumerate(run_verdicts):
            sender, receiver = rng.sample(AGENTS, 2)
            at = created + timedelta(seconds=5 * n + rng.random())
            open_wait = verdict == "WAITING_ON_APPROVAL" and status == "waiting"
            hands.append(
                _Handoff(len(hands) + 1, run, verdict, sender, receiver, at, at + timedelta(seconds=3), open_wait)
            )
        latest = "pass" if "FALSE_COMPLETE" not in run_verdicts[-1:] else "fail"
        found = health.assess(
            status=status,
            verdicts={v: run_verdicts.count(v) for v in set(run_verdicts)},
            reports=[(kind, {"tool": agent}, 1) for agent, kind in reports],
            latest_verification=latest,
        )
        run.fields = {
            "health": found.level,
            "health_reasons": found.reasons,
            # The stored summary (receipts.ingest.health.summary); no false completion is settled in this data.
            "handoff_count": len(run_verdicts),
            "problem_count": sum(v not in health.UNPROBLEMATIC for v in run_verdicts),
            "open_false_count": run_verdicts.count("FALSE_COMPLETE"),
            "latest_verdict": run_verdicts[-1] if run_verdicts else "",  # the last changed: the last created
            "pending_call": next((_pending_call(h) for h in reversed(hands[first:]) if h.wait_open), None),
        }
        runs.append(run)
    return runs, hands


def _pending_call(wait: _Handoff) -> dict:
    """What a waiting run's writer stores with it (`Run.pending_call`, names only): the call its open wait gates."""
    return {
        "tool": "place_order",
        "arg_types": {"sku": "str", "quantity": "int"},
        "allowed_decisions": ["approve", "edit", "reject"],
        "resume_token_id": f"rt-{wait.id}",
        "interrupts": [{"id": f"interrupt-{wait.id}", "calls": 1}],
    }


def _status(rng: random.Random, verdicts: list[str]) -> str:
    if "WAITING_ON_APPROVAL" in verdicts and rng.random() < 0.6:
        return "waiting"
    return rng.choices(("complete", "failed", "running", "queued", "parked"), (90, 4, 3, 1, 2))[0]


def _run_rows(runs: list[_Run]):
    for r in runs:
        finished = r.status in ("complete", "failed")
        yield (
            r.id,
            f"{PREFIX}op-{r.id:07d}",
            f"{PREFIX}th-{r.id:07d}",
            "agent",
            r.status,
            False,
            True,
            len(r.verdicts) * 6,
            1,
            "Timeout" if r.status == "failed" else "",
            r.created_at,
            r.created_at + timedelta(seconds=40),
            r.created_at + timedelta(seconds=1),
            r.created_at + timedelta(seconds=40) if finished else None,
            r.graph,
            "hosted",
            r.fields["health"],
            json.dumps(r.fields["health_reasons"]),
            r.fields["handoff_count"],
            r.fields["problem_count"],
            r.fields["open_false_count"],
            r.fields["latest_verdict"],
            json.dumps(r.fields["pending_call"]) if r.fields["pending_call"] else None,
        )


def _parts(h: _Handoff) -> dict[str, dict | None]:
    at = h.created_at.isoformat()
    waiting = h.verdict == "WAITING_ON_APPROVAL"
    return {
        "created": {
            "sender": h.sender,
            "receiver": h.receiver,
            "route_version": ROUTE_VERSIONS[h.id % 2],
            "required_context_keys": ["customer_id"],
            "at": at,
        },
        "reduced": {"goto": h.receiver, "context_keys": ["customer_id"], "tool_message_ids": []},
        "destination": {"started_at": (h.created_at + timedelta(seconds=1)).isoformat()},
        "wait": {"owner": OWNERS[h.id % 3], "resolved": not h.wait_open, "resume_token_id": f"rt-{h.id}"}
        if waiting
        else None,
        "verification": {"result": "fail" if h.verdict == "FALSE_COMPLETE" else "pass", "checked_at": at},
    }


def _handoff_rows(hands: list[_Handoff]):
    from receipts.verdicts import BOUNDARIES, VERDICT_BOUNDARY

    for h in hands:
        parts = _parts(h)
        deciding = VERDICT_BOUNDARY[h.verdict]
        cut = BOUNDARIES.index(deciding) if deciding else len(BOUNDARIES)
        boundaries = {
            b: "pass" if n < cut else ("fail" if n == cut else "not_reached") for n, b in enumerate(BOUNDARIES)
        }
        yield (
            h.id,
            f"{PREFIX}h-{h.id:08d}",
            h.sender,
            h.receiver,
            ROUTE_VERSIONS[h.id % 2],
            *(json.dumps(parts[p]) if parts[p] is not None else None for p in parts),
            "waiting" if h.verdict == "WAITING_ON_APPROVAL" else "complete",
            h.verdict,
            deciding or "",
            json.dumps(boundaries),
            h.updated_at,
            h.wait_open,
            OWNERS[h.id % 3] if parts["wait"] else "",
            h.created_at + timedelta(hours=h.id % 48) if h.wait_open else None,
            h.created_at,
            h.updated_at,
            h.updated_at if h.run.status in ("complete", "failed") else None,  # a finished run settles its handoffs
            h.run.id,
        )


def _receipt_rows(hands: list[_Handoff]):
    n = 0
    for h in hands:
        month = h.created_at.date().replace(day=1)  # created_at is UTC: the receipts' partition month (optional)
        parts = _parts(h)
        names = [p for p in parts if parts[p] is not None]
        names = [*names, "final_status"][:5]
        for attempt in ("1", "2"):
            for offset, name in enumerate(names):
                n += 1
                payload = parts.get(name) if name != "final_status" else "complete"
                at = h.created_at + timedelta(milliseconds=200 * offset)
                yield (n, name, attempt, json.dumps(payload), at, h.id, month)


def _verdict_change_rows(hands: list[_Handoff]):
    n = 0
    for h in hands:
        history = ["UNCERTAIN", h.verdict] if h.verdict != "UNCERTAIN" else [h.verdict]
        for step, verdict in enumerate(history):
            n += 1
            yield (
                n,
                verdict,
                "",
                "created" if step == 0 else "verification",
                h.created_at + timedelta(seconds=step),
                h.id,
            )


def _report_rows(runs: list[_Run]):
    reports = ((r, agent, kind) for r in runs for agent, kind in r.reports)
    for n, (r, agent, kind) in enumerate(reports, start=1):
        yield (n, agent, kind, json.dumps({"tool": agent}), "1", r.created_at + timedelta(seconds=20), r.id)


def _audit_rows(rng: random.Random, hands: list[_Handoff]):
    # One entry per five handoffs, at most 20,000 (audit.csv's 10k rows are the newest half).
    for n, h in enumerate(hands[:: max(len(hands) // 20_000, 5)], start=1):
        action = rng.choice(AUDIT_ACTIONS)
        outcome = rng.choices(("done", "denied", "refused", "noop"), (85, 5, 5, 5))[0]
        yield (
            n,
            h.updated_at,
            rng.choice(OWNERS),
            action,
            "handoff",
            str(h.id),
            h.verdict,
            "",
            outcome,
            "{}",
            h.id,
            h.run.id,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handoffs", type=int, default=100_000)
    args = parser.parse_args(argv)
    _setup_django()
    loaded = load(args.handoffs)
    print(
        f"loaded {loaded.runs} runs, {loaded.handoffs} handoffs, {loaded.receipts} receipts in {loaded.seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
