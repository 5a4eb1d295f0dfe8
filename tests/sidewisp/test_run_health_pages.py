"""Run health on the pages: a failed run is never green, the health filter never lists one as healthy,
the overview counts runs by health and status over a window, and the queries stay constant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from receipts.ingest import health, runs
from receipts.models import Handoff, MiddlewareReport, Run
from tests.sidewisp.test_pages import bulk_handoffs

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead_model_run() -> Run:
    """dead_model_after_handoff's evidence: a sound handoff, a dead model, the task failed."""
    run = Run.objects.create(operation_id="op-dead", thread_id="t-dead", scenario="dead_model_after_handoff")
    handoff = Handoff.objects.create(
        handoff_id="h-dead", run=run, sender="triage", receiver="sales", verdict="HEALTHY", final_status="failed"
    )
    for attempt in ("1", "2"):
        MiddlewareReport.objects.create(
            run=run, agent="sales", kind="model_failed", detail={"attempts": 3}, attempt=attempt
        )
    runs.set_status(run, Run.Status.FAILED, error="NoCompletionClaim")
    run.handoff = handoff
    return run


@pytest.fixture
def healthy_run() -> Run:
    run = Run.objects.create(operation_id="op-fine", thread_id="t-fine")
    Handoff.objects.create(
        handoff_id="h-fine",
        run=run,
        verdict="HEALTHY",
        final_status="complete",
        verification_part={"verifier": "order_exists", "result": "pass", "checked_at": "2026-07-30T10:05:00Z"},
    )
    runs.set_status(run, Run.Status.COMPLETE)
    return run


def _green(html: str) -> bool:
    return "tone-ok" in html


def test_a_failed_run_is_not_green_on_its_page(viewer_client, dead_model_run):
    html = viewer_client.get(reverse("sidewisp:run-detail", args=[dead_model_run.pk])).content.decode()
    run_part = html[html.index(f'id="run-{dead_model_run.pk}"') :]
    assert 'data-health="failing"' in run_part
    assert "Task failed (NoCompletionClaim)" in run_part
    assert "Model failed (3 attempts) ×2" in run_part  # noqa: RUF001
    assert not _green(run_part)


def test_identical_reports_are_one_row_with_a_count(viewer_client, dead_model_run):
    html = viewer_client.get(reverse("sidewisp:run-detail", args=[dead_model_run.pk])).content.decode()
    assert html.count('data-report="model_failed"') == 1
    assert 'data-count="2"' in html


def test_a_failed_run_is_not_green_in_the_runs_list(viewer_client, dead_model_run):
    html = viewer_client.get(reverse("sidewisp:runs")).content.decode()
    row = html[html.index(f'id="run-row-{dead_model_run.pk}"') :].split("</li>")[0]
    assert 'data-health="failing"' in row
    assert 'data-verdict="HEALTHY"' in row  # the handoff's verdict keeps its own column, not green
    assert not _green(row)


@pytest.mark.parametrize(
    "query", ["health=healthy", "verdict=HEALTHY", "verdict=HEALTHY&status=failed", "health=healthy&status=failed"]
)
def test_a_filter_that_claims_health_never_lists_a_failed_run(viewer_client, dead_model_run, healthy_run, query):
    html = viewer_client.get(f"{reverse('sidewisp:runs')}?{query}").content.decode()
    assert f'id="run-row-{dead_model_run.pk}"' not in html


def test_the_health_filter_lists_the_failing_run(viewer_client, dead_model_run, healthy_run):
    html = viewer_client.get(f"{reverse('sidewisp:runs')}?health=failing").content.decode()
    assert f'id="run-row-{dead_model_run.pk}"' in html
    assert f'id="run-row-{healthy_run.pk}"' not in html


def test_the_overview_counts_runs_by_health_and_status(viewer_client, dead_model_run, healthy_run):
    html = viewer_client.get(reverse("sidewisp:overview")).content.decode()
    assert 'data-health-count="failing">1<' in html
    assert 'data-health-count="healthy">1<' in html
    assert 'data-status-count="failed">1<' in html
    newest = html[html.index(f'id="newest-{dead_model_run.handoff.pk}"') :].split("</li>")[0]
    assert not _green(newest)


def test_the_overview_window_counts_only_its_window(viewer_client, dead_model_run):
    old = datetime.now(UTC) - timedelta(hours=3)
    Handoff.objects.create(handoff_id="h-old", run=dead_model_run, verdict="STALE_CONTROL", created_at=old)
    hour = viewer_client.get(f"{reverse('sidewisp:overview')}?window=1h").content.decode()
    day = viewer_client.get(f"{reverse('sidewisp:overview')}?window=24h").content.decode()
    assert '<div data-stat="handoffs"><dt>Handoffs</dt><dd>1</dd>' in hour
    assert '<div data-stat="handoffs"><dt>Handoffs</dt><dd>2</dd>' in day
    assert '?window=24h" aria-current="page"' in day
    assert "<svg" in day and "<polyline" in day


def test_the_window_stats_give_median_and_p95_durations():
    from receipts.queries import dashboard

    now = datetime.now(UTC)
    run = Run.objects.create(operation_id="op-d", thread_id="t-d")
    for i, seconds in enumerate([1, 2, 3, 4, 100]):
        start = now - timedelta(minutes=5)
        Handoff.objects.create(
            handoff_id=f"h-d{i}",
            run=run,
            verdict="HEALTHY",
            created_part={"at": start.isoformat()},
            destination_part={"started_at": (start + timedelta(seconds=seconds)).isoformat()},
        )
    stats = dashboard.window_stats(now - timedelta(hours=1), now)
    assert (stats.handoff_p50, stats.handoff_p95) == (3.0, 100.0)
    assert stats.handoffs == 5 and stats.problem_handoffs == 0


@pytest.mark.parametrize("n", [10, 2_000])
def test_the_overview_queries_stay_constant_with_its_window(viewer_client, django_assert_max_num_queries, n):
    bulk_handoffs(n)
    with django_assert_max_num_queries(14):  # issue 32 §4: the open waits and false completions in one query
        assert viewer_client.get(f"{reverse('sidewisp:overview')}?window=7d").status_code == 200


def test_health_is_a_stored_field_the_runs_list_reads_without_a_query_per_row(
    viewer_client, django_assert_max_num_queries
):
    for run in bulk_handoffs(200):
        health.refresh(run)
    with django_assert_max_num_queries(8):
        assert viewer_client.get(reverse("sidewisp:runs")).status_code == 200
