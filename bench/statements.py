"""SQL statements the evidence writer issues for a typical observed run (issue 32 §1: at most 10).

The entries are `tests.factories.observed_run_entries`: what `observe` submits for a run with one healthy
handoff. They go through the writer's `LocalSink` on the database in use (call inside the recording
section's throwaway database, its contracts installed), counted with Django's `CaptureQueriesContext` as
the test that caps them counts them (BEGIN and COMMIT included): once as one batch (the writer's batch
when `observe` does not wait between them), once split where the checkpoint barrier splits it today.
"""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.table import Row

SECTION = "recording"
GOAL = "≤ 10 per run (issue 32 §1)"
RUNS = 5  # after one warm-up run: a cold batch reads the contracts and the ORM compiles its queries


def rows() -> list[Row]:
    from agents.observe.writer import LocalSink
    from tests.factories import observed_run_entries

    counts: dict[str, list[int]] = {"one batch": [], "two batches": []}
    for i in range(RUNS + 1):
        for how, counted in counts.items():
            batches = observed_run_entries(f"op-statements-{how[:3]}-{i}")
            if how == "one batch":
                batches = [[entry for batch in batches for entry in batch]]
            with CaptureQueriesContext(connection) as queries:
                for batch in batches:
                    LocalSink().write(batch)
            if i:
                counted.append(len(queries.captured_queries))
    figure = "; ".join(f"{max(found)} as {how}" for how, found in counts.items())
    note = (
        f"{connection.vendor}; a run with one healthy handoff (start, 5 parts, a settle, its end) through"
        " LocalSink, BEGIN and COMMIT counted; two batches: split at the checkpoint barrier after `created`"
    )
    return [Row(SECTION, "SQL statements per typical observed run (evidence writer)", figure, GOAL, note)]
