"""/metrics: Prometheus text whose numbers are the database's, for a scraper with the token or an allowed address."""

from __future__ import annotations

import ipaddress
import json
import math
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from celery.signals import task_postrun
from channels.layers import channel_layers
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Min
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.observe import writer
from receipts.ingest import broadcast
from receipts.models import Handoff, Receipt
from receipts.tasks import beat_heartbeat, beat_heartbeat_key
from sidewisp.ops import metrics, writers
from sidewisp.ops.env import env_networks
from tests.conftest import wait_until

TOKEN = "scrape-token-for-tests-0123456789"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def metrics_settings(settings, celery_isolation):
    """A token, this test run's queue (its Redis keys and worker ping), and a short ping timeout."""
    settings.SIDEWISP_METRICS_TOKEN = TOKEN
    settings.SIDEWISP_METRICS_ALLOW = ()
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_isolation
    settings.SIDEWISP_WORKER_PING_TIMEOUT = 0.2
    yield settings
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(celery_isolation, metrics.publish_failures_key())
    client.delete(*[metrics.writer_count_key(name) for name in metrics.WRITER_COUNTS], writers.processes_key())
    client.close()
    cache.delete_many([metrics.worker_seen_key(), beat_heartbeat_key()])


def scrape(client, **headers) -> dict[str, list]:
    """{sample name: [(labels, value), ...]} of one scrape with the token."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **headers)
    assert response.status_code == 200
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(families: dict, name: str, **labels) -> float:
    return sum(v for sample_labels, v in families[name] if labels.items() <= sample_labels.items())


def test_it_counts_handoffs_by_verdict_and_agent_as_the_database_does(client, record_handoff):
    record_handoff("h-1", "op-1", "healthy")
    record_handoff("h-2", "op-1", "healthy")
    record_handoff("h-3", "op-2", "false_complete", sender="triage", receiver="support")
    record_handoff("h-4", "op-3", "stale_control")

    families = scrape(client)

    rows = families["sidewisp_handoffs"]
    assert sum(v for _, v in rows) == Handoff.objects.count() == 4
    for verdict in ("HEALTHY", "FALSE_COMPLETE", "STALE_CONTROL"):
        assert value(families, "sidewisp_handoffs", verdict=verdict) == Handoff.objects.filter(verdict=verdict).count()
    assert value(families, "sidewisp_handoffs", verdict="HEALTHY", sender="triage", receiver="sales") == 2
    assert value(families, "sidewisp_handoffs", verdict="FALSE_COMPLETE", receiver="support") == 1


def test_agents_beyond_the_busiest_share_one_label(client, record_handoff, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_AGENT_LABELS", 2)
    record_handoff("h-1", "op-1", "healthy")
    record_handoff("h-2", "op-1", "healthy")
    record_handoff("h-3", "op-2", "stale_control", sender="triage", receiver="support")

    families = scrape(client)

    assert {labels["receiver"] for labels, _ in families["sidewisp_handoffs"]} == {"sales", "other"}


def test_a_handoff_without_a_created_receipt_has_no_agent_label(client, contracts):
    from receipts.ingest.recording import record

    record(handoff_id="h-1", operation_id="op-1", part="final_status", value="complete")

    (labels, count), *_ = scrape(client)["sidewisp_handoffs"]
    assert (labels["sender"], labels["receiver"], count) == ("none", "none", 1)


def test_a_settled_false_completion_is_no_longer_open(client, record_handoff):
    from receipts.ingest.recording import note_settlement

    settled = record_handoff("h-1", "op-1", "false_complete")
    record_handoff("h-2", "op-2", "false_complete")
    note_settlement(settled, "task.accept", timezone.now())

    families = scrape(client)

    assert value(families, "sidewisp_open_false_completions") == 1
    assert value(families, "sidewisp_handoffs", verdict="FALSE_COMPLETE") == 2


def test_it_reports_open_and_overdue_waits_and_the_oldest_wait_age(client, record_handoff):
    record_handoff("h-1", "op-1", "waiting")
    record_handoff("h-2", "op-2", "waiting", deadline=datetime.now(UTC) - timedelta(minutes=5))
    record_handoff("h-3", "op-3", "healthy")
    first_wait = Receipt.objects.filter(part="wait").aggregate(at=Min("recorded_at"))["at"]

    before = datetime.now(UTC)
    families = scrape(client)
    after = datetime.now(UTC)

    assert value(families, "sidewisp_open_waits") == Handoff.objects.filter(wait_open=True).count() == 2
    assert value(families, "sidewisp_overdue_waits") == 1
    age = value(families, "sidewisp_open_wait_oldest_age_seconds")
    assert (before - first_wait).total_seconds() - 0.01 <= age <= (after - first_wait).total_seconds() + 0.01


def test_it_counts_recorded_receipts_per_part(client, record_handoff):
    record_handoff("h-1", "op-1", "healthy")
    record_handoff("h-2", "op-2", "waiting")

    families = scrape(client)

    assert value(families, "sidewisp_receipts_recorded_total") == Receipt.objects.count()
    assert value(families, "sidewisp_receipts_recorded_total", part="wait") == 1
    assert value(families, "sidewisp_receipts_recorded_total", part="created") == 2


def test_recording_latency_is_read_from_the_parts_own_times(client, record_handoff):
    from receipts.ingest.recording import record

    record_handoff("h-1", "op-1", "healthy")
    late = datetime.now(UTC) - timedelta(seconds=90)
    parts = dict(Handoff.objects.get(handoff_id="h-1").created_part)
    record(
        handoff_id="h-2",
        operation_id="op-2",
        part="created",
        value={**parts, "at": late.isoformat().replace("+00:00", "Z")},
    )

    families = scrape(client)

    # Every created, reduced, destination and verification receipt carries its own time.
    timed = Receipt.objects.filter(part__in=metrics.PART_TIME_FIELDS).count()
    assert value(families, "sidewisp_recent_recording_latency_receipts") == timed == 5
    assert 90 <= value(families, "sidewisp_recent_recording_latency_seconds", quantile="1.0") < 100
    assert value(families, "sidewisp_recent_recording_latency_seconds", quantile="0.5") < 5


def test_it_reads_the_celery_queue_length_from_the_broker(client, settings):
    client_redis = redis.Redis.from_url(settings.REDIS_URL)
    client_redis.rpush(settings.CELERY_TASK_DEFAULT_QUEUE, "a", "b", "c")
    client_redis.close()

    families = scrape(client)

    assert value(families, "sidewisp_redis_up") == 1
    assert value(families, "sidewisp_celery_queue_length") == 3


def test_an_event_the_channel_layer_did_not_take_is_counted(client, settings):
    before = value(scrape(client), "sidewisp_event_publish_failures_total")
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    channel_layers.backends.clear()
    try:
        event: broadcast.RunEvent = {
            "type": "run.changed",
            "run": 1,
            "operation_id": "op-1",
            "seq": 1,
            "status": "running",
            "dry_run": False,
            "at": "2026-07-30T10:00:00Z",
        }
        assert broadcast.publish(event) is False
    finally:
        channel_layers.backends.clear()

    assert value(scrape(client), "sidewisp_event_publish_failures_total") == before + 1


def test_the_evidence_writer_counts_of_every_worker_process_add_up(client, monkeypatch):
    counts = {"submitted": 9, "written": 8, "batches": 2, "blocked": 3, "dropped": 1, "failed": 1, "queued": 0}
    monkeypatch.setattr(writer, "stats", lambda: dict(counts))
    monkeypatch.setattr(writers, "_pushed_writer_counts", {})

    task_postrun.send(sender=None)  # a task ended in this worker process
    counts.update(blocked=5)
    task_postrun.send(sender=None)
    task_postrun.send(sender=None)  # nothing new: nothing added
    counts.update(blocked=1, dropped=0, failed=0)  # a new writer (a new process) counts from zero
    task_postrun.send(sender=None)

    families = scrape(client)
    assert value(families, "sidewisp_evidence_writer_blocked_total") == 5 + 1
    assert value(families, "sidewisp_evidence_writer_dropped_total") == 1
    assert value(families, "sidewisp_evidence_writer_failed_total") == 1


def test_each_process_shows_its_writers_queued_stored_and_dropped_entries(client, monkeypatch, settings):
    counts = {"submitted": 9, "written": 6, "batches": 2, "blocked": 3, "dropped": 1, "failed": 0, "queued": 2}
    monkeypatch.setattr(writer, "stats", lambda: dict(counts))
    monkeypatch.setattr(writers, "_pushed_writer_counts", {})
    here = writers.process_label()
    reported = {
        "worker-b:41": json.dumps({"queued": 0, "stored": 40, "dropped": 0, "at": time.time()}),
        "gone:7": json.dumps({"queued": 5, "stored": 1, "dropped": 0, "at": time.time() - 2 * 3600}),
    }
    with redis.Redis.from_url(settings.REDIS_URL) as other_processes:
        other_processes.hset(writers.processes_key(), mapping=reported)

    task_postrun.send(sender=None)  # a task ended in this process
    counts.update(written=8, queued=0)  # and the writer went on: the scrape reads this process live

    families = scrape(client)
    assert value(families, "sidewisp_evidence_writer_entries", process=here, state="queued") == 0
    assert value(families, "sidewisp_evidence_writer_entries", process=here, state="stored") == 8
    assert value(families, "sidewisp_evidence_writer_entries", process=here, state="dropped") == 1
    assert value(families, "sidewisp_evidence_writer_entries", process="worker-b:41", state="stored") == 40
    shown = {labels["process"] for labels, _ in families["sidewisp_evidence_writer_entries"]}
    assert shown == {here, "worker-b:41"}  # a process not heard from for over an hour is not shown
    with redis.Redis.from_url(settings.REDIS_URL) as kept:
        assert not kept.hexists(writers.processes_key(), "gone:7")


def test_heartbeat_ages_are_infinite_until_seen_and_small_after(client):
    families = scrape(client)
    assert value(families, "sidewisp_worker_up") == 0
    assert math.isinf(value(families, "sidewisp_worker_heartbeat_age_seconds"))

    beat_heartbeat()

    assert value(scrape(client), "sidewisp_beat_heartbeat_age_seconds") < 5


@pytest.mark.worker
def test_a_running_worker_is_up_with_a_fresh_heartbeat(client, worker_process):
    # The ping's answer is shared for a few seconds (sidewisp.ops.health): one from before the worker may linger.
    wait_until(lambda: value(scrape(client), "sidewisp_worker_up") == 1, what="the worker to be up", timeout=10)

    assert value(scrape(client), "sidewisp_worker_heartbeat_age_seconds") < 5


def test_the_number_of_queries_does_not_grow_with_the_handoffs(client, record_handoff):
    record_handoff("h-1", "op-1", "waiting")
    with CaptureQueriesContext(connection) as few:
        scrape(client)
    for n in range(2, 12):
        record_handoff(f"h-{n}", f"op-{n}", "healthy" if n % 2 else "waiting")
    with CaptureQueriesContext(connection) as many:
        scrape(client)

    # Issue 14's six aggregate queries, plus issue 19's count of unapplied intents, issue 22's last
    # retention run (one indexed read of the newest `retention.pruned` audit entry), issue 28's count of
    # evidence reports (one aggregate) and issue 29's count of silent observed runs.
    assert len(many.captured_queries) == len(few.captured_queries) <= 10


# --- access ---------------------------------------------------------------------------------


def test_it_refuses_a_request_without_a_token(client, record_handoff):
    record_handoff("h-1", "op-1", "healthy")

    response = client.get("/metrics")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"sidewisp_" not in response.content


def test_it_refuses_a_wrong_token(client):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN[:-1]}x")

    assert response.status_code == 401
    assert b"sidewisp_" not in response.content


def test_it_refuses_an_address_outside_the_allowed_networks(client, settings):
    settings.SIDEWISP_METRICS_TOKEN = ""
    settings.SIDEWISP_METRICS_ALLOW = (ipaddress.ip_network("10.0.0.0/8"),)

    response = client.get("/metrics", REMOTE_ADDR="192.168.1.20")

    assert response.status_code == 403
    assert b"sidewisp_" not in response.content


def test_it_answers_an_allowed_address_without_a_token(client, settings):
    settings.SIDEWISP_METRICS_TOKEN = ""
    settings.SIDEWISP_METRICS_ALLOW = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1"))

    response = client.get("/metrics", REMOTE_ADDR="10.20.30.40")

    assert response.status_code == 200
    assert b"sidewisp_open_waits" in response.content


def test_it_refuses_everyone_when_neither_token_nor_networks_are_configured(client, settings):
    settings.SIDEWISP_METRICS_TOKEN = ""

    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer ", REMOTE_ADDR="127.0.0.1")

    assert response.status_code == 403
    assert b"sidewisp_" not in response.content


def test_a_network_setting_that_is_not_an_address_stops_the_start_naming_the_variable(monkeypatch):
    monkeypatch.setenv("SIDEWISP_METRICS_ALLOW", "10.0.0.0/8,intranet")

    with pytest.raises(ImproperlyConfigured, match=r"SIDEWISP_METRICS_ALLOW.*intranet"):
        env_networks("SIDEWISP_METRICS_ALLOW")
