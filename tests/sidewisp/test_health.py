from __future__ import annotations

import pytest
from django.test import override_settings


@pytest.mark.worker
def test_healthz_is_green_with_a_worker_and_503_once_it_stops(client, worker_process):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["checks"]["worker"]["ok"] is True

    worker_process.stop()
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["checks"]["worker"] == {"ok": False, "detail": "no worker answered"}
    assert body["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_healthz_reports_redis_down_as_503(client):
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "ConnectionError"}


def test_healthz_needs_no_login_and_leaks_no_configuration(client, db):
    response = client.get("/healthz")
    assert set(response.json()["checks"]) == {"database", "redis", "worker", "beat"}
    assert "redis://" not in response.content.decode()


@pytest.mark.django_db
def test_healthz_names_the_failing_checks_with_503_while_the_broker_is_down(client, monkeypatch):
    from sidewisp.celery import app

    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["worker"]["ok"] is False
    assert checks["worker"]["detail"] != "no worker answered"
    assert checks["redis"]["ok"] is False
    assert checks["database"]["ok"] is True
