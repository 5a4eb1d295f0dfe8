"""Migration 0028 (issues 28, 29 §4): existing handoffs take their run's source as the namespace of their id,
and after it one operation id (and handoff id) may name a run of each side, and one thread many runs."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = [("receipts", "0027_rollup_by_owner")], [("receipts", "0028_identity_namespaces")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_keys_runs_and_handoffs_by_their_source_and_keeps_the_rollup():
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        runs, handoffs = old.get_model("receipts", "Run").objects, old.get_model("receipts", "Handoff").objects
        remote = runs.create(operation_id="op-1", thread_id="op-1", source_name="billing")
        local = runs.create(operation_id="op-2", thread_id="op-2")
        handoffs.create(handoff_id="h-remote", run=remote, verdict="HEALTHY")
        handoffs.create(handoff_id="h-local", run=local, verdict="HEALTHY")
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps
        runs, handoffs = new.get_model("receipts", "Run").objects, new.get_model("receipts", "Handoff").objects
        buckets = new.get_model("receipts", "VerdictBucket").objects

        assert dict(handoffs.values_list("handoff_id", "source_name")) == {"h-remote": "billing", "h-local": ""}
        # The rollup was counted afresh and its triggers are back: a new handoff is counted.
        assert sum(buckets.values_list("n", flat=True)) == 2
        same_id = runs.create(operation_id="op-1", thread_id="op-2")  # the local side's op-1, on op-2's thread
        handoffs.create(handoff_id="h-remote", run=same_id, verdict="HEALTHY", source_name="")
        assert sum(buckets.values_list("n", flat=True)) == 3
        with pytest.raises(IntegrityError), transaction.atomic():
            runs.create(operation_id="op-1", thread_id="x", source_name="billing")
        with pytest.raises(IntegrityError), transaction.atomic():
            handoffs.create(handoff_id="h-remote", run_id=remote.pk, verdict="HEALTHY", source_name="billing")
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
