"""Build a large, realistic evidence data set fast: runs, handoffs, receipts, verdict history, reports, audit.

PostgreSQL only (psycopg 3 `COPY ... FROM STDIN`): 50k runs / 100k handoffs / 1M receipts load in about a
minute on two cores. Every run's stored summary (health, counts, latest verdict) is what `receipts.health`
computes, so the pages read what recording would have left. The data is deterministic for a given size.

Runnable alone against DATABASE_URL (the schema must be migrated):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_scale_bench python -m bench.loader --handoffs 100000

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


def load(handoffs: int = 100_000, *, seed: int = 13) -> Loaded:
    """Replace the loader's data with `handoffs` handoffs (half as many runs, ten receipts each)."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        msg = "bench.loader needs PostgreSQL (COPY): point DATABASE_URL at a PostgreSQL database"
        raise SystemExit(msg)
    started = time.perf_counter()
    rng = random.Random(seed)
    now = datetime.now(UTC)
    with transaction.atomic():
        raw = connection.cursor().cursor  # psycopg 3's cursor: COPY
        _clear(raw)
        runs, hands = _generate(rng, handoffs, now)
        _copy_runs(raw, runs)
        _copy_handoffs(raw, hands)
        receipts = _copy_receipts(raw, hands)
        _copy_verdict_changes(raw, hands)
        _copy_reports(raw, runs)
        _copy_audit(raw, rng, hands, now)
        for table in ("run", "handoff", "receipt", "verdictchange", "middlewarereport", "auditentry"):
            raw.execute(
                f"SELECT setval(pg_get_serial_sequence('receipts_{table}', 'id'), "
                f"(SELECT COALESCE(MAX(id), 1) FROM receipts_{table}))"
            )
    with connection.cursor() as cursor:  # fresh statistics, as autovacuum would have them
        for table in ("run", "handoff", "receipt", "verdictchange", "middlewarereport", "auditentry"):
            cursor.execute(f"VACUUM ANALYZE receipts_{table}")
    return Loaded(len(runs), len(hands), receipts, time.perf_counter() - started)


def _clear(raw) -> None:
    raw.execute(
        "SELECT count(*) FROM receipts_run WHERE operation_id NOT LIKE %s",
        [PREFIX + "%"],
    )
    if raw.fetchone()[0]:
        msg = "bench.loader: this database holds runs the loader did not make; point it at a bench database"
        raise SystemExit(msg)
    raw.execute(
        "TRUNCATE receipts_auditentry, receipts_verdictchange, receipts_receipt, receipts_decision, "
        "receipts_outboxintent, receipts_middlewarereport, receipts_handoff, receipts_run CASCADE"
    )


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
    from receipts import health

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
            # The stored summary (receipts.health.summary); no false completion is settled in this data.
            "handoff_count": len(run_verdicts),
            "problem_count": sum(v not in health.UNPROBLEMATIC for v in run_verdicts),
            "open_false_count": run_verdicts.count("FALSE_COMPLETE"),
            "latest_verdict": run_verdicts[-1] if run_verdicts else "",  # the last changed: the last created
        }
        runs.append(run)
    return runs, hands


def _status(rng: random.Random, verdicts: list[str]) -> str:
    if "WAITING_ON_APPROVAL" in verdicts and rng.random() < 0.6:
        return "waiting"
    return rng.choices(("complete", "failed", "running", "queued", "parked"), (90, 4, 3, 1, 2))[0]


def _copy(raw, table: str, columns: tuple[str, ...], rows) -> int:
    count = 0
    with raw.copy(f"COPY receipts_{table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


def _copy_runs(raw, runs: list[_Run]) -> None:
    columns = (
        "id operation_id thread_id scenario source status dry_run auto_continue seq deliveries lease_owner error "
        "created_at updated_at started_at finished_at graph mode health health_reasons "
        "handoff_count problem_count open_false_count latest_verdict source_name"
    ).split()
    _copy(
        raw,
        "run",
        tuple(columns),
        (
            (
                r.id,
                f"{PREFIX}op-{r.id:07d}",
                f"{PREFIX}th-{r.id:07d}",
                "",
                "agent",
                r.status,
                False,
                True,
                len(r.verdicts) * 6,
                1,
                "",
                "Timeout" if r.status == "failed" else "",
                r.created_at,
                r.created_at + timedelta(seconds=40),
                r.created_at + timedelta(seconds=1),
                r.created_at + timedelta(seconds=40) if r.status in ("complete", "failed") else None,
                r.graph,
                "hosted",
                r.fields["health"],
                json.dumps(r.fields["health_reasons"]),
                r.fields["handoff_count"],
                r.fields["problem_count"],
                r.fields["open_false_count"],
                r.fields["latest_verdict"],
                "",  # a local run (issue 14 §4)
            )
            for r in runs
        ),
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


def _copy_handoffs(raw, hands: list[_Handoff]) -> None:
    from receipts.verdicts import BOUNDARIES, VERDICT_BOUNDARY

    columns = (
        "id handoff_id sender receiver route_version created_part reduced_part destination_part wait_part "
        "verification_part final_status verdict boundary next_move reason boundaries classified_at wait_open "
        "wait_owner wait_deadline created_at updated_at run_id"
    ).split()

    def row(h: _Handoff) -> tuple:
        parts = _parts(h)
        deciding = VERDICT_BOUNDARY[h.verdict]
        cut = BOUNDARIES.index(deciding) if deciding else len(BOUNDARIES)
        boundaries = {
            b: "pass" if n < cut else ("fail" if n == cut else "not_reached") for n, b in enumerate(BOUNDARIES)
        }
        return (
            h.id,
            f"{PREFIX}h-{h.id:08d}",
            h.sender,
            h.receiver,
            ROUTE_VERSIONS[h.id % 2],
            *(json.dumps(parts[p]) if parts[p] is not None else None for p in parts),
            "waiting" if h.verdict == "WAITING_ON_APPROVAL" else "complete",
            h.verdict,
            deciding or "",
            "",
            "",
            json.dumps(boundaries),
            h.updated_at,
            h.wait_open,
            OWNERS[h.id % 3] if parts["wait"] else "",
            h.created_at + timedelta(hours=h.id % 48) if h.wait_open else None,
            h.created_at,
            h.updated_at,
            h.run.id,
        )

    _copy(raw, "handoff", tuple(columns), (row(h) for h in hands))


def _copy_receipts(raw, hands: list[_Handoff]) -> int:
    from receipts.models import handoff_month

    def rows():
        n = 0
        for h in hands:
            parts = _parts(h)
            names = [p for p in parts if parts[p] is not None]
            names = [*names, "final_status"][:5]
            for attempt in ("1", "2"):
                for offset, name in enumerate(names):
                    n += 1
                    payload = parts.get(name) if name != "final_status" else "complete"
                    yield (
                        n,
                        name,
                        attempt,
                        json.dumps(payload),
                        h.created_at + timedelta(milliseconds=200 * offset),
                        h.id,
                        handoff_month(h.created_at),  # issue 22 §3: the receipts' partition
                    )

    columns = ("id", "part", "attempt", "payload", "recorded_at", "handoff_id", "handoff_month")
    return _copy(raw, "receipt", columns, rows())


def _copy_verdict_changes(raw, hands: list[_Handoff]) -> None:
    def rows():
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

    _copy(raw, "verdictchange", ("id", "verdict", "boundary", "cause", "at", "handoff_id"), rows())


def _copy_reports(raw, runs: list[_Run]) -> None:
    rows = (
        (r.id, agent, kind, json.dumps({"tool": agent}), "1", r.created_at + timedelta(seconds=20), r.id)
        for r in runs
        for agent, kind in r.reports
    )
    _copy(raw, "middlewarereport", ("id", "agent", "kind", "detail", "attempt", "recorded_at", "run_id"), rows)


def _copy_audit(raw, rng: random.Random, hands: list[_Handoff], now: datetime) -> None:
    def rows():
        for n, h in enumerate(hands[:: max(len(hands) // 20_000, 1)], start=1):
            action = rng.choice(AUDIT_ACTIONS)
            outcome = rng.choices(("done", "denied", "refused", "noop"), (85, 5, 5, 5))[0]
            who = rng.choice(OWNERS)
            yield (
                n,
                h.updated_at,
                who,
                action,
                "handoff",
                str(h.id),
                h.verdict,
                "",
                outcome,
                "{}",
                None,
                h.id,
                h.run.id,
            )

    columns = (
        "id at actor_name action object_type object_id verdict reason outcome detail actor_id handoff_id run_id".split()
    )
    _copy(raw, "auditentry", tuple(columns), rows())


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
