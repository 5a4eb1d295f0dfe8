"""How fast evidence is recorded: receipts per second with 1, 4 and 8 writer processes, and the CPU per receipt.

Two paths, side by side, on the database at DATABASE_URL (PostgreSQL for the
figures that count; SQLite works but serializes writers) in a throwaway test
database, with the events published to the Redis at REDIS_URL:

- **batched**: what an agent does now: `agents.writer` entries, written by the
  process's writer thread in batches (one transaction and one publish each);
- **record()**: one `receipts.recording.record` call per receipt, as before.

Each process records whole healthy handoffs (created, reduced, destination,
verification, final_status). Prints figures, never pass/fail:

    DATABASE_URL=postgres://... .venv/bin/python bench/recording.py [--quick]

Events go to a channel prefix of the benchmark's own (bench.environment): no open page renders them.
"""

from __future__ import annotations

import argparse
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
from bench.table import Row, markdown

setup_django()

from django.db import connection, connections  # noqa: E402

from tests.factories import healthy_bundle, healthy_parts  # noqa: E402

SECTION = "recording"
PROCESSES = (1, 4, 8)
GOAL = "≥ 3,000/s (≤ 0.67 ms CPU per receipt)"


def rows(quick: bool = False) -> list[Row]:
    """Receipts/s and client CPU per receipt for both paths at 1, 4 and 8 processes (a test database of its own)."""
    handoffs = pick(
        quick,
        tiny={"batched": 4, "record": 2},
        quick={"batched": 60, "record": 10},
        full={"batched": 300, "record": 40},
    )  # per process
    with throwaway_database():
        from agents.contracts import install_team_contracts

        install_team_contracts()
        found = [_classify_row()]
        for path in ("batched", "record"):
            for processes in pick(quick, tiny=(1, 2), quick=PROCESSES, full=PROCESSES):
                found.append(_measure(path, processes, handoffs[path]))
        connections.close_all()
        return found


def _measure(path: str, processes: int, handoffs: int) -> Row:
    connections.close_all()  # a forked child must open its own connection
    context = multiprocessing.get_context("fork")
    start = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=_work, args=(path, f"{path}-{processes}-{i}", handoffs, start, results))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    found = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    receipts = sum(n for n, _, _, _ in found)
    wall = max(end for _, _, end, _ in found) - min(begin for _, begin, _, _ in found)
    cpu_ms = sum(cpu for _, _, _, cpu in found) * 1000 / receipts
    what = f"{'batched writer' if path == 'batched' else 'record() per receipt'}, {processes} process(es)"
    figure = f"{receipts / wall:,.0f} receipts/s; {cpu_ms:.2f} ms client CPU per receipt"
    note = f"{connection.vendor}; {receipts} receipts, {len(healthy_parts()) + 1} per handoff, events to Redis"
    return Row(SECTION, what, figure, GOAL if path == "batched" else "was 54 / 77 / 37 per s", note)


def _work(path: str, prefix: str, handoffs: int, start, results) -> None:
    from agents import writer
    from receipts.intake import PartEntry
    from receipts.recording import record

    entries = [
        PartEntry(f"op-{prefix}-{i}", f"h-{prefix}-{i}", part, value)
        for i in range(handoffs)
        for part, value in [*healthy_parts().items(), ("final_status", "complete")]
    ]
    buffer = writer.Writer(writer.LocalSink()) if path == "batched" else None
    start.wait()
    cpu, begin = time.process_time(), time.perf_counter()
    for entry in entries:
        if buffer is not None:
            buffer.submit(entry)
        else:
            record(handoff_id=entry.handoff_id, operation_id=entry.operation_id, part=entry.part, value=entry.value)
    if buffer is not None:
        buffer.stop()
    end = time.perf_counter()
    results.put((len(entries), begin, end, time.process_time() - cpu))
    connections.close_all()


def _classify_row() -> Row:
    """The pure part of a receipt's cost: minimizing and classifying a whole bundle."""
    from agents.contracts import team_contracts
    from receipts import bundle, verdicts

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
