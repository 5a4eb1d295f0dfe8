"""The evidence writer's statements per observed run (issue 32 §1): at most 10 for a typical run, whatever it holds.

A typical observed run (`tests.factories.observed_run_entries`: its start, one healthy handoff's parts, the
settle of its step, its verification, final status and end) goes through the writer's `LocalSink` as the
writer thread hands it over, outside any test transaction, so what is counted is what PostgreSQL receives:
BEGIN and COMMIT included. The run is counted after a first one (the contracts and the alert rules are read
once per change, not per batch). bench.statements prints the same figures.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.observe.writer import LocalSink
from receipts.models import Handoff, Receipt, Run
from tests.factories import observed_run_entries

pytestmark = pytest.mark.django_db(transaction=True)

# PostgreSQL: BEGIN, the batch's runs and handoffs read, the run and the handoff inserted, the contracts'
# version, every handoff change with the verdict history and the receipts (one statement), the runs' health
# inputs, the runs' rows, COMMIT.
ONE_BATCH = 10 if connection.vendor == "postgresql" else 19  # SQLite: no INSERT … RETURNING of many rows here
# Split where the checkpoint barrier splits it today: the second batch reads the handoff with its stored parts,
# settles the run's handoffs stored before it, and the writer reads the run's stop flag after the first.
TWO_BATCHES = 20 if connection.vendor == "postgresql" else 33
# The same run again: its parts are stored already, so nothing but the run's own row is written.
AGAIN = 9 if connection.vendor == "postgresql" else 12


def statements(batches: list[list]) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        for batch in batches:
            LocalSink().write(batch)
    return [query["sql"] for query in captured.captured_queries]


def assert_stored_whole(operation_id: str) -> None:
    run = Run.objects.get(operation_id=operation_id)
    handoff = Handoff.objects.get(run=run)
    assert (run.status, run.health, run.handoff_count) == ("complete", "healthy", 1)
    assert (handoff.verdict, handoff.final_status, handoff.settled_at is not None) == ("HEALTHY", "complete", True)
    assert Receipt.objects.filter(handoff=handoff).count() == 5


def test_a_typical_observed_run_in_one_batch_costs_at_most_10_statements_on_postgresql(contracts):
    statements([[entry for batch in observed_run_entries("op-warm") for entry in batch]])

    found = statements([[entry for batch in observed_run_entries("op-typical") for entry in batch]])

    assert len(found) <= ONE_BATCH, "\n".join(found)
    assert_stored_whole("op-typical")


def test_a_typical_observed_run_split_at_the_checkpoint_barrier_costs_two_batches_of_it(contracts):
    statements(observed_run_entries("op-warm"))

    found = statements(observed_run_entries("op-split"))

    assert len(found) <= TWO_BATCHES, "\n".join(found)
    assert_stored_whole("op-split")


def test_a_run_written_twice_is_stored_once_for_fewer_statements(contracts):
    entries = [entry for batch in observed_run_entries("op-again") for entry in batch]
    statements([entries])
    stored = Receipt.objects.filter(handoff__run__operation_id="op-again").count()

    again = statements([entries])

    assert len(again) <= AGAIN, "\n".join(again)
    assert Receipt.objects.filter(handoff__run__operation_id="op-again").count() == stored == 5
