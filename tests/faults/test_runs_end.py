"""Runs always end: a database failover mid-run, 16 runs on a fresh database, a worker killed with its task lost.

Each test starts its own worker processes (and Redis, where it needs one to break) and stops only those.
Afterwards the database must show every run in a known end state and every effect applied once.
"""

from __future__ import annotations

import os
import uuid

import pytest
import redis
from django.core.management import call_command
from django.db import connection

from agents import tasks
from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.host import execution
from agents.host.checkpoints import checkpoint_file
from agents.models import Order
from receipts.models import Decision, Run
from tests.conftest import point_celery_at, start_worker_process, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ENDED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING, Run.Status.PARKED}
CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints", "checkpoint_migrations")


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _verdicts(run: Run) -> tuple[str, ...]:
    return tuple(run.handoffs.order_by("created_at", "pk").values_list("verdict", flat=True))


def assert_every_run_ended() -> None:
    """Nothing stuck, nothing applied twice: the invariants every fault test ends on."""
    stuck = list(Run.objects.exclude(status__in=ENDED).values_list("operation_id", "status"))
    assert stuck == []
    assert not Run.objects.filter(status=Run.Status.FAILED, error="").exists(), "a failed run without a reason"
    assert not Decision.objects.filter(applications__gt=1).exists()
    operations = list(Order.objects.values_list("operation_id", flat=True))
    assert len(operations) == len(set(operations)), "an order placed twice"


def test_a_run_whose_database_connections_are_terminated_mid_run_still_ends(celery_isolation):
    if connection.vendor != "postgresql":
        pytest.skip("terminating a worker's database connections needs PostgreSQL (pg_terminate_backend)")
    # libpq gives every connection of the worker (Django's and the checkpointer's) this name.
    app_name = f"sidewisp-fault-{uuid.uuid4().hex[:8]}"
    run = create_run("slow_supplier_purchase")
    worker = start_worker_process(f"pgkill{os.getpid()}", celery_isolation, extra_env={"PGAPPNAME": app_name})
    try:
        tasks.start_run.delay(run.pk)
        wait_until(lambda: Order.objects.filter(operation_id=run.operation_id).exists(), what="the order")
        assert _status(run) == Run.Status.RUNNING
        with connection.cursor() as cursor:  # the worker's connections only, never this test's own
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = %s",
                [app_name],
            )
            terminated = cursor.fetchone()[0]
        assert terminated >= 1
        wait_until(lambda: _status(run) in ENDED, what="the run to end after the failover", timeout=90)
        assert worker.process.poll() is None
    finally:
        worker.stop()

    run.refresh_from_db()
    print(f"\nfailover: {terminated} connections terminated; run {run.status} {run.error or ''}")
    print(f"  after {run.deliveries} deliveries")
    assert run.status in {Run.Status.COMPLETE, Run.Status.FAILED}
    assert_every_run_ended()


def test_sixteen_runs_started_at_once_on_a_fresh_database_all_end(celery_isolation):
    _drop_checkpoint_tables()
    # What `make run` and `make test` do on a fresh database: migrate (agents 0006 creates the tables).
    call_command("migrate", "agents", "0005", verbosity=0)
    call_command("migrate", "agents", verbosity=0)

    runs = {name: create_run(name) for name in SCENARIOS}  # the whole catalogue: 16 runs or more at once
    assert len(runs) >= 16
    workers = [start_worker_process(f"fresh{i}-{os.getpid()}", celery_isolation, concurrency=4) for i in range(2)]
    try:
        for run in runs.values():
            tasks.start_run.delay(run.pk)
        wait_until(
            lambda: all(_status(r) in ENDED for r in runs.values()), what=f"all {len(runs)} runs to end", timeout=150
        )
    finally:
        for worker in workers:
            worker.stop()

    reached = {
        name: tuple(r.handoffs.order_by("created_at", "pk").values_list("verdict", flat=True))
        for name, r in runs.items()
    }
    assert reached == {name: scenario.expected for name, scenario in SCENARIOS.items()}
    assert not Run.objects.filter(error__icontains="Deadlock").exists()
    assert_every_run_ended()


def test_a_run_whose_worker_was_killed_and_task_lost_is_taken_over_by_the_sweep(
    celery_isolation, private_redis, settings
):
    # The sweep below runs in this process with the workers' timings.
    settings.SIDEWISP_LEASE_SECONDS = 6
    settings.CELERY_BROKER_VISIBILITY_TIMEOUT = 5
    run = create_run("slow_supplier_purchase")
    with point_celery_at(private_redis.url):
        first = start_worker_process(f"doomed{os.getpid()}", celery_isolation, redis_url=private_redis.url)
        try:
            tasks.start_run.delay(run.pk)
            wait_until(lambda: Order.objects.filter(operation_id=run.operation_id).exists(), what="the order")
            first.kill()
        finally:
            first.stop()
        # The task is gone for good (a Redis that lost its data): no visibility timeout brings it back.
        client = redis.Redis.from_url(private_redis.url)
        client.delete("unacked", "unacked_index", celery_isolation)
        client.close()
        assert _status(run) == Run.Status.RUNNING

        second = start_worker_process(f"heir{os.getpid()}", celery_isolation, redis_url=private_redis.url)
        try:
            wait_until(lambda: execution.take_over_stalled() == 1, what="the sweep to take the run over", timeout=40)
            wait_until(lambda: _status(run) == Run.Status.COMPLETE, what="the taken-over run to complete", timeout=90)
        finally:
            second.stop()

    run.refresh_from_db()
    assert run.deliveries == 2
    assert _verdicts(run) == ("HEALTHY",)
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1
    assert_every_run_ended()


def _drop_checkpoint_tables() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {', '.join(CHECKPOINT_TABLES)}")
    else:
        checkpoint_file().unlink(missing_ok=True)
