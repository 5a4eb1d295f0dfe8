"""The workers' status leaves the request path: beat's task pings, pages and /healthz read what it stored.

A page never pings (a ping that would is made to fail the test); /healthz believes a fresh status, fails
closed on a stale one while beat runs, and asks the workers itself only while beat is silent too.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from django.core.cache import cache
from django.urls import reverse

from receipts.tasks import beat_heartbeat_key
from sidewisp.ops import health

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def deployment(settings):
    """A queue name of this test's own: its status and heartbeat keys start empty."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"status-{uuid.uuid4().hex[:8]}"
    yield
    cache.delete_many([health._worker_key(), beat_heartbeat_key()])


@pytest.fixture
def pings(monkeypatch):
    """The pings asked for ((limit, ...)); each answers with `answer["workers"]`."""
    asked: list[int | None] = []
    answer = {"workers": ["w1@host", "w2@host"]}

    def ping(limit):
        asked.append(limit)
        return {"workers": answer["workers"][:limit] if limit else list(answer["workers"])}

    monkeypatch.setattr(health, "_ping", ping)
    return asked


def _beat(age: float = 0.0) -> None:
    cache.set(beat_heartbeat_key(), time.time() - age, 3600)


def _status(workers: list[str], age: float) -> None:
    at = time.time() - age
    cache.set(health._worker_key(), {"workers": workers, "at": at, "full_at": at}, 3600)


def test_the_task_stores_who_answered_and_counts_the_worker_running_it(pings):
    status = health.record_worker_status(me="w3@host")

    assert status["workers"] == ["w1@host", "w2@host", "w3@host"]
    assert health.worker_status() == {"ok": True, "detail": "3 answered 0 s ago"}


def test_between_full_pings_the_ping_stops_at_the_workers_known(pings):
    now = time.time()
    health.record_worker_status(now=now)
    health.record_worker_status(now=now + 2)
    health.record_worker_status(now=now + health.WORKER_REDISCOVER_SECONDS + 1)

    assert pings == [None, 2, None]  # a full ping first, then one that returns at two answers, then full again


def test_pages_and_the_system_page_never_ping_and_show_the_status_with_its_age(client, operator, pings):
    _beat()
    _status(["w1@host", "w2@host"], age=3)
    client.force_login(operator)

    system = client.get(reverse("sidewisp:system")).content.decode()
    overview = client.get(reverse("sidewisp:overview")).content.decode()

    assert re.search(r"2 answered (3|4|5|6) s ago", system)  # stored 3 s before the request
    assert 'data-system="ok"' in overview and "No Celery worker" not in overview
    assert pings == []


def test_a_stale_status_while_beat_runs_is_down_on_healthz_without_a_ping(client, pings):
    _beat()
    _status(["w1@host"], age=health.WORKER_STALE_AFTER_SECONDS + 13)

    response = client.get("/healthz")

    assert response.status_code == 503 and response.json()["status"] == "down"
    assert re.fullmatch(r"no worker status for 2\d s", response.json()["checks"]["worker"]["detail"])
    assert pings == []


def test_a_stale_status_is_a_banner_on_every_page_naming_when_it_was_last_seen(client, operator, pings):
    _beat()
    _status(["w1@host"], age=60)
    client.force_login(operator)

    overview = client.get(reverse("sidewisp:overview")).content.decode()

    assert 'data-system="down"' in overview and "No Celery worker is answering (last status " in overview
    assert pings == []


def test_with_beat_silent_too_healthz_asks_the_workers_itself_and_is_degraded_not_down(client, pings):
    _beat(age=60)
    _status(["w1@host"], age=60)

    response = client.get("/healthz")

    assert response.status_code == 200 and response.json()["status"] == "degraded"
    assert response.json()["checks"]["worker"] == {"ok": True, "detail": "1 answering"}
    assert pings == [1]


def test_with_beat_silent_and_no_worker_answering_healthz_is_down(client, pings, monkeypatch):
    monkeypatch.setattr(health, "_ping", lambda limit: {"workers": []})

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == {"ok": False, "detail": "no worker answered"}


def test_beat_schedules_the_status_task_often_enough_to_stay_fresh(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["worker-status"]

    assert entry["task"] == "sidewisp.tasks.record_worker_status"
    assert entry["schedule"] * 3 <= health.WORKER_STALE_AFTER_SECONDS
