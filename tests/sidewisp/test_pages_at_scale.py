"""Pages at scale (issue 13): stored run summaries, keyset pages, bounded counts, flat query counts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Count, Q, Value
from django.db.models.functions import Concat
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts import actions
from receipts.ingest import health, runs
from receipts.models import AuditEntry, Handoff, MiddlewareReport, Run
from receipts.queries import dashboard
from tests.sidewisp.test_pages import bulk_handoffs

pytestmark = pytest.mark.django_db

RUNS = reverse("sidewisp:runs")


def _pages(cursor: int, run: Run) -> dict[str, str]:
    return {
        "overview": "/?window=7d",
        "runs": RUNS,
        "runs by agent": f"{RUNS}?agent=triage",
        "runs, older page": f"{RUNS}?older={cursor}",
        "runs, newer page": f"{RUNS}?newer={cursor}",
        "runs by verdict and window": f"{RUNS}?verdict=HEALTHY&window=7d",
        "runs by search": f"{RUNS}?q=p-1",
        "run": reverse("sidewisp:run-detail", args=[run.pk]),
        "waits": reverse("sidewisp:waits"),
        "false completions": reverse("sidewisp:false-completions"),
        "audit": reverse("sidewisp:audit"),
        "audit, older page": f"{reverse('sidewisp:audit')}?older={AuditEntry.objects.order_by('-at', '-pk')[3].pk}",
        "audit.csv": reverse("sidewisp:audit-csv"),
    }


def _query_counts(client) -> dict[str, int]:
    middle = Run.objects.order_by("-created_at", "-pk")[5]
    counts = {}
    for name, url in _pages(middle.pk, Run.objects.order_by("pk").first()).items():
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
            if response.streaming:
                b"".join(response.streaming_content)  # a streamed page queries while it streams
        assert response.status_code == 200, name
        counts[name] = len(queries)
    return counts


def _audit(n: int) -> None:
    AuditEntry.objects.bulk_create(
        AuditEntry(actor_name="oncall", action="run.stop", object_type="run", object_id=str(i), outcome="done")
        for i in range(n)
    )


def test_no_page_runs_more_queries_with_200_runs_than_with_10(client, operator):
    client.force_login(operator)
    bulk_handoffs(100)  # 10 runs
    _audit(10)
    few = _query_counts(client)
    # bulk_handoffs names its runs op-0, op-1, …: rename the first ones before adding 200 more.
    Run.objects.update(operation_id=Concat(Value("first-"), "operation_id"), thread_id=Concat(Value("first-"), "pk"))
    Handoff.objects.update(handoff_id=Concat(Value("first-"), "handoff_id"))
    bulk_handoffs(2_000)
    _audit(400)
    assert Run.objects.count() >= 200
    assert _query_counts(client) == few


# --- the stored summary ------------------------------------------------------------------------


def _from_scratch(run: Run) -> dict:
    """The summary counted over the run's handoffs, the way the runs list annotated it before issue 13."""
    handoffs = Handoff.objects.filter(run=run)
    counted = handoffs.aggregate(
        handoffs=Count("pk"), problems=Count("pk", filter=~Q(verdict__in=("HEALTHY", "WAITING_ON_APPROVAL")))
    )
    open_false = sum(1 for h in handoffs.filter(verdict="FALSE_COMPLETE") if actions.settlement(h) is None)
    latest = handoffs.order_by("-updated_at", "-pk").values_list("verdict", flat=True).first() or ""
    return {
        "handoff_count": counted["handoffs"],
        "problem_count": counted["problems"],
        "open_false_count": open_false,
        "latest_verdict": latest,
    }


def _stored(run: Run) -> dict:
    return Run.objects.filter(pk=run.pk).values(*health.SUMMARY_FIELDS).get()


def test_the_stored_run_summary_follows_receipts_status_changes_and_settlements(record_handoff, operator):
    first = record_handoff("h-s-1", "op-summary", "healthy")
    run = first.run
    assert (
        _stored(run)
        == _from_scratch(run)
        == {
            "handoff_count": 1,
            "problem_count": 0,
            "open_false_count": 0,
            "latest_verdict": "HEALTHY",
        }
    )
    false = record_handoff("h-s-2", "op-summary", "false_complete")
    record_handoff("h-s-3", "op-summary", "waiting")
    assert _stored(run) == _from_scratch(run)
    assert _stored(run)["open_false_count"] == 1 and _stored(run)["latest_verdict"] == "WAITING_ON_APPROVAL"
    runs.set_status(run, Run.Status.COMPLETE)
    actions.settle(user=operator, handoff_id=false.pk, how="accept", key=uuid.uuid4().hex, reason="checked by hand")
    assert _stored(run) == _from_scratch(run)
    assert _stored(run)["open_false_count"] == 0 and _stored(run)["problem_count"] == 1


def test_the_data_migration_fills_the_summary_of_runs_recorded_before_it(record_handoff):
    run = record_handoff("h-m-1", "op-migrated", "false_complete").run
    record_handoff("h-m-2", "op-migrated", "healthy")
    expected = _stored(run)
    Run.objects.filter(pk=run.pk).update(handoff_count=0, problem_count=0, open_false_count=0, latest_verdict="")
    health.fill_summaries(run_model=Run, handoffs=Handoff, reports=MiddlewareReport)
    assert _stored(run) == expected == _from_scratch(run)


# --- keyset pages ----------------------------------------------------------------------------


def _make_runs(n: int, *, start: datetime, prefix: str = "op-k") -> list[Run]:
    # Pairs share a created_at: the pk breaks the tie.
    return Run.objects.bulk_create(
        Run(operation_id=f"{prefix}-{i}", thread_id=f"t-{prefix}-{i}", created_at=start + timedelta(seconds=i // 2))
        for i in range(n)
    )


def test_walking_older_pages_lists_every_run_exactly_once_while_new_runs_arrive():
    start = datetime.now(UTC) - timedelta(hours=1)
    existing = {run.operation_id for run in _make_runs(60, start=start)}
    seen: list[str] = []
    page = dashboard.keyset_page(dashboard.runs(dashboard.RunFilters()), field="created_at", size=25)
    for arrival in range(10):
        seen += [run.operation_id for run in page.object_list]
        if page.older is None:
            break
        _make_runs(3, start=datetime.now(UTC), prefix=f"op-new-{arrival}")  # newer than everything listed
        page = dashboard.keyset_page(
            dashboard.runs(dashboard.RunFilters()), field="created_at", size=25, older=page.older
        )
    assert len(seen) == len(set(seen)) == 60 and set(seen) == existing


def test_walking_back_newer_pages_returns_to_the_newest_page():
    _make_runs(60, start=datetime.now(UTC) - timedelta(hours=1))
    found = dashboard.runs(dashboard.RunFilters())
    first = dashboard.keyset_page(found, field="created_at", size=25)
    second = dashboard.keyset_page(found, field="created_at", size=25, older=first.older)
    third = dashboard.keyset_page(found, field="created_at", size=25, older=second.older)
    assert len(third.object_list) == 10 and third.older is None
    back = dashboard.keyset_page(found, field="created_at", size=25, newer=third.newer)
    assert back.object_list == second.object_list
    top = dashboard.keyset_page(found, field="created_at", size=25, newer=back.newer)
    assert top.object_list == first.object_list and top.newer is None


def test_a_page_number_past_the_numbered_pages_redirects_to_the_last_of_them(viewer_client):
    response = viewer_client.get(RUNS, {"status": "queued", "page": "1000"})
    assert response.status_code == 302 and response["Location"] == f"{RUNS}?status=queued&page=40"


def test_a_shallow_page_number_still_works(viewer_client):
    _make_runs(60, start=datetime.now(UTC) - timedelta(hours=1))
    body = viewer_client.get(RUNS, {"page": "3"}).content.decode()
    assert body.count('id="run-row-') == 10 and 'rel="prev"' in body and 'rel="next"' not in body


# --- filters give what they gave before ------------------------------------------------------


def _reference(filters: dashboard.RunFilters) -> set[int]:
    """The runs a filter matches, computed in Python over every run and handoff."""
    handoffs = list(Handoff.objects.values("run_id", "verdict", "sender", "receiver", "handoff_id"))
    found = set()
    for run in Run.objects.all():
        mine = [h for h in handoffs if h["run_id"] == run.pk]
        q = filters.q.lower()
        ok = (
            (not filters.verdict or any(h["verdict"] == filters.verdict for h in mine))
            and (filters.verdict != "HEALTHY" or run.health not in health.ALARMING)
            and (not filters.agent or any(filters.agent in (h["sender"], h["receiver"]) for h in mine))
            and (not filters.health or run.health == filters.health)
            and (
                not q
                or q in run.operation_id.lower()
                or q in run.graph.lower()
                or q in run.scenario.lower()
                or any(q in (h["handoff_id"] + " " + h["sender"] + " " + h["receiver"]).lower() for h in mine)
            )
        )
        if ok:
            found.add(run.pk)
    return found


@pytest.mark.parametrize(
    "filters",
    [
        dashboard.RunFilters(agent="triage"),
        dashboard.RunFilters(agent="sales"),
        dashboard.RunFilters(verdict="FALSE_COMPLETE"),
        dashboard.RunFilters(verdict="HEALTHY"),
        dashboard.RunFilters(q="OP-1"),
        dashboard.RunFilters(q="h-3"),
        dashboard.RunFilters(q="sal"),
        dashboard.RunFilters(q="nothing-like-it"),
        dashboard.RunFilters(verdict="UNCERTAIN", agent="billing"),
    ],
)
def test_the_runs_filters_match_what_they_matched_before(filters):
    bulk_handoffs(200)
    bulk_handoffs_billing = Run.objects.create(operation_id="op-billing", thread_id="t-billing")
    Handoff.objects.create(
        handoff_id="h-billing", run=bulk_handoffs_billing, sender="billing", receiver="sales", verdict="UNCERTAIN"
    )
    Run.objects.filter(pk__in=Run.objects.order_by("pk").values("pk")[:3]).update(health=health.FAILING)
    assert set(dashboard.runs(filters).values_list("pk", flat=True)) == _reference(filters)


# --- counts that stop at a bound -------------------------------------------------------------


def test_the_runs_list_says_many_past_the_count_bound(viewer_client):
    _make_runs(dashboard.COUNT_BOUND + 1, start=datetime.now(UTC) - timedelta(days=1))
    body = viewer_client.get(RUNS).content.decode()
    assert "1,000+ runs" in body


def test_the_runs_list_counts_exactly_below_the_bound(viewer_client):
    _make_runs(dashboard.COUNT_BOUND - 1, start=datetime.now(UTC) - timedelta(days=1))
    body = viewer_client.get(RUNS).content.decode()
    assert "999 runs" in body and "1,000+" not in body


def test_the_overview_verdict_counts_stop_at_their_bound():
    bulk_handoffs(30)  # 6 of each verdict in the cycle
    counts = dict(dashboard.overview_counts(bound=5))
    assert str(counts["HEALTHY"]) == "5+" and counts["HEALTHY"].more
    assert str(counts["ROUTE_REJECTED"]) == "0" and not counts["ROUTE_REJECTED"].more
    exact = dict(dashboard.overview_counts())
    assert exact["HEALTHY"] == 6 and str(exact["FALSE_COMPLETE"]) == "6"


def test_the_open_false_completion_total_is_the_runs_stored_counts(record_handoff, operator):
    settled = record_handoff("h-f-1", "op-f-1", "false_complete")
    record_handoff("h-f-2", "op-f-2", "false_complete")
    record_handoff("h-f-3", "op-f-2", "false_complete")
    assert dashboard.false_completion_count() == 3
    actions.settle(user=operator, handoff_id=settled.pk, how="resolve", key=uuid.uuid4().hex, reason="fixed")
    assert dashboard.false_completion_count() == 2 == len(dashboard.false_completions())
