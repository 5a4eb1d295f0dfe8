"""Two deployments on one Redis and one queue name never eat each other's work (issue 19 §1).

Deployment A is this test run's database; deployment B a second database the test makes and migrates on
the same server (SQLite file or PostgreSQL), with its own deployment id. A worker of each consumes the
same queue on the same Redis. A decision taken in A is applied in A; B's worker, given it first, leaves it
in the queue with one log line; a run started in B is left by A's worker and run by B's.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import runner
from receipts import actions
from receipts.models import Decision, OutboxIntent, Run
from receipts.workers import deployment
from sidewisp.celery import app
from sidewisp.ops import envelope
from tests.conftest import database_url_for_subprocess, start_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class OtherDeployment:
    """Deployment B: a migrated database of its own, and the environment its processes run with."""

    url: str
    env: dict[str, str]
    key: str

    def worker(self, queue: str):
        """A worker of deployment B on `queue`."""
        return start_worker_process(f"b{os.getpid()}", queue, extra_env={"DATABASE_URL": self.url})

    def count(self, model: str, **filters: str) -> int:
        """How many `model` rows matching `filters` deployment B's database holds."""
        code = f"from receipts.models import {model}; print({model}.objects.filter(**{filters!r}).count())"
        done = self.manage("shell", "-c", code)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.strip().splitlines()[-1])

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        command = [sys.executable, str(settings.BASE_DIR / "manage.py"), *args]
        return subprocess.run(
            command, env=self.env, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture
def other_deployment(transactional_db, celery_isolation, tmp_path) -> Iterator[OtherDeployment]:
    url, drop = _second_database(tmp_path)
    env = {**os.environ, "DATABASE_URL": url, "SIDEWISP_QUEUE": celery_isolation, "REDIS_URL": settings.REDIS_URL}
    env["SIDEWISP_VAR_DIR"] = str(settings.VAR_DIR)
    try:
        other = OtherDeployment(url=url, env=env, key="")
        migrated = other.manage("migrate", "--no-input", "-v", "0", timeout=300)
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        other.key = other.manage("deployment_id").stdout.strip().splitlines()[-1]
        yield other
    finally:
        drop()


def _second_database(tmp_path: Path) -> tuple[str, Callable[[], None]]:
    if connection.vendor == "sqlite":
        return f"sqlite:///{tmp_path / 'deployment-b.sqlite3'}", lambda: None
    name = f"{connection.settings_dict['NAME']}_b"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return database_url_for_subprocess().rsplit("/", 1)[0] + f"/{name}", drop


class Output:
    """What the worker processes wrote so far (they inherit the test's stderr, which pytest captures)."""

    def __init__(self, capfd) -> None:
        self.capfd = capfd
        self.text = ""

    def has(self, words: str) -> bool:
        out, err = self.capfd.readouterr()
        self.text += out + err
        return words in self.text


def _refusal(task: str, foreign: str, own: str) -> str:
    return f"task {task} belongs to deployment {deployment.short(foreign)}, not this one ({deployment.short(own)})"


def test_a_decision_is_applied_in_its_own_deployment_and_left_by_the_other(
    other_deployment, owner, celery_isolation, capfd
):
    install_team_contracts()
    output = Output(capfd)
    own = deployment.current_id()
    assert other_deployment.key != own
    run = create_run("waiting_on_approval")
    runner.start_run(run)  # in this process, up to the approval wait
    wait = run.handoffs.get()
    worker_b = start_worker_process(
        f"b{os.getpid()}", celery_isolation, extra_env={"DATABASE_URL": other_deployment.url}
    )
    worker_a = None
    try:
        result = actions.decide(
            user=owner,
            handoff_id=wait.pk,
            kind="approve",
            token=wait.wait_part["resume_token_id"],
            key=uuid.uuid4().hex,
        )
        assert result.outcome == "done"

        # Only B's worker is there: it leaves the message for A, saying so once, and A's decision waits.
        wait_until(
            lambda: output.has(_refusal("agents.tasks.resume_run", own, other_deployment.key)),
            what="deployment B's worker to refuse deployment A's resume",
        )
        decision = Decision.objects.get()
        assert decision.applications == 0
        assert OutboxIntent.objects.get(kind="resume").applied_at is None

        worker_a = start_worker_process(f"a{os.getpid()}", celery_isolation)
        wait_until(lambda: _status(run) == "complete", what="deployment A's worker to apply A's decision")
        decision.refresh_from_db()
        assert decision.applications == 1
        assert OutboxIntent.objects.get(kind="resume").applied_at is not None
    finally:
        for worker in (worker_a, worker_b):
            if worker is not None:
                worker.stop()
    # B's database never heard of it: no resume was applied there.
    assert other_deployment.count("AuditEntry", action="wait.resume") == 0


def test_a_run_started_in_the_other_deployment_is_left_by_this_ones_worker_and_run_by_its_own(
    other_deployment, celery_isolation, capfd
):
    output = Output(capfd)
    own = deployment.current_id()
    runs_here = Run.objects.count()
    worker_a = start_worker_process(f"a{os.getpid()}", celery_isolation)
    worker_b = None
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "run_scenario", "healthy_purchase"]
    started = subprocess.Popen(
        [*command, "--timeout", "180"],
        env=other_deployment.env,
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: output.has(_refusal("agents.tasks.start_run", other_deployment.key, own)),
            what="deployment A's worker to refuse deployment B's start",
        )
        worker_b = start_worker_process(
            f"b{os.getpid()}", celery_isolation, extra_env={"DATABASE_URL": other_deployment.url}
        )
        report, _ = started.communicate(timeout=180)
    finally:
        if started.poll() is None:
            started.kill()
        for worker in (worker_a, worker_b):
            if worker is not None:
                worker.stop()
    assert started.returncode == 0, report
    assert '"verdict": "HEALTHY", "expected": "HEALTHY"' in report
    assert Run.objects.count() == runs_here  # nothing of B's was created, started or touched here


def test_every_task_message_names_its_deployment(db, celery_isolation):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(celery_isolation)
    try:
        app.send_task("receipts.tasks.beat_heartbeat")
        (raw,) = client.lrange(celery_isolation, 0, -1)
    finally:
        client.delete(celery_isolation)
        client.close()
    assert json.loads(raw)["headers"][envelope.HEADER] == deployment.current_id()


def test_a_foreign_message_is_requeued_with_one_line_naming_task_and_deployment(db, caplog):
    foreign = deployment.new_key()
    envelope._logged.clear()

    with (
        caplog.at_level(logging.WARNING, logger="sidewisp.ops.envelope"),
        pytest.raises(envelope.ForeignMessage) as refused,
    ):
        envelope.check("agents.tasks.resume_run", foreign)

    (line,) = [r.getMessage() for r in caplog.records if r.name == "sidewisp.ops.envelope"]
    assert refused.value.requeue is True
    assert line == (
        f"task agents.tasks.resume_run belongs to deployment {foreign[:12]}, not this one "
        f"({deployment.current_id()[:12]}): left in the queue for its workers"
    )


def test_a_message_naming_no_deployment_is_dropped_not_run(db, caplog):
    envelope._logged.clear()

    with (
        caplog.at_level(logging.WARNING, logger="sidewisp.ops.envelope"),
        pytest.raises(envelope.ForeignMessage) as refused,
    ):
        envelope.check("agents.tasks.start_run", None)

    assert refused.value.requeue is False
    assert "names no deployment" in caplog.records[-1].getMessage()


def test_a_worker_that_cannot_read_its_deployment_id_leaves_the_message_in_the_queue(monkeypatch):
    def unreadable() -> str:
        raise OperationalError("connection refused")

    monkeypatch.setattr(deployment, "current_id", unreadable)

    with pytest.raises(envelope.ForeignMessage) as refused:
        envelope.check("agents.tasks.start_run", deployment.new_key())

    assert refused.value.requeue is True


def test_this_deployments_message_passes(db):
    envelope.check("agents.tasks.start_run", deployment.current_id())


def test_the_deployment_id_survives_a_flush_of_the_database(transactional_db):
    before = deployment.current_id()

    from django.core.management import call_command

    call_command("flush", "--no-input", verbosity=0)

    assert deployment.ensure() == before


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def test_a_worker_refusing_foreign_messages_in_a_row_backs_off_until_one_of_its_own_runs(db, monkeypatch):
    """Issue 29 §7: 0.5 s, 1 s, 2 s … at most 8 s between refusals, not twice a second for ever."""
    pauses: list[float] = []
    monkeypatch.setattr(envelope.time, "sleep", pauses.append)
    envelope.check("agents.tasks.start_run", deployment.current_id())  # a clean start: the last one was ours
    foreign = deployment.new_key()

    def refuse(times: int) -> None:
        for _ in range(times):
            with pytest.raises(envelope.ForeignMessage):
                envelope.check("agents.tasks.resume_run", foreign)

    refuse(7)
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    envelope.check("agents.tasks.start_run", deployment.current_id())
    refuse(2)
    assert pauses[-2:] == [0.5, 1.0]  # one of its own ran: back to the short pause
