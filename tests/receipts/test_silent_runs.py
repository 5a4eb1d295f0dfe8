"""Observed runs that go silent (issue 29 item 5): shown "silent since", counted, alerted; a receipt clears it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from receipts.ingest import intake, silence
from receipts.ingest.intake import PartEntry, ReportEntry, RunEntry
from receipts.models import AlertRule, Delivery, MiddlewareReport, NotificationChannel, Run
from receipts.notify import alerts
from tests.sidewisp.test_metrics import metrics_settings, scrape, value  # noqa: F401 - the fixture is used

pytestmark = pytest.mark.django_db

CREATED = {
    "sender": "intake",
    "receiver": "analyst",
    "route_version": "routes/1",
    "tool_call_id": "call-1",
    "required_context_keys": [],
    "at": "2026-01-01T00:00:00Z",
}


def apply(*entries) -> None:
    """As the evidence writer (or the receipts API) stores a batch: one transaction."""
    with transaction.atomic():
        intake.apply(list(entries))


def observed_run(operation_id: str, status: str = Run.Status.RUNNING) -> Run:
    apply(RunEntry(operation_id, Run.Status.RUNNING, thread_id=f"th-{operation_id}"))
    apply(PartEntry(operation_id, f"h-{operation_id}", "created", CREATED))
    if status != Run.Status.RUNNING:
        apply(RunEntry(operation_id, status))
    return Run.objects.get(operation_id=operation_id)


def evaluate(rule: AlertRule, now) -> str | None:
    with transaction.atomic():
        return alerts.evaluate(rule.pk, now=now)


@pytest.fixture
def silent_rule() -> AlertRule:
    channel = NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )
    return AlertRule.objects.create(name="apps gone quiet", kind=AlertRule.Kind.SILENT, channel=channel)


def test_an_observed_run_past_the_silence_bound_is_shown_silent_counted_and_alerted_until_a_receipt_comes(
    viewer_client, client, silent_rule
):
    run = observed_run("op-quiet")
    hosted = Run.objects.create(operation_id="op-hosted", thread_id="th-hosted", mode=Run.Mode.HOSTED, graph="demo")
    Run.objects.filter(pk=hosted.pk).update(status=Run.Status.RUNNING, heartbeat_at=timezone.now() - timedelta(days=1))
    waiting = observed_run("op-waiting", Run.Status.WAITING)
    before_bound = timezone.now() + silence.bound() - timedelta(seconds=5)
    later = timezone.now() + silence.bound() + timedelta(seconds=1)

    assert silence.mark_silent(now=before_bound) == 0  # within the bound: still running
    assert evaluate(silent_rule, before_bound) is None
    seq = Run.objects.get(pk=run.pk).seq

    assert silence.mark_silent(now=later) == 1
    assert silence.mark_silent(now=later) == 0  # marked once

    run.refresh_from_db()
    assert run.is_silent and run.status == Run.Status.RUNNING and run.seq > seq  # announced to the live pages
    assert not Run.objects.get(pk=hosted.pk).is_silent  # a hosted run is taken over, never "silent"
    assert not Run.objects.get(pk=waiting.pk).is_silent  # waiting on a person is not silence
    page = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "data-silent" in page and "Silent since" in page
    assert "<code>conclude</code> from the app ends the run" in page
    listed = viewer_client.get("/runs/").content.decode()
    assert listed.count("data-silent") == 1 and "silent since" in listed
    assert value(scrape(client), "sidewisp_runs_silent") == 1
    assert evaluate(silent_rule, later) == alerts.FIRED
    assert evaluate(silent_rule, later + timedelta(seconds=5)) is None  # fires once
    fired = Delivery.objects.get()
    assert fired.payload["condition"].startswith("1 observed runs silent for")

    # The app speaks again (a report is a receipt too): running as before, counted and alerted no more.
    apply(ReportEntry("op-quiet", "intake", MiddlewareReport.Kind.TOOL_ERROR, {"tool": "lookup"}, "tool-1"))

    run.refresh_from_db()
    assert not run.is_silent and run.status == Run.Status.RUNNING
    page = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "data-silent" not in page and "Running" in page
    assert "data-silent" not in viewer_client.get("/runs/").content.decode()
    assert value(scrape(client), "sidewisp_runs_silent") == 0
    assert evaluate(silent_rule, later + timedelta(seconds=10)) == alerts.RESOLVED


def test_a_receipt_keeps_an_observed_run_from_going_silent(viewer_client):
    run = observed_run("op-talking")
    bound = silence.bound()
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - bound - timedelta(seconds=1))

    apply(PartEntry("op-talking", "h-op-talking", "created", CREATED, "2"))

    assert silence.mark_silent() == 0
    assert not Run.objects.get(pk=run.pk).is_silent


def test_beat_marks_silent_runs(settings):
    from receipts.tasks import mark_silent_runs

    run = observed_run("op-beat")
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - silence.bound() - timedelta(seconds=1))

    assert settings.CELERY_BEAT_SCHEDULE["mark-silent-runs"]["task"] == "receipts.tasks.mark_silent_runs"
    assert mark_silent_runs() == 1
    assert Run.objects.get(pk=run.pk).is_silent


def test_the_overview_and_the_runs_filter_count_a_silent_run_as_silent_not_running(viewer_client):
    """Issue 29 §5: "silent since …", not running: the overview's task counts and the runs list's status filter
    say so too (its `silent` link lists it; `running` no longer does)."""
    quiet, talking = observed_run("op-quiet"), observed_run("op-talking")
    Run.objects.filter(pk=quiet.pk).update(heartbeat_at=timezone.now() - silence.bound() - timedelta(seconds=1))
    assert silence.mark_silent() == 1

    overview = viewer_client.get("/").content.decode()
    assert 'data-status-count="silent">1<' in overview and 'data-status-count="running">1<' in overview
    assert '?status=silent"' in overview

    def listed(status: str) -> set[int]:
        page = viewer_client.get("/runs/", {"status": status})
        assert page.status_code == 200
        return {run.pk for run in (quiet, talking) if f'id="run-row-{run.pk}"' in page.content.decode()}

    assert listed("silent") == {quiet.pk}
    assert listed("running") == {talking.pk}
