"""How fast evidence is stored: receipts per second with 1, 4 and 8 writer processes, beside the database's own floor.

On the database at DATABASE_URL (PostgreSQL for the figures that count; SQLite
works but serializes writers) in a throwaway test database, with the events
published to the Redis at REDIS_URL:

- **batched**: what an agent does: `agents.observe.writer` entries, written by the
  process's writer in batches of up to 200 (one transaction, one set per
  run of part entries, one publish each), its backlog shared by its lanes
  (`SIDEWISP_WRITER_LANES`, two writer threads on PostgreSQL);
- **record()**: one `receipts.ingest.recording.record` call per receipt (the row path);
- **floor** (PostgreSQL only): the same receipt rows inserted by PostgreSQL
  itself, as 200-row multi-row INSERTs (one transaction each) and as one COPY,
  measured in the same run; the batched row prints its ratio to them (issue 32 §2: ≥ 1/4 of the INSERT);
- **statements per run** (`bench.statements`): the SQL statements the writer issues for a typical observed run.

A figure is what was *stored*: the receipts counted in the database after the
writers finished, divided by the wall time from the first submit to the last
commit; each process first writes one full batch of handoffs of its own,
uncounted, before the clock starts (its connections opened, its statements
compiled, as the floor's are). Each process records whole healthy handoffs
(created, reduced, destination, verification, final_status), each handoff a run
of its own. Prints figures, never pass/fail:

    DATABASE_URL=postgres://... .venv/bin/python bench/recording.py [--quick]

Events go to a channel prefix of the benchmark's own (bench.environment): no open page renders them.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import setup_django, throwaway_database
from bench.sizes import pick
from bench.table import Row, markdown, versus

setup_django()

from django.db import connection, connections  # noqa: E402

from tests.factories import healthy_bundle, healthy_parts  # noqa: E402

SECTION = "recording"
PROCESSES = (1, 4, 8)
GOAL = "≥ 6,000/s and ≥ 1/4 of PostgreSQL's multi-row INSERT (issue 32 §2)"
FLOOR_BATCH = 200  # rows per multi-row INSERT: the writer's batch
WARM_HANDOFFS = 40  # per process, written before its clock starts: one full batch of the writer


def rows(quick: bool = False) -> list[Row]:
    """Stored receipts/s and CPU per receipt for both paths (batched at 1, 4 and 8 processes), beside the floor."""
    handoffs = pick(
        quick,
        tiny={"batched": 4, "record": 2},
        quick={"batched": 60, "record": 10},
        full={"batched": 400, "record": 40},
    )  # per process
    with throwaway_database():
        from agents.demo.contracts import install_team_contracts

        install_team_contracts()
        found = [_classify_row()]
        floor = _floor(handoffs["batched"] * (len(healthy_parts()) + 1))
        for processes in pick(quick, tiny=(1, 2), quick=PROCESSES, full=PROCESSES):
            found.append(_measure("batched", processes, handoffs["batched"], floor))
        found.append(_measure("record", 1, handoffs["record"], None))
        found += _floor_rows(floor)
        from bench import statements

        found += statements.rows()
        connections.close_all()
        return found


def _measure(path: str, processes: int, handoffs: int, floor: dict[str, float] | None) -> Row:
    from receipts.models import Receipt

    connections.close_all()  # a forked child must open its own connection
    context = multiprocessing.get_context("fork")
    start = context.Barrier(processes)
    results = context.Queue()
    prefix = f"{path}-{processes}"
    workers = [
        context.Process(target=_work, args=(path, f"{prefix}-{i}", handoffs, start, results)) for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    found = [results.get(timeout=900) for _ in workers]
    for worker in workers:
        worker.join()
    offered = sum(n for n, _, _, _ in found)
    stored = Receipt.objects.filter(handoff__handoff_id__startswith=f"h-{prefix}-").count()
    wall = max(end for _, _, end, _ in found) - min(begin for _, begin, _, _ in found)
    cpu_us = sum(cpu for _, _, _, cpu in found) * 1e6 / max(stored, 1)
    what = f"{'batched writer' if path == 'batched' else 'record() per receipt'}, {processes} process(es)"
    figure = f"{stored / wall:,.0f} receipts/s stored; {cpu_us:.0f} µs client CPU per receipt"
    goal = GOAL if path == "batched" else "the row path, for reference (was 54 / 77 / 37 per s)"
    if floor and processes == 1:
        # The ratio the goal reads (a quarter of the floor) beside the figure, both measured in this run.
        figure += "; " + ", ".join(versus(stored / wall, rate, f"PostgreSQL's {name}") for name, rate in floor.items())
    note = f"{connection.vendor}; {stored} of {offered} offered receipts stored, {len(healthy_parts()) + 1} per handoff"
    return Row(SECTION, what, figure, goal, note + ", events to Redis")


def _work(path: str, prefix: str, handoffs: int, start, results) -> None:
    from agents.observe import writer

    entries = _entries(prefix, handoffs)
    buffer = writer.Writer(writer.LocalSink()) if path == "batched" else None
    # Warm before the clock starts, as the floor's connection is and as the overhead section warms up: a full batch
    # of handoffs of its own (not counted) opens the process's database and Redis connections and compiles its
    # statements once; timed, that first batch cost ~30 ms more than a warm one, a tenth of a process's window.
    _offer(buffer, _entries(f"warm-{prefix}", WARM_HANDOFFS if buffer is not None else 1))
    if buffer is not None:
        buffer.flush()
    start.wait()
    cpu, begin = time.process_time(), time.perf_counter()
    _offer(buffer, entries)
    if buffer is not None:
        buffer.stop()
    end = time.perf_counter()
    results.put((len(entries), begin, end, time.process_time() - cpu))
    connections.close_all()


def _offer(buffer, entries: list) -> None:
    """Hand `entries` to the batched writer `buffer`, or record each at once (the row path) when it is None."""
    from receipts.ingest.recording import record

    for entry in entries:
        if buffer is not None:
            buffer.submit(entry)
        else:
            record(handoff_id=entry.handoff_id, operation_id=entry.operation_id, part=entry.part, value=entry.value)


def _entries(prefix: str, handoffs: int) -> list:
    from receipts.ingest.intake import PartEntry

    return [
        PartEntry(f"op-{prefix}-{i}", f"h-{prefix}-{i}", part, value)
        for i in range(handoffs)
        for part, value in [*healthy_parts().items(), ("final_status", "complete")]
    ]


# --- the floor: PostgreSQL storing the same rows itself --------------------------------------------


def _floor(receipts: int) -> dict[str, float]:
    """Rows/s of PostgreSQL's own multi-row INSERT and COPY of `receipts` receipt rows (empty on SQLite)."""
    if connection.vendor != "postgresql":
        return {}
    rows = [
        (0, entry.part, entry.attempt, json.dumps(entry.value), datetime.now(UTC))
        for entry in _entries("floor", receipts // (len(healthy_parts()) + 1))
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE bench_floor (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, handoff_id bigint,"
            " part varchar(20), attempt varchar(200), payload jsonb, recorded_at timestamptz)"
        )
    try:
        return {"multi-row INSERT": _multi_row(rows), "COPY": _copy(rows)}
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE bench_floor")


def _multi_row(rows: list[tuple]) -> float:
    from django.db import transaction

    begin = time.perf_counter()
    for i in range(0, len(rows), FLOOR_BATCH):
        chunk = rows[i : i + FLOOR_BATCH]
        values = ", ".join(["(%s, %s, %s, %s::jsonb, %s)"] * len(chunk))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO bench_floor (handoff_id, part, attempt, payload, recorded_at) VALUES {values}",
                [value for row in chunk for value in row],
            )
    return len(rows) / (time.perf_counter() - begin)


def _copy(rows: list[tuple]) -> float:
    from django.db import transaction

    text = io.StringIO()
    for handoff, part, attempt, payload, at in rows:
        escaped = payload.replace("\\", "\\\\")
        text.write(f"{handoff}\t{part}\t{attempt}\t{escaped}\t{at.isoformat()}\n")
    begin = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        with raw.copy("COPY bench_floor (handoff_id, part, attempt, payload, recorded_at) FROM STDIN") as copy:
            copy.write(text.getvalue())
    return len(rows) / (time.perf_counter() - begin)


def _floor_rows(floor: dict[str, float]) -> list[Row]:
    if not floor:
        return [Row(SECTION, "PostgreSQL floor (multi-row INSERT, COPY)", "n/a", note="PostgreSQL only")]
    note = f"the same receipt rows into a table of the receipts' shape, {FLOOR_BATCH} rows per INSERT, one COPY"
    return [Row(SECTION, f"PostgreSQL's own {name}", f"{rate:,.0f} rows/s", note=note) for name, rate in floor.items()]


def _classify_row() -> Row:
    """The pure part of a receipt's cost: minimizing and classifying a whole bundle."""
    from agents.demo.contracts import team_contracts
    from receipts import verdicts
    from receipts.verdicts import bundle

    rules = bundle.parse_contracts(team_contracts())
    raw = healthy_bundle()
    now = datetime(2026, 7, 30, 12, tzinfo=UTC)
    samples = []
    for _ in range(2000):
        begin = time.perf_counter_ns()
        verdicts.classify(bundle.parse_bundle(raw), rules, now)
        samples.append((time.perf_counter_ns() - begin) / 1000)
    what = "parse + classify one bundle (pure, no database)"
    return Row(SECTION, what, f"p50 {statistics.median(samples):.0f} µs", note="the CPU floor of a receipt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer handoffs per process")
    args = parser.parse_args()
    print(markdown(rows(quick=args.quick)))


if __name__ == "__main__":
    main()
