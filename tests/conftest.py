"""Shared fixtures. Integration tests use the real Redis at REDIS_URL and the real database."""

from __future__ import annotations

import pytest

# The contracts of the demo team (spec §2): triage hands to sales or support, sales to billing.
TEAM_CONTRACTS = {
    "wait_reasons": ["purchase_approval", "secret_disclosure", "irreversible_choice"],
    "routes": {
        "routes/1": {
            "triage": {
                "sales": ["request_type", "customer_tier", "consent_status"],
                "support": ["request_type", "ticket_id"],
            },
            "sales": {"billing": ["order_id"]},
        },
    },
}


@pytest.fixture
def team_contracts(db):
    from receipts.contracts import current_contracts, import_document

    import_document(TEAM_CONTRACTS)
    return current_contracts()


def healthy_parts() -> dict[str, dict]:
    """The evidence of one healthy triage → sales handoff, part by part."""
    return {
        "created": {
            "sender": "triage",
            "receiver": "sales",
            "route_version": "routes/1",
            "tool_call_id": "call_abc",
            "required_context_keys": ["request_type", "customer_tier", "consent_status"],
            "at": "2026-07-30T10:00:00Z",
        },
        "reduced": {
            "goto": "sales",
            "active_agent_before": "triage",
            "active_agent_after": "sales",
            "graph_scope": "parent",
            "tool_message_ids": ["call_abc"],
            "context_keys": ["request_type", "customer_tier", "consent_status"],
            "at": "2026-07-30T10:00:01Z",
        },
        "destination": {"node_id": "sales", "started_at": "2026-07-30T10:00:02Z", "attempt_id": "a-1"},
        "verification": {
            "verifier": "order_exists",
            "result": "pass",
            "checked_at": "2026-07-30T10:05:00Z",
            "receipt_id": "v-1",
        },
    }


# --- A real Celery worker, in its own process, on the real Redis and test database ---

import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def celery_isolation() -> str:
    """A queue and control exchange of this test run's own, so no other worker takes its tasks."""
    from sidewisp.celery import app

    name = f"sidewisp-test-{os.getpid()}"
    app.conf.task_default_queue = name
    app.conf.control_exchange = name
    return name


def database_url_for_subprocess() -> str:
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen
    env: dict[str, str]

    @property
    def hostname(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def answers(self, timeout: float = 1.0) -> bool:
        from sidewisp.celery import app

        return bool(app.control.ping(destination=[self.hostname], timeout=timeout))

    def kill(self) -> None:
        """SIGKILL the whole worker: no shutdown, no ack of what it was running."""
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker_process(name: str, queue: str, *, concurrency: int = 2) -> WorkerProcess:
    from django.conf import settings

    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocess(),
        "SIDEWISP_QUEUE": queue,
        "REDIS_URL": settings.REDIS_URL,
    }
    command = [sys.executable, "-m", "celery", "-A", "sidewisp", "worker", "-P", "threads",
               "-c", str(concurrency), "-n", f"{name}@%h", "-l", "WARNING", "--without-gossip", "--without-mingle"]
    process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env)
    worker = WorkerProcess(name=name, process=process, env=env)
    deadline = time.monotonic() + 60
    while not worker.answers():
        if process.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            pytest.fail(f"the Celery worker {name} did not start")
    return worker


@pytest.fixture
def worker_process(transactional_db, celery_isolation) -> Iterator[WorkerProcess]:
    worker = start_worker_process(f"w{os.getpid()}", celery_isolation)
    yield worker
    worker.stop()
