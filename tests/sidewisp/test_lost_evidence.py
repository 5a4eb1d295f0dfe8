"""Nothing dropped in silence (spec v1.3): an entry the evidence writer gives up on, one a server refuses with
HTTP 400, and an id stored redacted are counted, shown on the run they belong to, and counted in /metrics."""

from __future__ import annotations

import threading

import pytest
import redis
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families
from sidewisp_agent.config import WriterLimits

from agents.observe import remote, writer
from receipts.ingest.intake import PartEntry
from receipts.models import Run
from receipts.workers import sources
from sidewisp.ops import metrics
from tests.conftest import handoff_parts, wait_until

TOKEN = "scrape-token-for-tests-0123456789"


def healthy_entries(operation_id: str, handoff_id: str) -> list[PartEntry]:
    return [PartEntry(operation_id, handoff_id, part, value, "1") for part, value in handoff_parts("healthy")]


class DoomedSink:
    """The real database sink, except that a batch holding handoff h-doomed fails with an error that is no outage."""

    def __init__(self) -> None:
        self.local = writer.LocalSink()

    def write(self, entries) -> None:
        if any(getattr(entry, "handoff_id", None) == "h-doomed" for entry in entries):
            msg = "this entry can never be written"
            raise ValueError(msg)
        self.local.write(entries)


class GatedSink:
    """The real database sink behind a gate: nothing is written until the gate opens."""

    def __init__(self) -> None:
        self.local, self.gate = writer.LocalSink(), threading.Event()

    def write(self, entries) -> None:
        assert self.gate.wait(10)
        self.local.write(entries)


def written(buffer: writer.Writer, entries: list[PartEntry]) -> writer.Stats:
    for entry in entries:
        buffer.submit(entry)
    assert buffer.flush(30)
    buffer.stop()
    return buffer.stats()


def run_page(client, run: Run) -> str:
    response = client.get(reverse("sidewisp:run-detail", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


def scraped(client, name: str) -> float:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    families = text_string_to_metric_families(response.content.decode())
    return sum(sample.value for family in families for sample in family.samples if sample.name == name)


def evidence_reports(client, settings) -> dict[tuple[str, str], float]:
    settings.SIDEWISP_METRICS_TOKEN, settings.SIDEWISP_METRICS_ALLOW = TOKEN, ()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "sidewisp_evidence_reports":
                found[sample.labels["kind"], sample.labels["reason"]] = sample.value
    return found


@pytest.mark.django_db(transaction=True)
def test_an_entry_the_writer_gives_up_on_is_shown_on_its_run_and_counted(contracts, admin_client, settings):
    doomed = PartEntry("op-lost", "h-doomed", "created", dict(handoff_parts("healthy"))["created"], "1")

    stats = written(writer.Writer(DoomedSink(), max_backoff=0.01), [*healthy_entries("op-lost", "h-ok"), doomed])

    assert stats["dropped"] == 1
    run = Run.objects.get(operation_id="op-lost")
    assert list(run.handoffs.values_list("handoff_id", "verdict")) == [("h-ok", "HEALTHY")]
    report = run.reports.get(kind="evidence_dropped")
    assert report.detail == {"part": "created", "field": "", "reason": "not written: ValueError", "handoff": "h-doomed"}
    assert "could not be recorded as it was and was left out (not written: ValueError)" in run_page(admin_client, run)
    assert evidence_reports(admin_client, settings)[("evidence_dropped", "not written: ValueError")] == 1


@pytest.fixture
def refusals(settings, celery_isolation):
    """/metrics' count of refused API bodies, under this test run's own queue name."""
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_isolation
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(metrics.refused_receipts_key())
    yield
    client.delete(metrics.refused_receipts_key())
    client.close()


@pytest.mark.django_db(transaction=True)
def test_an_entry_the_server_refuses_with_400_is_shown_on_its_run_and_counted(
    live_server, contracts, admin_client, settings, refusals
):
    client = remote.Client(url=live_server.url, token=sources.issue("shop")[1], timeout=5.0, backoff=0.01)
    refused = PartEntry("op-400", "h-bad", "created", {"sender": ["not", "a", "name"]}, "1")

    stats = written(writer.Writer(remote.RemoteSink(client)), [*healthy_entries("op-400", "h-ok"), refused])

    assert stats["dropped"] == 0  # replaced by its report, which the server took
    run = Run.objects.get(operation_id="op-400")
    assert list(run.handoffs.values_list("handoff_id", "verdict")) == [("h-ok", "HEALTHY")]
    report = run.reports.get(kind="evidence_dropped")
    assert report.detail == {"part": "created", "field": "created.sender", "reason": "refused by the server: HTTP 400"}
    assert "(refused by the server: HTTP 400)" in run_page(admin_client, run)
    assert evidence_reports(admin_client, settings)[("evidence_dropped", "refused by the server: HTTP 400")] == 1
    # The server counts what it refused: the whole batch, then the bad entry on its own.
    assert scraped(admin_client, "sidewisp_api_receipts_refused_total") == 2


@pytest.mark.django_db(transaction=True)
def test_an_entry_a_full_buffer_drops_is_shown_on_its_run_once_there_is_room(contracts, admin_client):
    sink = GatedSink()
    buffer = writer.Writer(sink, capacity=1, max_batch=1, linger=0, submit_timeout=0.1)
    first, second, dropped = healthy_entries("op-full", "h-full")[:3]
    buffer.submit(first)
    wait_until(lambda: buffer.stats()["queued"] == 0, what="the writer took the first entry", interval=0.01)
    buffer.submit(second)  # the buffer is full now

    assert buffer.submit(dropped) is False

    sink.gate.set()
    assert buffer.flush(10)
    buffer.stop()
    assert buffer.stats()["dropped"] == 1
    run = Run.objects.get(operation_id="op-full")
    report = run.reports.get(kind="evidence_dropped")
    assert report.detail["reason"] == "not written: the evidence buffer stayed full"
    assert (report.detail["part"], report.detail["handoff"]) == (dropped.part, "h-full")
    assert "(not written: the evidence buffer stayed full)" in run_page(admin_client, run)


@pytest.mark.django_db(transaction=True)
def test_after_a_drop_a_full_buffer_drops_without_waiting_until_there_is_room_and_tells_every_run(contracts):
    sink = GatedSink()
    buffer = writer.Writer(sink, capacity=1, max_batch=1, linger=0, submit_timeout=0.1)
    first, second, dropped = healthy_entries("op-full", "h-full")[:3]
    buffer.submit(first)
    wait_until(lambda: buffer.stats()["queued"] == 0, what="the writer took the first entry", interval=0.01)
    buffer.submit(second)
    assert buffer.submit(dropped) is False  # the buffer stayed full for the whole wait
    buffer.limit(WriterLimits(capacity=1, wait_seconds=600))  # a wait that no test outlasts
    many = [healthy_entries("op-many", f"h-{n}")[0] for n in range(250)]
    last = healthy_entries("op-last", "h-last")[0]

    later = threading.Thread(target=lambda: [buffer.submit(entry) for entry in [*many, last]])
    later.start()
    wait_until(lambda: not later.is_alive(), what="the later entries dropped without a wait for room", timeout=10)

    assert buffer.stats()["dropped"] == 1 + 250 + 1
    sink.gate.set()
    assert buffer.flush(30)
    buffer.stop()
    assert Run.objects.get(operation_id="op-full").reports.filter(kind="evidence_dropped").count() == 1
    assert Run.objects.get(operation_id="op-many").reports.filter(kind="evidence_dropped").exists()
    # Beyond the first MAX_BATCH lost entries, a run that has none among them still gets its report.
    assert Run.objects.get(operation_id="op-last").reports.filter(kind="evidence_dropped").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_id_stored_redacted_is_shown_on_its_run_and_counted(contracts, admin_client, settings):
    secret = "sk-proj-abcdEFGH1234ijklMNOP5678"  # an operation id shaped like a provider key (spec v1.3)

    stats = written(writer.Writer(writer.LocalSink()), healthy_entries(secret, "h-key"))

    assert stats["dropped"] == 0
    (run,) = Run.objects.all()
    assert list(run.handoffs.values_list("handoff_id", "verdict")) == [("h-key", "HEALTHY")]
    assert run.reports.filter(kind="value_redacted", detail__field="operation_id").exists()
    assert secret not in run_page(admin_client, run)
    assert evidence_reports(admin_client, settings)[("value_redacted", "none")] == 1
